"""The KnowledgeStore's call table (services/knowledge_store/front.py `CALLS`): every call of the
front is in it, marked idempotent or not, and the clients retry exactly the idempotent ones; the
retrieval surface is declared in at most four product files."""
from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest

from nucleus.v1 import knowledge_store_pb2 as ks_pb
from services.knowledge_store import front
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from shared.inprocess import InProcessCaller
from tests.support.call_tables import assert_every_call_is_in_the_table_and_marked
from shared.grpc_client import channel_options

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("services", "shared", "ranking", "cli", "benchmarks")
#: The retrieval entry points of 14ae235, each declared in up to seven files, now `retrieve`
#: (`search_by_vector` stays the name of the KnowledgeStore's MCP tool, a seed contract).
REPLACED = ("candidates_by_filters", "search_by_filters", "candidates_by_vector_with_completion",
            "candidates_by_both_legs", "candidates_by_vector", "keyword_candidates")
ENTRY_POINTS = ("retrieve", "score_keywords")


def test_every_call_of_the_front_is_in_the_table_and_marked():
    assert_every_call_is_in_the_table_and_marked(front.StoreFront, front.CALLS)


def test_every_rpc_of_the_service_is_a_call_of_the_table_or_a_seed_read():
    service = ks_pb.DESCRIPTOR.services_by_name["KnowledgeStore"]
    rpcs = {m.name for m in service.methods}
    assert {c.rpc for c in front.CALLS.values()} | set(front.SEED_READS) == rpcs


def test_the_channel_retries_exactly_the_idempotent_calls():
    config = json.loads(dict(channel_options(front.idempotent_methods()))["grpc.service_config"])
    [method] = config["methodConfig"]
    retried = {f"/{n['service']}/{n['method']}" for n in method["name"]}
    assert retried == front.idempotent_methods()
    assert "/nucleus.v1.KnowledgeStore/Retrieve" in retried and "/nucleus.v1.KnowledgeStore/GetEntries" in retried
    assert "/nucleus.v1.KnowledgeStore/IngestDocuments" in retried       # by the key the client sends
    for never in ("DeleteArtifacts", "RecordFeedback", "PutRankingProfile", "RestoreTenant"):
        assert f"/nucleus.v1.KnowledgeStore/{never}" not in retried


def test_the_in_process_client_serves_every_call_of_the_table_and_nothing_else():
    client = InProcessKnowledgeStoreClient(object(), InProcessCaller(None, "knowledge_store", False))
    for name in front.CALLS:
        assert callable(getattr(client, name)), name
    with pytest.raises(AttributeError, match="no call 'candidates_by_filters'"):
        client.candidates_by_filters
    assert not hasattr(KnowledgeStoreClient, "candidates_by_filters")


@functools.cache
def _product_sources() -> dict[str, str]:
    """Product file (relative path) -> its text, generated protobuf modules left out (read once)."""
    return {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
            for top in PRODUCT for path in (ROOT / top).rglob("*.py")
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))}


def _declaring_files(name: str) -> set[str]:
    """The product files declaring a function `name`: parsed where `def name` occurs in the text
    (every declaration contains it), the declaration then confirmed in the syntax tree."""
    mention = re.compile(rf"\bdef[\s\\]+{re.escape(name)}\b")
    return {rel for rel, text in _product_sources().items() if mention.search(text)
            and any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
                    for n in ast.walk(ast.parse(text)))}


def test_each_retrieval_entry_point_is_declared_in_at_most_four_product_files():
    for name in ENTRY_POINTS:
        files = _declaring_files(name)
        assert files and len(files) <= 4, f"{name} is declared in {sorted(files)}"
        assert "services/knowledge_store/front.py" in files
    for name in REPLACED:
        assert not _declaring_files(name), f"{name} is declared again: {sorted(_declaring_files(name))}"
