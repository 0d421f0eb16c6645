"""The per-tenant cache of allowed row ids (allowed_cache.py) on real SQLite + FAISS: same
answers as computing the filter on every search, invalidated by every write, bounded."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.allowed_cache import ROW_BYTES, Allowed, AllowedCache
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for
from tests.unit.knowledge_store.embedded.test_store import FILTER_CASES, filter_store  # noqa: F401 (fixture)

ENG = SearchFilters(visibility_groups=("eng",), enforce_visibility=True)
HR = SearchFilters(visibility_groups=("hr",), enforce_visibility=True)
QUERY = HashEmbedder().vector("alpha beta " * 6)


def _uncached(monkeypatch) -> None:
    """Make every search compute its filter afresh and apply it as a selector/mask: the
    behaviour before the cache, used as the reference."""
    monkeypatch.setattr(AllowedCache, "get",
                        lambda self, conn, f: Allowed(storage.filter_sql.allowed_rids(conn, f), everything=False))


async def _answers(store: KnowledgeStore, filters: SearchFilters, k: int) -> tuple[list, list]:
    """(vector hits of two queries, keyword hits) as (entry id, score) lists."""
    per_query = await store.dense("t", np.stack([QUERY, -QUERY]), k, filters, hits=True)
    keyword, _ = await store.keyword("t", "alpha beta", [], k, filters, hits=True)
    return ([[(h.entry.id, h.score) for h in hits] for hits in per_query],
            [(h.entry.id, h.score) for h in keyword])


async def test_cached_filters_give_the_uncached_answers(filter_store, monkeypatch):
    cases = [*(f for f, _ in FILTER_CASES.values()), SearchFilters(visibility_groups=("g-rare", "g-other"),
                                                                  enforce_visibility=True)]
    with monkeypatch.context() as m:
        _uncached(m)
        expected = [await _answers(filter_store, f, 40) for f in cases]
    tenant = await filter_store._tenants.get("t")
    for _ in range(2):                                   # first round fills the cache, second reads it
        assert [await _answers(filter_store, f, 40) for f in cases] == expected
    assert len(tenant.allowed) == sum(not f.is_empty for f in cases)


async def test_a_filter_that_lets_everything_through_skips_the_mask_and_reuses_the_selector(
        tmp_path, embedder, monkeypatch):
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        await store.ingest("t", "", [doc(f"d{i}", f"alpha beta note {i}", visibility_groups=("eng",) if i % 2 else ())
                                     for i in range(60)])
        with monkeypatch.context() as m:
            _uncached(m)
            expected = await _answers(store, ENG, 25)
            [single] = await store.dense("t", QUERY[None, :], 25, ENG, hits=True)
        tenant = await store._tenants.get("t")
        masks: list[object] = []
        selectors: list[object] = []
        keyword_search, vector_search = tenant.keywords.search, tenant.index.search
        monkeypatch.setattr(tenant.keywords, "search", lambda terms, k, allowed=None, phrase_rids=(), weights=None: (
            masks.append(allowed), keyword_search(terms, k, allowed, phrase_rids))[1])
        monkeypatch.setattr(tenant.index, "search", lambda q, k, allowed=None, selector=None: (
            selectors.append(selector), vector_search(q, k, allowed, selector))[1])
        for _ in range(2):
            assert await _answers(store, ENG, 25) == expected
            assert await store.dense("t", QUERY[None, :], 25, ENG, hits=True) == [single]
        assert masks == [None, None]
        assert len(selectors) == 4 and selectors[0] is not None and all(s is selectors[0] for s in selectors)
        with tenant.db.read() as conn:
            assert tenant.allowed.get(conn, ENG).everything
            assert not tenant.allowed.get(conn, HR).everything
    finally:
        store.close()


async def test_ingest_and_delete_invalidate_the_cache(store, embedder):
    await store.ingest("t", "", [doc(f"d{i}", f"alpha note {i}", visibility_groups=("eng",)) for i in range(10)]
                       + [doc("hidden", "alpha hidden", visibility_groups=("hr",))])
    query = embedder.vector("alpha fresh")[None, :]

    async def ids(filters: SearchFilters) -> tuple[set[str], set[str]]:
        [vector] = await store.dense("t", query, 50, filters, hits=True)
        keyword, _ = await store.keyword("t", "alpha", [], 50, filters, hits=True)
        return {h.artifact.artifact_id for h in vector}, {h.artifact.artifact_id for h in keyword}

    before = {f"d{i}" for i in range(10)}
    assert await ids(ENG) == (before, before)
    await store.ingest("t", "", [doc("fresh", "alpha fresh", visibility_groups=("eng", "hr"))])
    assert await ids(ENG) == (before | {"fresh"}, before | {"fresh"})
    await store.delete("t", ["fresh", "d3"])
    assert await ids(ENG) == (before - {"d3"}, before - {"d3"})
    await store.record_feedback("t", "artifact", "d4", True, "u1")      # every write starts a new generation
    assert len((await store._tenants.get("t")).allowed) == 0


async def test_candidate_signals_are_read_once_a_generation_and_follow_every_write(store, embedder, monkeypatch):
    await store.ingest("t", "", [doc(f"d{i}", f"alpha note {i}") for i in range(6)])
    query = embedder.vector("alpha note")[None, :]
    reads: list[int] = []
    real = storage.entries.candidate_rows
    monkeypatch.setattr(storage.entries, "candidate_rows",
                        lambda conn, rids: reads.append(len(rids)) or real(conn, rids))

    async def helpful() -> dict[str, int]:
        [columns] = await store.dense("t", query, 10, SearchFilters())
        return dict(zip(columns.artifact_ids, columns.feedback_helpful.tolist()))

    assert await helpful() == {f"d{i}": 0 for i in range(6)} and reads == [6]
    keyword, _ = await store.keyword("t", "alpha", [], 10, SearchFilters())
    assert len(keyword) == 6 and reads == [6]                  # the keyword leg's rows: from memory
    await store.record_feedback("t", "artifact", "d2", True, "u1")
    assert (await helpful())["d2"] == 1 and reads == [6, 6]    # the vote is a write: read again
    tenant = await store._tenants.get("t")
    assert tenant.allowed.row_bytes() == 6 * ROW_BYTES               # counted in the memory budget
    assert store._tenants.memory_bytes() == tenant.memory + 6 * ROW_BYTES
    rid = int(keyword.row_ids[0])
    tenant.db.corrupt_rids.add(rid)                          # found corrupt since: left out, cached or not
    again, _ = await store.keyword("t", "alpha", [], 10, SearchFilters())
    assert rid not in again.row_ids.tolist() and len(again) == 5 and reads == [6, 6]


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_a_document_moved_to_another_group_is_hidden_at_once(tmp_path, embedder, kind):
    """Security: while every document was visible to "eng" the cache held a set (and the
    'everything' fast path) for "eng"; once one moves to "hr" only, "eng" must not see it."""
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        await store.configure_index("t", kind)
        await store.ingest("t", "", [doc(f"d{i}", f"budget plan {i}", visibility_groups=("eng",)) for i in range(8)]
                           + [doc("salaries", "budget plan salaries", visibility_groups=("eng",))])
        query = embedder.vector("budget plan salaries")[None, :]

        async def sees(filters: SearchFilters) -> tuple[bool, bool]:
            [vector] = await store.dense("t", query, 50, filters, hits=True)
            keyword, _ = await store.keyword("t", "salaries", [], 50, filters, hits=True)
            return (any(h.artifact.artifact_id == "salaries" for h in vector),
                    any(h.artifact.artifact_id == "salaries" for h in keyword))

        assert await sees(ENG) == (True, True)
        assert await sees(HR) == (False, False)
        await store.ingest("t", "", [doc("salaries", "budget plan salaries", visibility_groups=("hr",))])
        assert await sees(ENG) == (False, False)
        assert await sees(HR) == (True, True)
        [vector] = await store.dense("t", query, 50, ENG, hits=True)
        assert len(vector) == 8
    finally:
        store.close()


async def test_concurrent_visibility_changes_never_leak(store, embedder):
    await store.ingest("t", "", [doc(f"d{i}", f"roadmap item {i}", visibility_groups=("eng",)) for i in range(20)])
    query = embedder.vector("roadmap item")[None, :]

    async def flipper():
        for round_ in range(6):
            groups = ("hr",) if round_ % 2 == 0 else ("eng",)
            await store.ingest("t", "", [doc(f"d{i}", f"roadmap item {i}", visibility_groups=groups)
                                         for i in range(0, 20, 3)])

    async def reader():
        for _ in range(15):
            [vector] = await store.dense("t", query, 50, ENG, hits=True)
            keyword, _ = await store.keyword("t", "roadmap", [], 50, ENG, hits=True)
            for hit in [*vector, *keyword]:
                assert "eng" in hit.artifact.visibility_groups

    await asyncio.gather(flipper(), *(reader() for _ in range(3)))


async def test_the_cache_is_bounded(store, embedder):
    await store.ingest("t", "", [doc(f"d{i}", f"note {i}", tags=(f"t{i % 40}",)) for i in range(80)])
    tenant = await store._tenants.get("t")
    query = embedder.vector("note")[None, :]
    for i in range(40):
        await store.dense("t", query, 5, SearchFilters(tags=(f"t{i}",)), hits=True)
    assert len(tenant.allowed) == 32
    cache = AllowedCache(max_filters=4, max_ids=30)
    with tenant.db.read() as conn:
        everything = cache.get(conn, SearchFilters(owners=("nobody",), enforce_visibility=False, tags=()))
        assert len(everything.rids) == 0 and len(cache) == 1
        big = cache.get(conn, SearchFilters(visibility_groups=("x",), enforce_visibility=True))
        assert len(big.rids) == 80 and big.everything and len(cache) == 1     # over max_ids: not kept
        for i in range(14):
            cache.get(conn, SearchFilters(tags=(f"t{i}",)))                    # 2 ids each
            assert len(cache) <= 4 and cache.cached_ids <= 30
        assert len(cache) == 4
        assert cache.get(conn, SearchFilters(tags=["t13"])) is cache.get(conn, SearchFilters(tags=("t13",)))
