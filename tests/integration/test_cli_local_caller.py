"""The CLI keeps the docs' promises against the session stack (authentication off):

- one local caller, one principal: `nucleus search` answers as the local principal — the tenant,
  user and groups RAGPipeline's MCP endpoint gives an unauthenticated local caller — so documents
  restricted to a group it is not in are hidden from it exactly as from MCP `search_and_rank`;
  `--as-operator` shows them; the output says which principal answered; `--tenant` names the
  local principal's tenant, as it names the tenant `nucleus ingest` writes to;
- a KnowledgeStore too slow for the deadline is reported by `search_and_rank` with the kind
  docs/MCP.md documents (`deadline_exceeded: …`);
- a bad `NUCLEUS_CHAT_MAX_TOOL_ROUNDS` is one line naming the variable, no traceback.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli import main as cli_main
from services.knowledge_store.client import KnowledgeStoreClient
from tests.support.mcp_clients import error_text, http_client, structured
from tests.support.processes import run_cli

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo" / "corpus"
TENANT = "itest"                  # the session stack's NUCLEUS_LOCAL_TENANT (tests/integration/conftest.py)
QUERY = "suspected fleet compromise runbook"
DOCS = ("security-runbook-pallas-fleet-compromise.md", "security-postmortem-2025-credential-leak.md",
        "security-incident-response-policy-2026.md", "security-incident-reporting-2025.md")


@pytest.fixture(scope="module")
async def restricted(stack) -> set[str]:
    """The demo's security documents in the local principal's tenant; the titles of those
    restricted to the `security-team` group."""
    from shared.documents import load_document

    docs = [load_document(DEMO / name) for name in DOCS]
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    try:
        await client.ingest(TENANT, "", docs)
    finally:
        await client.close()
    titles = {d.artifact.title for d in docs if "security-team" in d.artifact.visibility_groups}
    assert len(titles) == 3, titles
    return titles


def search_argv(stack, data_dir: Path, *extra: str, tenant: str = TENANT) -> list[str]:
    return ["--data-dir", str(data_dir), "search", QUERY, "--tenant", tenant,
            "--rag-pipeline-target", stack["rag_pipeline"]["grpc"], *extra]


def cli_run(argv: list[str]) -> subprocess.CompletedProcess:
    """The CLI as a process of its own (tests/support/processes.py `run_cli`)."""
    return run_cli(argv, timeout_s=120)


def cli_search(stack, data_dir: Path, capsys, *extra: str) -> tuple[int, dict | None]:
    """`nucleus search QUERY --tenant itest --json …`: (exit code, the JSON)."""
    done = cli_run(search_argv(stack, data_dir, "--json", *extra))
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else None)


def one_line(text: str) -> str:
    return " ".join(text.split())         # the error console wraps at its width


def titles_of(body: dict) -> set[str]:
    key = "associated_artifact" if "associated_artifact" in (body.get("results") or [{}])[0] else "associatedArtifact"
    return {r[key].get("title", "") for r in body.get("results", [])}   # an untitled artifact omits it


def test_cli_search_answers_as_the_local_principal_like_mcp_and_as_operator_only_when_asked(
        stack, restricted, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NUCLEUS_API_KEY", raising=False)

    async def mcp_search() -> dict:
        async with http_client(stack["rag_pipeline"]["mcp"]) as client:
            return structured(await client.call_tool("search_and_rank", {"user_query_text": QUERY}))

    mcp = asyncio.run(mcp_search())
    assert titles_of(mcp) and not titles_of(mcp) & restricted, titles_of(mcp)

    code, local = cli_search(stack, tmp_path, capsys)
    assert code == 0
    assert titles_of(local) == titles_of(mcp)                       # one local caller, one answer
    assert local["answeredAs"].startswith("local principal ") and f"of tenant {TENANT}" in local["answeredAs"]

    code, operator = cli_search(stack, tmp_path, capsys, "--as-operator")
    assert code == 0
    assert titles_of(operator) & restricted, titles_of(operator)    # the operator's wider view, when asked
    assert operator["answeredAs"].startswith("the operator")


def test_cli_search_table_names_the_principal_that_answered(stack, restricted, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NUCLEUS_API_KEY", raising=False)
    done = cli_run(search_argv(stack, tmp_path))
    code, out = done.returncode, one_line(done.stdout)
    assert code == 0
    assert "answered as local principal" in out and f"of tenant {TENANT}" in out and "--as-operator" in out


def test_cli_search_acts_in_the_tenant_it_names_as_ingest_does(stack, tmp_path, capsys, monkeypatch):
    """Authentication off: `--tenant` names the local principal's tenant, as `nucleus ingest
    --tenant` names the tenant it writes to (MCP's local caller keeps NUCLEUS_LOCAL_TENANT)."""
    from shared.documents import load_document

    monkeypatch.delenv("NUCLEUS_API_KEY", raising=False)
    doc = load_document(DEMO / DOCS[3])

    async def ingest() -> None:
        client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
        try:
            await client.ingest("cli-tenant", "", [doc])
        finally:
            await client.close()

    asyncio.run(ingest())
    done = cli_run(search_argv(stack, tmp_path, "--json", tenant="cli-tenant"))
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert titles_of(body) == {doc.artifact.title}
    assert body["answeredAs"].startswith("local principal ") and "of tenant cli-tenant" in body["answeredAs"]


async def test_a_knowledge_store_too_slow_is_deadline_exceeded_as_mcp_md_documents(stack, tmp_path):
    table = (ROOT / "docs" / "MCP.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| a backend down or too slow"))
    assert "`deadline_exceeded: …`" in row and "`unavailable: …`" in row
    ready = tmp_path / "rag.ready.json"
    env = dict(os.environ, NUCLEUS_DATA_DIR=str(tmp_path), NUCLEUS_RAG_GRPC_PORT="0", NUCLEUS_RAG_MCP_PORT="0",
               NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET=stack["knowledge_store"]["grpc"],
               NUCLEUS_RAG_LLM_TARGET=stack["llm_orchestration"]["grpc"],
               NUCLEUS_RAG_DEADLINE_S="0.001", NUCLEUS_LOCAL_TENANT=TENANT)   # no store answers that fast
    proc = subprocess.Popen([sys.executable, "-m", "services.rag_pipeline.main", "--ready-file", str(ready)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "rag pipeline did not start"
            time.sleep(0.05)
        async with http_client(json.loads(ready.read_text())["mcp"]) as client:
            result = await client.call_tool("search_and_rank", {"user_query_text": QUERY})
        text = error_text(result)                # the SDK puts "Error executing tool …: " before our text
        assert "deadline_exceeded: SearchAndRank did not finish" in text and "unavailable" not in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        proc.stderr.close()


def test_a_bad_max_tool_rounds_is_one_line_without_a_traceback(stack, capsys, monkeypatch):
    monkeypatch.setenv("NUCLEUS_CHAT_MAX_TOOL_ROUNDS", "21")
    code = cli_main.main(["chat", "--url", stack["rag_pipeline"]["mcp"]])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2      # one line (wrapped at most once)
    assert "invalid_argument: NUCLEUS_CHAT_MAX_TOOL_ROUNDS: Input should be less than or equal to 20, got '21'" in one_line(err)


def test_cli_profile_stores_re_rank_fields_and_refuses_a_reranker_the_stack_lacks(stack, tmp_path):
    base = ["--data-dir", str(tmp_path), "profile", "put", "cli-rerank", "--tenant", TENANT,
            "--rag-pipeline-target", stack["rag_pipeline"]["grpc"], "--weights", "0.7,0.1,0.1,0.1"]
    done = cli_run([*base, "--reranker", "embedding-cosine", "--rerank-top-n", "12", "--rerank-weight", "0.25"])
    assert done.returncode == 0, done.stderr
    stored = json.loads(done.stdout)
    assert (stored["reranker"], stored["rerank_top_n"], stored["rerank_weight"]) == ("embedding-cosine", 12, 0.25)
    assert stored["weights"]["relevancy"] == pytest.approx(0.7) and stored["version"] >= 1
    refused = cli_run([*base, "--reranker", "cross-encoder"])          # the session stack has no cross-encoder
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "reranker: 'cross-encoder' is not configured on this stack" in one_line(refused.stderr)


def test_cli_why_not_hides_what_the_local_principal_may_not_see(stack, restricted, tmp_path, monkeypatch):
    """`--why-not`: a group-restricted document answers as a made-up id for the local principal;
    one it may see gets its deciding factor."""
    monkeypatch.delenv("NUCLEUS_API_KEY", raising=False)
    ids = ("security-runbook-pallas-fleet-compromise", "no-such-runbook", "security-incident-reporting-2025")
    done = cli_run(search_argv(stack, tmp_path, "--json", "--why-not", *ids))
    assert done.returncode == 0, done.stderr
    hidden, made_up, seen = json.loads(done.stdout)["documents"]
    assert {**hidden, "artifact_id": ""} == {**made_up, "artifact_id": ""} and hidden["found"] is False
    assert seen["found"] and seen["deciding_factor"] in ("shown", "page_cut", "out_ranked", "not_retrieved")
