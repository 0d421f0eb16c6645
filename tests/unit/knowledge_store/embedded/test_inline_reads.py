"""Searcher._read (search.py): small reads run on the event loop when nothing else is reading,
everything else on a worker thread; an inline read never waits for a lock there."""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from services.knowledge_store.embedded import search as ks_search
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import SearchFilters
from services.knowledge_store.embedded.vector_index import VectorIndex
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

ENG = SearchFilters(visibility_groups=("eng",), enforce_visibility=True)
QUERY = HashEmbedder().vector("alpha beta gamma")


@pytest.fixture
async def store(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", [doc(f"a{i}", f"alpha beta gamma document {i}", visibility_groups=["eng"])
                                 for i in range(6)])
    yield store
    store.close()


@pytest.fixture
def search_threads(monkeypatch) -> list[str]:
    """Names of the threads the FAISS searches ran on."""
    seen: list[str] = []
    original = VectorIndex.search

    def recording(self, *args, **kwargs):
        seen.append(threading.current_thread().name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(VectorIndex, "search", recording)
    return seen


async def _ids(store: KnowledgeStore, k: int = 3, filters: SearchFilters = SearchFilters()) -> list[str]:
    [hits] = await store.dense("t", QUERY[None, :], k, filters, hits=True)
    return [h.entry.id for h in hits]


async def test_a_lone_small_search_runs_on_the_event_loop_with_the_threaded_answer(store, search_threads,
                                                                                 monkeypatch):
    loop_thread = threading.current_thread().name
    inline = await _ids(store)
    monkeypatch.setattr(ks_search, "INLINE_MAX_ENTRIES", 0)          # everything on a worker thread
    threaded = await _ids(store)
    assert inline == threaded and len(inline) == 3
    assert search_threads[0] == loop_thread and search_threads[1] != loop_thread


async def test_large_reads_and_uncached_filters_go_to_a_worker_thread(store, search_threads):
    loop_thread = threading.current_thread().name
    await _ids(store, k=ks_search.INLINE_MAX_K + 1)                 # too many results
    await _ids(store, filters=ENG)                                   # allowed rows not cached yet
    await _ids(store, filters=ENG)                                   # now cached: inline
    assert [t == loop_thread for t in search_threads] == [False, False, True]


async def test_a_read_arriving_while_another_is_in_flight_goes_to_a_worker_thread(store, search_threads,
                                                                                  monkeypatch):
    gate = threading.Event()
    recording = VectorIndex.search

    def held_on_workers(self, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            gate.wait(5)
        return recording(self, *args, **kwargs)

    monkeypatch.setattr(VectorIndex, "search", held_on_workers)
    first = asyncio.create_task(_ids(store, k=ks_search.INLINE_MAX_K + 1)) # a worker thread, held
    await asyncio.sleep(0.05)
    second = asyncio.create_task(_ids(store))                              # small, but not alone
    await asyncio.sleep(0.05)
    assert not first.done() and not second.done()
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert len(search_threads) == 2 and threading.main_thread().name not in search_threads
    assert store.reads_in_flight == 0


async def test_a_writer_holding_the_lock_never_blocks_the_event_loop(store, search_threads):
    tenant = await store._tenants.get("t")
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with tenant.rw.write():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait(5)
    search = asyncio.create_task(_ids(store))
    ticks = 0
    for _ in range(5):                         # the loop keeps running while the search waits
        await asyncio.sleep(0.01)
        ticks += 1
    assert not search.done() and ticks == 5
    release.set()
    assert len(await asyncio.wait_for(search, 5)) == 3
    thread.join(5)
    assert search_threads and search_threads[-1] != threading.current_thread().name


async def test_get_entries_and_keyword_search_answer_the_same_inline_and_threaded(store, monkeypatch):
    ids = await _ids(store, k=4)
    inline = ([h.entry.id for h in await store.get_entries("t", ids)],
              [(h.entry.id, h.score) for h in (await store.keyword("t", "alpha", [], 4, ENG, hits=True))[0]])
    monkeypatch.setattr(ks_search, "INLINE_MAX_K", -1)
    threaded = ([h.entry.id for h in await store.get_entries("t", ids)],
                [(h.entry.id, h.score) for h in (await store.keyword("t", "alpha", [], 4, ENG, hits=True))[0]])
    assert inline == threaded and inline[0] == ids and len(inline[1]) == 4
    assert np.all(np.diff([s for _, s in inline[1]]) <= 0)
