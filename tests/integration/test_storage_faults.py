"""Storage faults and consistency through real KnowledgeStore processes: typed gRPC errors naming
the path, the `nucleus.v1.KnowledgeStore.storage` health entry, GetStoreStatus, and `nucleus
check` against the running stack."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.storage.db import DB_FILE
from tests.support.processes import run_cli
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

pytestmark = pytest.mark.integration
NOTE = "The battery controller resets when the status light blinks green."


async def _health(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                               timeout=5)
    return reply.status


@pytest.fixture
async def damaged_store(tmp_path):
    """A KnowledgeStore process, read-only, over a data directory with a good and a corrupted tenant."""
    seed = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    for tenant in ("good", "bad"):
        await seed.ingest(tenant, "", [doc(f"{tenant}{i}", f"{NOTE} Copy {i}.") for i in range(5)])
    seed.close()
    with open(tmp_path / "tenants" / "bad" / DB_FILE, "r+b") as f:
        f.write(b"no longer a database" * 8)
    ready = tmp_path / "ks.ready.json"
    env = {**os.environ, "NUCLEUS_KS_DATA_DIR": str(tmp_path), "NUCLEUS_KS_READ_ONLY": "1",
           "NUCLEUS_KS_GRPC_PORT": "0", "NUCLEUS_KS_MCP_PORT": "-1", "NUCLEUS_KS_LLM_TARGET": "127.0.0.1:1",
           "NUCLEUS_OTEL_TRACE_FILE": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "services.knowledge_store.main", "--ready-file", str(ready)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "knowledge store did not start"
            time.sleep(0.05)
        yield json.loads(ready.read_text())["grpc"], tmp_path
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        proc.stderr.close()


async def test_a_corrupted_tenant_and_a_read_only_store_answer_typed_errors_and_health_shows_it(damaged_store):
    target, data_dir = damaged_store
    async with grpc.aio.insecure_channel(target) as channel:
        stub = ks_grpc.KnowledgeStoreStub(channel)
        good = await stub.SearchPersonaKnowledgeByFilters(ks_pb.FilterSearchRequest(
            tenant_id="good", keywords="battery", top_k=3), timeout=10)
        assert len(good.hits) == 3
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.SearchPersonaKnowledgeByFilters(ks_pb.FilterSearchRequest(
                tenant_id="bad", keywords="battery", top_k=3), timeout=10)
        assert bad.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "corrupted" in bad.value.details() and str(data_dir / "tenants" / "bad") in bad.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as write:
            await stub.DeleteArtifacts(ks_pb.DeleteArtifactsRequest(tenant_id="good", artifact_ids=["good0"]),
                                       timeout=10)
        assert write.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "read-only" in write.value.details()
    assert await _health(target, "nucleus.v1.KnowledgeStore") == health_pb2.HealthCheckResponse.SERVING
    deadline = time.monotonic() + 10                 # the health entry follows the store's state
    while await _health(target, "nucleus.v1.KnowledgeStore.storage") != health_pb2.HealthCheckResponse.NOT_SERVING:
        assert time.monotonic() < deadline
    client = KnowledgeStoreClient(target)
    try:
        status = await client.store_status()
    finally:
        await client.close()
    assert status.state == "degraded" and status.read_only
    assert {(p.tenant_id, p.kind) for p in status.problems} == {("bad", "corrupt"), ("good", "read_only")}


async def test_the_running_stack_reports_ok_storage_and_nucleus_check_finds_a_consistent_tenant(stack, capsys):
    target = stack["knowledge_store"]["grpc"]
    client = KnowledgeStoreClient(target)
    try:
        await client.ingest("opscheck", "", [doc("n1", NOTE), doc("n2", NOTE + " Again.")])
        status = await client.store_status()
    finally:
        await client.close()
    assert status.state == "ok" and Path(status.data_dir).is_dir() and status.free_bytes > 0
    assert await _health(target, "nucleus.v1.KnowledgeStore.storage") == health_pb2.HealthCheckResponse.SERVING
    argv = ["check", "--tenant", "opscheck", "--knowledge-store-target", target]
    done = await asyncio.to_thread(run_cli, argv)                  # the CLI runs its own event loop: a process
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tenant opscheck: consistent" in out and "quick_check: ok" in out
