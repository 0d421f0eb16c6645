"""Storage faults and the operator calls over the real gRPC adapter and client (a server on
127.0.0.1:0 in this process): a full disk arrives as StorageFull (RESOURCE_EXHAUSTED, told
apart from a rate limit by the error kind in the trailing metadata), a read-only store as
FailedPrecondition, and GetStoreStatus / CheckTenant answer what the core knows."""
from __future__ import annotations

import asyncio
import sqlite3

import grpc
import pytest

from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.grpc_api import KnowledgeStoreServicer
from services.knowledge_store.embedded.storage.db import DB_FILE
from shared.errors import DeadlineExceeded, FailedPrecondition, StorageFull
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for
from tests.support.retrieval import search_by_filters

NOTE = "The battery controller resets when the status light blinks green."


@pytest.fixture
async def serve():
    servers: list[grpc.aio.Server] = []
    clients: list[KnowledgeStoreClient] = []

    async def start(store: KnowledgeStore) -> KnowledgeStoreClient:
        server = grpc.aio.server()
        ks_grpc.add_KnowledgeStoreServicer_to_server(KnowledgeStoreServicer(store), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        clients.append(KnowledgeStoreClient(f"127.0.0.1:{port}"))
        return clients[-1]

    yield start
    for client in clients:
        await client.close()
    for server in servers:
        await server.stop(None)


async def test_a_full_disk_reaches_the_client_as_storage_full_and_the_status_says_so(tmp_path, serve):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        client = await serve(store)
        await client.ingest("t", "", [doc("first", NOTE)])
        tenant = await store._tenants.get("t")
        pages = tenant.db.writer.execute("PRAGMA page_count").fetchone()[0]
        tenant.db.writer.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StorageFull) as caught:
            await client.ingest("t", "", [doc("second", NOTE * 400)])
        assert str(tmp_path) in str(caught.value) and "free of" in str(caught.value)
        status = await client.store_status()
        assert status.state == "degraded" and status.data_dir == str(tmp_path)
        assert [(p.tenant_id, p.kind) for p in status.problems] == [("t", "full")]
        assert status.free_bytes > 0 and status.open_tenants == 1
    finally:
        store.close()


async def test_a_read_only_store_refuses_writes_over_grpc_with_failed_precondition(tmp_path, serve):
    writer = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await writer.ingest("t", "", [doc("first", NOTE)])
    writer.close()
    store = KnowledgeStore(settings_for(tmp_path, read_only=True), HashEmbedder())
    try:
        client = await serve(store)
        hits, _ = await search_by_filters(client, "t", "battery", [], 5, SearchFilters())
        assert [h.entry.artifact_id for h in hits] == ["first"]
        with pytest.raises(FailedPrecondition, match="read-only"):
            await client.delete("t", ["first"])
        assert (await client.store_status()).read_only
    finally:
        store.close()


async def test_check_tenant_over_grpc_reports_and_repairs(tmp_path, serve):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        client = await serve(store)
        await client.ingest("t", "", [doc(f"d{i}", f"{NOTE} Copy {i}.") for i in range(5)])
        conn = sqlite3.connect(tmp_path / "tenants" / "t" / DB_FILE, isolation_level=None)
        conn.execute("DELETE FROM entry_vectors WHERE rid = (SELECT max(rid) FROM entries)")
        conn.close()
        found = await client.check_tenant("t", repair=False)
        assert (found.missing_vectors, found.consistent) == (1, False)
        repaired = await client.check_tenant("t")
        assert (repaired.repaired_vectors, repaired.consistent) == (1, True)
        assert (await client.store_status()).repaired_rows == 1
    finally:
        store.close()


class _SlowEmbedder(HashEmbedder):
    """The hashing embedder, `delay_s` a call: an ingest of several embedding batches that takes long."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def embed(self, texts, *args, **kwargs):
        await asyncio.sleep(self.delay_s)
        return await super().embed(texts, *args, **kwargs)


async def test_a_streamed_ingest_outlives_the_ingest_deadline_while_it_progresses_and_not_once_it_goes_quiet(
        tmp_path, serve):
    """The ingest deadline bounds the wait for each progress message, not the whole stream."""
    chunks = [f"Section {i}. " + f"pump {i} valve gasket pressure reading number {i}. " * 60 for i in range(8)]
    big = doc("big", "\n\n".join(chunks))
    store = KnowledgeStore(settings_for(tmp_path / "a", embed_batch_size=2), _SlowEmbedder(0.25))
    try:
        client = await serve(store)
        client.ingest_timeout_s = 0.6
        events = [e async for e in client.ingest_stream("t", "", [big])]
        progress, report = events[:-1], events[-1]
        assert len(progress) >= 3 and report.results[0].entries_written >= 6, events
        assert 0.25 * len(progress) > client.ingest_timeout_s              # longer in all than the deadline
    finally:
        store.close()
    quiet = KnowledgeStore(settings_for(tmp_path / "b", embed_batch_size=64), _SlowEmbedder(1.5))
    try:
        client = await serve(quiet)
        client.ingest_timeout_s = 0.6
        with pytest.raises(DeadlineExceeded, match="sent no progress of the ingest for 1 s"):
            async for _ in client.ingest_stream("t", "", [big]):
                pass
    finally:
        quiet.close()
