"""The KnowledgeStore process on the qdrant backend (NUCLEUS_KS_BACKEND=qdrant), through gRPC,
embedding through the real LlmOrchestration: serving searches, stateless replicas (replica A
killed with SIGKILL mid-ingest, replica B on the same Qdrant store serves every acknowledged
document exactly once and no half artifact, a consistent check and topics), and an unreachable
Qdrant answering UNAVAILABLE.

Qdrant runs in qdrant-client's local mode here (one process per folder, so the replicas run one
after the other); concurrent replicas need a Qdrant server (test_backend_contract.py runs against
one when NUCLEUS_TEST_QDRANT_URL is set)."""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import Unavailable, Unimplemented
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from tests.support import background
from tests.support.retrieval import search_by_filters

pytestmark = pytest.mark.integration
TENANT = "replicas"


def start_replica(work: Path, llm_target: str, **env: str) -> tuple[subprocess.Popen, str]:
    ready = work / "ks.ready.json"
    ready.unlink(missing_ok=True)
    full = dict(os.environ, NUCLEUS_DATA_DIR=str(work), NUCLEUS_KS_DATA_DIR=str(work / "unused"),
                NUCLEUS_KS_GRPC_PORT="0", NUCLEUS_KS_MCP_PORT="-1", NUCLEUS_KS_LLM_TARGET=llm_target,
                NUCLEUS_KS_BACKEND="qdrant", **env)
    proc = subprocess.Popen([sys.executable, "-m", "services.knowledge_store.main", "--ready-file", str(ready)],
                            env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, "knowledge store exited during start-up"
        assert time.monotonic() < deadline, "knowledge store did not start"
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["grpc"]


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _doc(i: int) -> DocumentIn:
    """Several chunks (three sections), so a half-written artifact would show."""
    body = "\n\n".join(f"## Part {p}\n" + " ".join(f"replicaword{i}x{p}y{w}" for w in range(120)) for p in range(3))
    return DocumentIn(artifact=ArtifactMeta(artifact_id=f"rep-{i}", title=f"Replica doc {i}", source_type="wiki"),
                      content=body, content_type="text/markdown")


async def _ingest_until_killed(target: str, acked: list[str], attempted: list[str], start: int) -> None:
    client = KnowledgeStoreClient(target, ingest_timeout_s=30)
    try:
        i = start
        while True:
            attempted.append(f"rep-{i}")
            try:
                await client.ingest(TENANT, "", [_doc(i)])
            except Exception:  # noqa: BLE001 - the replica was killed under us
                return
            acked.append(f"rep-{i}")
            i += 1
    finally:
        await client.close()


@pytest.mark.slow
async def test_replica_killed_mid_ingest_leaves_every_acknowledged_document_once(tmp_path, stack):
    llm_target = stack["llm_orchestration"]["grpc"]
    qdrant = dict(NUCLEUS_QDRANT_PATH=str(tmp_path / "qdrant"))
    acked: list[str] = []
    attempted: list[str] = []
    rng = random.Random(11)
    for _ in range(2):                                    # replica A, then A' (each killed)
        proc, target = start_replica(tmp_path, llm_target, **qdrant)
        before = len(acked)
        task = asyncio.create_task(_ingest_until_killed(target, acked, attempted, start=len(attempted)))
        deadline = time.monotonic() + 60
        while len(acked) == before and not task.done():
            assert time.monotonic() < deadline, "no ingest was acknowledged"
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.random() * 0.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        await asyncio.wait_for(task, timeout=30)

    proc, target = start_replica(tmp_path, llm_target, **qdrant)      # replica B, same store
    client = KnowledgeStoreClient(target)
    try:
        stats = await client.stats(TENANT)
        listing, _ = await search_by_filters(client, TENANT, "", [], 1000, SearchFilters())
        chunks: dict[str, list[int]] = {}
        for hit in listing:
            chunks.setdefault(hit.entry.artifact_id, []).append(hit.entry.chunk_index)
        assert set(acked) <= set(chunks), f"lost acknowledged writes: {sorted(set(acked) - set(chunks))}"
        assert len(set(chunks) - set(acked)) <= 2          # at most the one in flight per kill
        per_doc = len(chunks[acked[0]])
        assert per_doc >= 3
        assert all(sorted(c) == list(range(per_doc)) for c in chunks.values()), f"half or doubled artifacts: {chunks}"
        assert stats.artifacts == len(chunks) and stats.entries == per_doc * len(chunks)
        hits, _ = await search_by_filters(client, TENANT, f"replicaword{acked[0].split('-')[1]}x0y7", [], 5,
                                                 SearchFilters())
        assert [h.entry.id for h in hits] == [f"{acked[0]}#0"]
        again = await client.ingest(TENANT, "", [_doc(int(acked[0].split("-")[1]))])       # idempotent re-ingest
        assert again.results[0].entries_replaced == per_doc
        assert (await client.stats(TENANT)).entries == stats.entries
        assert await client.delete(TENANT, [acked[0]]) == (1, per_doc)
        assert (await client.stats(TENANT)).artifacts == len(chunks) - 1
        check = await client.check_tenant(TENANT, repair=False)       # what the kills left is consistent
        assert check.consistent and check.entries == per_doc * (len(chunks) - 1), check.summary()
        for _ in range(300):                                           # GetTopics (the topic tools' call)
            topics = await client.topics(TENANT, SearchFilters(), "topics")
            if topics["status"] == "ready":
                break
            await asyncio.sleep(0.1)
        assert topics["documents"] == sum(t["size"] for t in topics["topics"]) == len(chunks) - 1, topics
    finally:
        await client.close()
        background.stop_in_background("ks-qdrant replica", lambda: stop(proc))   # while the next test runs


async def test_unreachable_qdrant_answers_unavailable_not_a_hang(tmp_path, stack):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, target = start_replica(tmp_path, stack["llm_orchestration"]["grpc"],
                                 NUCLEUS_QDRANT_URL=f"http://127.0.0.1:{port}", NUCLEUS_QDRANT_TIMEOUT_S="1",
                                 NUCLEUS_QDRANT_RETRIES="1")
    client = KnowledgeStoreClient(target, timeout_s=20)
    try:
        with pytest.raises(Unavailable, match="Qdrant at http://127.0.0.1"):
            await search_by_filters(client, "t", "volcano", [], 5, SearchFilters())
        with pytest.raises(Unavailable):
            await client.stats("t")
        status = await client.store_status()
        assert status.state == "degraded" and status.problems[0].kind == "unavailable"
        assert "Qdrant at http://127.0.0.1" in status.problems[0].message
        with pytest.raises(Unimplemented, match="qdrant backend"):         # embedded-only call
            await client.configure_index("t", "hnsw")
    finally:
        await client.close()
        background.stop_in_background("ks-qdrant replica", lambda: stop(proc))   # while the next test runs
