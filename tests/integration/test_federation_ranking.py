"""Federation, ranking side, with real processes: a RAGPipeline (over the session stack's
KnowledgeStore and LlmOrchestration) federating the authenticated secure stack (another
Nucleus, called with its own API key), an independent RAG MCP server scoring in raw BM25
(tests/support/foreign_rag_server.py), a source that dies mid-query and one that never answers.

Checked: the remote document ranks where a single index holding everything puts it, whatever
the remote's scale; explanations and results name their source; per-source reports, partial
answers and `degraded`; a dead or hanging source does not hold the answer past its deadline;
local-only answers are those of a RAGPipeline with no sources at all."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from mcp.shared.exceptions import MCPError

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from benchmarks.secure_stack import corpus
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from tests.support import background
from tests.support.mcp_clients import http_client, structured
from tests.support.processes import stop, wait_ready

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TENANT, SINGLE = "fedrank", "fedrank-single"
QUERY = "How do I reset the battery fuse on a Pallas robot?"
KEY_ENV = "NUCLEUS_ITEST_REMOTE_NUCLEUS_KEY"
HANG_TIMEOUT_S = 1.5
LOCAL_DOCS = [
    ("kitchen-rota", "Kitchen cleaning rota", "Wipe the counters and empty the dishwasher every evening."),
    ("turbine-check", "Turbine inspection", "Inspect the turbine blades for cracks and check the gearbox oil."),
    ("fleet-budget", "Fleet budget 2026", "The robot fleet budget covers spare batteries and new chargers."),
]
# The foreign server's corpus: a document full of the query's words that answers nothing (its raw
# BM25 towers over any [0, 1] score), and one about something else.
FOREIGN_DOCS = [
    {"id": "battery-of-tests", "title": "Battery of tests: fuse, reset, Pallas",
     "text": "Battery battery battery: the battery of tests (fuse test, reset test, Pallas test) is a "
             "psychology term for a battery of questionnaires; battery, fuse, reset."},
    {"id": "statins", "title": "Statins", "text": "Statins lower LDL cholesterol."},
]


def _doc(aid: str, title: str, body: str) -> DocumentIn:
    return DocumentIn(artifact=ArtifactMeta(artifact_id=aid, title=title, source_type="note", source_id="notes",
                                            source_uri=f"https://notes.example/{aid}"), content=body)


def _public_acme() -> list[DocumentIn]:
    """The secure stack's acme documents the remote's key (alice, no groups) may see."""
    return [d for d in corpus()["acme"] if not d.artifact.visibility_groups
            and d.artifact.source_id != "engineering-wiki"]


class _Socket(threading.Thread):
    """A source that accepts connections and then either never answers (`hang`) or reads the
    request and drops the connection (`die`: a server killed mid-query)."""

    def __init__(self, mode: str) -> None:
        super().__init__(daemon=True)
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        self.held: list[socket.socket] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.mode == "hang":
                self.held.append(conn)
            else:
                conn.recv(65536)
                conn.close()

    def stop(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def _wait_ready(path: Path, proc: subprocess.Popen, what: str, timeout_s: float = 120.0) -> dict:
    return wait_ready(path, proc, what, timeout_s)


_stop = stop


@pytest.fixture(scope="module")
async def federated(stack, secure_corpus, tmp_path_factory):
    """The federating RAGPipeline's addresses; the sources: secure stack, foreign, die, hang."""
    data = tmp_path_factory.mktemp("federated-ranking")

    async def ingest() -> None:
        client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"], ingest_timeout_s=120)
        try:
            local = [_doc(*d) for d in LOCAL_DOCS]
            await client.ingest(TENANT, "", local)
            await client.ingest(SINGLE, "", local + _public_acme())
        finally:
            await client.close()

    await ingest()                 # on the suite's loop (tests/support/processes.py `run_cli` says why)
    (data / "foreign.jsonl").write_text("".join(json.dumps(d) + "\n" for d in FOREIGN_DOCS))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    foreign = subprocess.Popen([sys.executable, "-m", "tests.support.foreign_rag_server", "--ready-file",
                                str(data / "foreign.json"), "--corpus", str(data / "foreign.jsonl"),
                                "--score", "bm25"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    procs, sockets = [foreign], [_Socket("die"), _Socket("hang")]
    for s in sockets:
        s.start()
    try:
        foreign_url = _wait_ready(data / "foreign.json", foreign, "foreign RAG server")["url"]
        sources = [
            {"id": "nucleus", "kind": "rag", "url": secure_corpus.mcp_url, "credential_env": KEY_ENV,
             "groups": ["eng"], "timeout_s": 20, "reputation": 0.5},
            {"id": "foreign", "kind": "rag", "url": foreign_url, "groups": ["eng"], "timeout_s": 10,
             "reputation": 0.5},
            {"id": "dies", "kind": "rag", "url": sockets[0].url, "groups": ["eng"], "timeout_s": 10},
            {"id": "hangs", "kind": "rag", "url": sockets[1].url, "groups": ["eng"], "timeout_s": HANG_TIMEOUT_S},
        ]
        (data / "sources.json").write_text(json.dumps({"sources": sources}))
        rag_env = {**env, "NUCLEUS_DATA_DIR": str(data), "NUCLEUS_SOURCES_FILE": str(data / "sources.json"),
                   KEY_ENV: secure_corpus.keys["alice"],
                   "NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET": stack["knowledge_store"]["grpc"],
                   "NUCLEUS_RAG_LLM_TARGET": stack["llm_orchestration"]["grpc"],
                   "NUCLEUS_LOCAL_TENANT": TENANT, "NUCLEUS_LOCAL_USER": "ann", "NUCLEUS_LOCAL_GROUPS": "eng",
                   "NUCLEUS_RAG_RATE_LIMIT_PER_S": "0"}
        rag = subprocess.Popen([sys.executable, "-m", "services.rag_pipeline.main", "--grpc-port", "0",
                                "--mcp-port", "0", "--ready-file", str(data / "rag.json")], cwd=ROOT, env=rag_env,
                               stdout=open(data / "rag.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(rag)
        yield _wait_ready(data / "rag.json", rag, "federating rag_pipeline")
    finally:
        def stop_processes() -> None:
            for p in reversed(procs):
                _stop(p)
            for s in sockets:
                s.stop()
        background.stop_in_background("federated-ranking", stop_processes)   # while the next module runs


async def _search(target: str, tenant: str, sources: tuple[str, ...] = (), top_k: int = 8):
    async with grpc.aio.insecure_channel(target) as channel:
        request = rag_pb.SearchAndRankRequest(tenant_id=tenant, user_query_text=QUERY, top_k_final_rank=top_k,
                                              sources=list(sources))
        request.ranking_prefs.explain = True
        return await rag_grpc.RagPipelineStub(channel).SearchAndRank(request, timeout=60)


async def test_the_remote_document_ranks_where_a_single_index_puts_it_whatever_the_remote_scale(federated, stack):
    single = await _search(stack["rag_pipeline"]["grpc"], SINGLE)
    started = time.perf_counter()
    fed = await _search(federated["grpc"], TENANT)
    elapsed = time.perf_counter() - started
    best = single.results[0].associated_artifact.artifact_id
    top = fed.results[0]
    assert top.source_id == top.explanation.source_id == "nucleus"
    assert top.associated_artifact.artifact_id == f"nucleus:{best}"
    assert top.explanation.dense_source == top.explanation.bm25_source == "rescored"
    foreign = [r for r in fed.results if r.source_id == "foreign"]
    assert foreign and foreign[0].persona_knowledge_entry_id == "foreign:battery-of-tests"
    # A raw-score sort would have put it first: its raw BM25 is far above the remote 4R score.
    assert foreign[0].explanation.remote_score > 1.0 > top.explanation.remote_score
    assert list(fed.results).index(foreign[0]) > 0
    assert {r.source_id for r in fed.results} >= {"nucleus", "foreign"}
    assert all(r.explanation.source_id == r.source_id for r in fed.results)
    # Per-source reports: the dead one with its error, the hanging one cut at its deadline.
    reports = {s.source_id: s for s in fed.sources}
    assert (reports["local"].status, reports["nucleus"].status, reports["foreign"].status) == ("ok", "ok", "ok")
    assert reports["nucleus"].result_count > 0 and reports["foreign"].result_count == 1
    assert reports["dies"].status == "error" and reports["dies"].error_message
    assert reports["hangs"].status == "timeout", reports["hangs"].error_message
    assert reports["hangs"].latency_ms < HANG_TIMEOUT_S * 1000 + 500
    assert fed.degraded and any(r.startswith("source dies error") for r in fed.degraded_reasons)
    assert elapsed < 20.0          # the hanging source (which never answers) did not hold the answer


async def test_local_only_answers_are_those_of_a_pipeline_without_sources(federated, stack):
    plain = await _search(stack["rag_pipeline"]["grpc"], TENANT)
    local = await _search(federated["grpc"], TENANT, sources=("local",))
    assert [(r.persona_knowledge_entry_id, r.overall_rank_score, r.explanation.bm25, r.explanation.dense_cosine)
            for r in plain.results] == \
           [(r.persona_knowledge_entry_id, r.overall_rank_score, r.explanation.bm25, r.explanation.dense_cosine)
            for r in local.results]
    assert all(r.source_id == "local" for r in local.results) and plain.results
    assert [s.source_id for s in local.sources] == ["local"] and list(plain.sources) == []


async def test_rag_search_takes_a_selection_and_reports_each_source(federated):
    async with http_client(federated["mcp"]) as client:
        out = structured(await client.call_tool("rag_search", {"search_phrases": [QUERY],
                                                               "sources": ["foreign", "dies"]}))
        with pytest.raises(MCPError, match=r"Invalid params: sources: unknown source 'nosuch'; accepted: local"):
            await client.call_tool("rag_search", {"search_phrases": [QUERY], "sources": ["nosuch"]})
        ranked = structured(await client.call_tool("search_and_rank", {"user_query_text": QUERY,
                                                                        "sources": ["foreign", "local"]}))
    assert {r["source_id"] for r in ranked["results"]} == {"foreign", "local"}
    assert all(r["explanation"]["source_id"] == r["source_id"] for r in ranked["results"])
    assert [s["source_id"] for s in ranked["sources"]] == ["local", "foreign"] and not ranked["degraded"]
    assert [s["segment_uid"] for s in out["segments"]] == ["foreign:battery-of-tests"]
    assert {s["source_id"]: s["status"] for s in out["sources"]} == {"foreign": "ok", "dies": "error"}
    assert out["degraded"] is True


async def test_discovery_merges_every_remote_and_raw_results_search_a_remote_resource(federated):
    async with http_client(federated["mcp"]) as client:
        found = structured(await client.call_tool("rag_discover_resources", {"username": "forged"}))
        resources = found["results"]["resources"]
        by_server: dict[str, list[dict]] = {}
        for r in resources:
            by_server.setdefault(r["serverId"], []).append(r)
        remote_ids = [r["id"] for r in by_server["nucleus"]]
        assert by_server["local"] and all(r["connectionStatus"] == "connected" for r in by_server["local"])
        assert remote_ids and all(i.startswith("nucleus:") for i in remote_ids)
        assert [r["id"] for r in by_server["foreign"]] and by_server["foreign"][0]["connectionStatus"] == "connected"
        assert [(r["id"], r["connectionStatus"]) for r in by_server["dies"]] == [("dies", "error")]
        assert by_server["hangs"][0]["connectionStatus"] == "error" and by_server["hangs"][0]["error"]
        raw = structured(await client.call_tool("rag_get_raw_results", {
            "username": "forged", "query": QUERY, "sources": [by_server["foreign"][0]["id"], "nucleus"],
            "top_k": 5}))
    hits = raw["results"]["hits"]
    assert {h["id"].split(":", 1)[0] for h in hits} == {"nucleus", "foreign"}
    assert {s["source_id"]: s["status"] for s in raw["meta_data"]["sources"]} == {"nucleus": "ok", "foreign": "ok"}
    assert raw["meta_data"]["degraded"] is False


async def test_why_not_explains_a_remote_document_from_the_search_s_remote_hits(federated):
    """A remote document is explained from the hits its source returned, ranked by the same code
    as the search (its overall score is the search's); an id no source returned answers as missing."""
    args = {"user_query_text": QUERY, "sources": ["nucleus", "foreign"]}
    async with http_client(federated["mcp"]) as client:
        ranked = structured(await client.call_tool("search_and_rank", {**args, "top_k_final_rank": 20}))
        top = ranked["results"][0]
        answer = structured(await client.call_tool("rag_why_not", {
            **args, "top_k_final_rank": 1, "artifact_ids": [
                "foreign:battery-of-tests", top["associated_artifact"]["artifact_id"], "foreign:no-such-doc"]}))
    foreign = next(r for r in ranked["results"] if r["source_id"] == "foreign")
    cut, shown, made_up = answer["documents"]
    assert top["source_id"] == "nucleus" and (shown["deciding_factor"], shown["rank"], shown["source"]) == (
        "shown", 1, "nucleus")
    assert (cut["found"], cut["source"], cut["entry_id"]) == (True, "foreign", "foreign:battery-of-tests")
    assert cut["deciding_factor"] == ("page_cut" if cut["rank"] <= 5 else "out_ranked") and cut["rank"] > 1
    assert cut["overall"] == pytest.approx(foreign["overall_rank_score"], abs=1e-5)
    assert cut["remote_score"] > 1.0 and set(cut["scores"]) == {"relevancy", "recency", "richness", "reputation"}
    assert cut["keyword"]["how"] == "rescored" and cut["versus"]["entry_id"] == top["persona_knowledge_entry_id"]
    assert (made_up["found"], made_up["deciding_factor"], made_up["source"]) == (False, "", "")
    assert made_up["error"] and "no-such-doc" not in json.dumps(made_up).replace("foreign:no-such-doc", "")
