"""Lazy tenants under a memory budget (tenants.py): tenants open on first use, the least recently
used is saved and evicted once the estimate passes `memory_budget_mb`, never while a request
holds it, and answers after the reopen are identical. Real SQLite and FAISS in tmp_path; each
small tenant is estimated at just under 2 MiB, so a 2 MiB budget keeps one open."""
from __future__ import annotations

import threading

import pytest

from cli.status import store_lines
from services.knowledge_store import convert
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.tenants import TENANT_OVERHEAD_BYTES
from tests.unit.knowledge_store.helpers import HashEmbedder
from tests.unit.knowledge_store.embedded.test_persist import answers, docs


def open_ids(store: KnowledgeStore) -> set[str]:
    return {tenant for tenant, _ in store._tenants.open_tenants()}


@pytest.fixture
async def store(tmp_path, monkeypatch):
    from services.knowledge_store.embedded import tenants
    from tests.unit.knowledge_store.helpers import settings_for
    monkeypatch.setattr(tenants, "EVICT_IDLE_S", 0.0)       # every tenant idle at once (the product: 1 s)
    settings = settings_for(tmp_path, memory_budget_mb=2, default_index_kind="hnsw")
    store = KnowledgeStore(settings, HashEmbedder())
    for tenant in ("a", "b", "c"):
        await store.ingest(tenant, "", docs(0, 30 if tenant == "a" else 10))
    yield store
    store.close()


async def test_tenants_open_lazily_and_the_least_recently_used_is_evicted(store):
    assert len(open_ids(store)) == 1, "each open evicted the previous tenant"
    assert store._tenants.memory_bytes() <= 2 * 1024 * 1024
    await store.stats("a")
    assert open_ids(store) == {"a"}
    await store.stats("b")
    assert open_ids(store) == {"b"}
    assert store._tenants.counters["evicted"] >= 3
    memory = dict(store._tenants.open_tenants())
    assert memory["b"] > TENANT_OVERHEAD_BYTES
    status = store.status()
    assert status.open_tenants == 1 and status.tenants == (("b", memory["b"]),)
    assert status.open_tenant_bytes == memory["b"] and status.memory_budget_bytes == 2 * 1024 * 1024
    back = convert.store_status_from_pb(convert.store_status_to_pb(status))      # the status RPC's form
    assert (back.tenants, back.open_tenant_bytes, back.memory_budget_bytes) == (
        status.tenants, status.open_tenant_bytes, status.memory_budget_bytes)
    text = "\n".join(store_lines(status))
    assert "1 tenants open" in text and "b " in text and "budget" in text


async def test_an_evicted_tenant_reopens_with_identical_answers(store):
    before = await answers(store, "a")                 # "a" is open now (HNSW, 30 entries)
    loaded = store._tenants.counters["opened_loaded"]
    await store.stats("b")
    assert "a" not in open_ids(store)
    assert await answers(store, "a") == before
    assert store._tenants.counters["opened_loaded"] == loaded + 2, "b, then a, reopened from their saved files"
    assert not store._tenants.counters["opened_rebuilt"] - 3, "only the three first opens built anything"


async def test_a_tenant_is_never_evicted_while_a_request_holds_it(store):
    tenant = await store._tenants.get("a")
    held, release = threading.Event(), threading.Event()

    def search() -> None:                              # a search in progress: the shared lock held
        with tenant.rw.read():
            held.set()
            release.wait(10)

    worker = threading.Thread(target=search)
    worker.start()
    try:
        assert held.wait(10)
        await store.stats("b")
        await store.stats("c")
        assert "a" in open_ids(store), "over the budget, but a request holds it"
        assert not tenant.evicted
    finally:
        release.set()
        worker.join()
    await store.stats("b")
    assert "a" not in open_ids(store) and tenant.evicted


async def test_a_write_queued_on_an_evicted_tenant_goes_to_the_reopened_one(store):
    stale = await store._tenants.get("a")
    assert store._tenants.evict(stale)
    assert stale.evicted
    await store.ingest("a", "", docs(100, 1))          # resolves "a" again: reopened
    fresh = await store._tenants.get("a")
    assert fresh is not stale and not fresh.evicted
    integrity = await store.verify_integrity("a")
    assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"] == 31


async def test_no_budget_keeps_every_tenant_open(tmp_path):
    from tests.unit.knowledge_store.helpers import settings_for
    store = KnowledgeStore(settings_for(tmp_path, memory_budget_mb=0), HashEmbedder())
    try:
        for tenant in ("a", "b", "c"):
            await store.ingest(tenant, "", docs(0, 5))
        assert open_ids(store) == {"a", "b", "c"}
        assert not store._tenants.counters["evicted"]
    finally:
        store.close()
