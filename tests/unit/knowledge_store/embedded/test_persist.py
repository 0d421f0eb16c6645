"""Persisted derived indexes (persistence.py, storage/index_log.py): a clean restart loads the
saved FAISS and BM25 files instead of rebuilding them; files from an older commit are caught up
by replaying the change log; corrupt or mismatched files are rebuilt from SQLite with a log
line; answers are the same whichever way a tenant was opened. Real SQLite and FAISS in tmp_path;
loads and rebuilds are observed through the store's counters and log, never timed."""
from __future__ import annotations

import asyncio
import gc
import logging
import shutil

import numpy as np
import pytest

from services.knowledge_store.embedded import persistence
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

F = SearchFilters()
TOPICS = ["battery controller reset", "turbine blade inspection", "solar panel cleaning", "pump seal leak",
          "valve pressure test", "cable insulation check", "fan bearing noise", "boiler water level"]
QUERIES = ["battery reset", "turbine blade", "pump leak pressure", "noise bearing", "cable check water"]


def docs(start: int, n: int) -> list:
    return [doc(f"d{i}", f"Note {i} on {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 3 + 1) % len(TOPICS)]}, "
                         f"step {i % 7} of the {TOPICS[(i * 5) % len(TOPICS)]} procedure.",
                title=f"Procedure {i}", tags=("odd",) if i % 2 else ("even",))
            for i in range(start, start + n)]


async def answers(store: KnowledgeStore, tenant: str = "t") -> list:
    """Vector and keyword answers (ids, scores) of a few queries, with and without a filter."""
    embedder = HashEmbedder()
    out = []
    for query in QUERIES:
        for filters in (F, SearchFilters(tags=("odd",))):
            vec = await store.dense(tenant, embedder.vector(query)[None, :], 10, filters, hits=True)
            out.append([(h.entry.id, round(h.score, 5)) for h in vec[0]])
            kw, _ = await store.keyword(tenant, query, [], 10, filters, hits=True)
            out.append([(h.entry.id, round(h.score, 4)) for h in kw])
    return out


def comparable(results: list, kind: str) -> list:
    """What a store rebuilt from SQLite must answer alike: everything for flat; for HNSW (another
    graph, so another order among equal scores) the keyword answers and the vector scores."""
    if kind == "flat":
        return results
    return [r if i % 2 else [s for _, s in r] for i, r in enumerate(results)]


def counters(store: KnowledgeStore) -> dict[str, int]:
    return dict(store._tenants.counters)


def derived_dir(tmp_path, tenant: str = "t"):
    return tmp_path / "tenants" / tenant / persistence.DIR_NAME


async def reference(tmp_path, kind: str) -> list:
    """The answers of a store rebuilt from a copy of the SQLite files alone (no saved indexes)."""
    copy = tmp_path.parent / (tmp_path.name + "-rebuilt")
    shutil.copytree(tmp_path, copy, ignore=shutil.ignore_patterns(persistence.DIR_NAME))
    store = KnowledgeStore(settings_for(copy, default_index_kind=kind, persist_indexes=False), HashEmbedder())
    try:
        assert not persistence.exists(copy / "tenants" / "t")
        return await answers(store)
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_a_clean_restart_loads_the_saved_indexes_and_answers_the_same(tmp_path, kind):
    settings = settings_for(tmp_path, default_index_kind=kind)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 60))
    await store.delete("t", ["d3", "d4", "d5"])                # tombstones on HNSW, removals on flat
    before = await answers(store)
    store.close()
    assert persistence.exists(tmp_path / "tenants" / "t")

    store = KnowledgeStore(settings, HashEmbedder())
    try:
        assert await answers(store) == before
        assert counters(store).get("opened_loaded") == 1
        assert not counters(store).get("opened_rebuilt")
        integrity = await store.verify_integrity("t")
        assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"] == 57
        assert (await store.stats("t")).index_kind == kind
    finally:
        store.close()
    assert comparable(before, kind) == comparable(await reference(tmp_path, kind), kind)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_saved_indexes_from_an_older_commit_are_caught_up_by_replay(tmp_path, kind):
    settings = settings_for(tmp_path, default_index_kind=kind, persist_after_rows=100_000)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 40))
    store.close()                                              # saved at this commit

    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(40, 25))                   # later commits, not saved:
    await store.ingest("t", "", docs(10, 3))                    # upserts (remove + add)
    await store.delete("t", ["d1", "d41"])                      # deletes, old and new
    expected = await answers(store)
    del store                                                   # no close, as after kill -9
    gc.collect()

    store = KnowledgeStore(settings, HashEmbedder())
    try:
        # HNSW: the replayed graph never held the entries added and deleted since the save
        assert comparable(await answers(store), kind) == comparable(expected, kind)
        assert counters(store).get("opened_replayed") == 1
        assert not counters(store).get("opened_rebuilt")
        integrity = await store.verify_integrity("t")
        assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"] == 63
    finally:
        store.close()
    assert comparable(expected, kind) == comparable(await reference(tmp_path, kind), kind)


async def test_a_corrupt_file_is_detected_and_rebuilt_with_a_log_line(tmp_path, caplog):
    settings = settings_for(tmp_path)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 30))
    expected = await answers(store)
    store.close()
    vectors = next(derived_dir(tmp_path).glob("vectors.*.faiss"))
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0xFF                                # one flipped byte among the vectors
    vectors.write_bytes(bytes(data))

    store = KnowledgeStore(settings, HashEmbedder())
    try:
        with caplog.at_level(logging.WARNING):
            assert await answers(store) == expected
        assert counters(store).get("opened_rebuilt") == 1 and not counters(store).get("opened_loaded")
        assert any("saved indexes not used" in r.message and "checksum" in r.message for r in caplog.records)
    finally:
        store.close()

    store = KnowledgeStore(settings, HashEmbedder())                # the rebuild was saved again
    try:
        assert await answers(store) == expected
        assert counters(store).get("opened_loaded") == 1
    finally:
        store.close()


@pytest.mark.parametrize("damage", ["truncated", "missing", "manifest"])
async def test_truncated_missing_or_garbled_files_are_rebuilt(tmp_path, caplog, damage):
    settings = settings_for(tmp_path)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 20))
    expected = await answers(store)
    store.close()
    keywords = next(derived_dir(tmp_path).glob("keywords.*.npz"))
    if damage == "truncated":
        keywords.write_bytes(keywords.read_bytes()[:100])
    elif damage == "missing":
        keywords.unlink()
    else:
        (derived_dir(tmp_path) / persistence.MANIFEST).write_text("{not json")
    store = KnowledgeStore(settings, HashEmbedder())
    try:
        with caplog.at_level(logging.WARNING):
            assert await answers(store) == expected
        assert counters(store).get("opened_rebuilt") == 1
        assert any("saved indexes not used" in r.message for r in caplog.records)
    finally:
        store.close()


async def test_files_saved_under_another_configuration_are_rebuilt(tmp_path, caplog):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", docs(0, 20))
    store.close()
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder(), bm25_weights=(2.0, 1.0))
    try:
        with caplog.at_level(logging.WARNING):
            hits, _ = await store.keyword("t", "battery", [], 5, F, hits=True)
        assert hits
        assert counters(store).get("opened_rebuilt") == 1
        assert any("bm25_weights" in r.message for r in caplog.records)
    finally:
        store.close()

    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        assert await store.configure_index("t", "hnsw") == ("hnsw", 20)
    finally:
        store.close()
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        assert (await store.stats("t")).index_kind == "hnsw"
        assert counters(store).get("opened_loaded") == 1, "the rebuilt HNSW index was saved under its config"
    finally:
        store.close()


async def test_files_older_than_the_kept_log_are_rebuilt_not_replayed(tmp_path, caplog):
    settings = settings_for(tmp_path, persist_after_rows=100_000)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 10))
    store.close()
    old = tmp_path / "old-derived"
    shutil.copytree(derived_dir(tmp_path), old)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(10, 10))
    store.close()                                               # saved again: the log is trimmed
    shutil.rmtree(derived_dir(tmp_path))
    shutil.copytree(old, derived_dir(tmp_path))                 # the first save comes back
    store = KnowledgeStore(settings, HashEmbedder())
    try:
        with caplog.at_level(logging.WARNING):
            assert (await store.verify_integrity("t"))["vectors"] == 20
        assert counters(store).get("opened_rebuilt") == 1
        assert any("older than the change log" in r.message for r in caplog.records)
    finally:
        store.close()


async def test_writes_save_in_the_background_once_enough_rows_changed(tmp_path):
    settings = settings_for(tmp_path, persist_after_rows=25)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 10))
    await store.ingest("t", "", docs(10, 30))
    tenant = await store._tenants.get("t")
    for _ in range(500):                                        # the save runs on its own thread
        if not tenant.unsaved and not tenant.saving:
            break
        await asyncio.sleep(0.02)
    assert store._tenants.counters.get("saved", 0) >= 1 and tenant.unsaved == 0
    del store                                                   # no close
    gc.collect()
    store = KnowledgeStore(settings, HashEmbedder())
    try:
        assert (await store.verify_integrity("t"))["vectors"] == 40
        assert counters(store).get("opened_loaded") == 1
    finally:
        store.close()


def test_keyword_arrays_round_trip_with_compact_dtypes():
    from services.knowledge_store.embedded.keyword_index import KeywordBatch, KeywordIndex
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(300)]
    rows = [(rid, " ".join(rng.choice(vocab, 3)), " ".join(rng.choice(vocab, int(rng.integers(1, 40)))))
            for rid in range(1, 500)]
    index = KeywordIndex.build(rows, (1.5, 1.0))
    index.remove(np.arange(1, 500, 7))
    arrays = index.arrays()
    assert arrays["positions"].dtype == np.int32 and arrays["tfs"].dtype == np.float32
    assert arrays["offsets"].dtype == np.int64 and arrays["vocabulary"].dtype == np.uint8
    assert len(arrays["positions"]) == int(arrays["offsets"][-1]) == sum(len(set(t.split() + b.split()))
                                                                          for _, t, b in rows)
    back = KeywordIndex.from_arrays(arrays)
    terms = list(rng.choice(vocab, 6))
    assert back.search(terms, 20) == index.search(terms, 20)
    assert back.document_frequencies(terms) == index.document_frequencies(terms)
    assert back.ntotal == index.ntotal
    back.add([600], KeywordBatch.from_docs([("w1", "w2 w2")], (1.5, 1.0)))   # still takes writes
    assert back.search(["w2"], 1_000)[0][0] in {600} | {r for r, _, b in rows if "w2" in b.split()}


@pytest.mark.parametrize("seed", range(3))
def test_a_saved_and_loaded_keyword_index_scores_exactly_as_okapi_bm25_written_out(seed):
    import random

    from services.knowledge_store.embedded.keyword_index import KeywordIndex
    from tests.unit.knowledge_store.embedded.test_keyword_search import naive_bm25, random_docs

    rng = random.Random(seed)
    vocab = [f"t{i}" for i in range(60)]
    docs = random_docs(rng, 150, vocab)
    weights = (2.0, 1.0)
    index = KeywordIndex.build(((i + 1, " ".join(t), " ".join(b)) for i, (t, b) in enumerate(docs)), weights)
    loaded = KeywordIndex.from_arrays(index.arrays())
    for _ in range(10):
        query = rng.sample(vocab, rng.randint(1, 4))
        expected = naive_bm25(docs, query, weights)
        got = dict(loaded.search(query, len(docs)))
        assert set(got) == {i + 1 for i, s in enumerate(expected) if s > 0}
        for rid, score in got.items():
            assert score == pytest.approx(expected[rid - 1], rel=1e-6)
        rows = np.arange(1, len(docs) + 1)
        np.testing.assert_allclose(loaded.score_rows(query, rows), expected, rtol=1e-5, atol=1e-6)


def test_the_bulk_build_equals_adding_the_same_rows_in_batches():
    import random

    from services.knowledge_store.embedded import keyword_index
    from services.knowledge_store.embedded.keyword_index import KeywordBatch, KeywordIndex

    rng = random.Random(9)
    vocab = [f"w{i}" for i in range(80)]
    rows = [(rid, " ".join(rng.choices(vocab, k=rng.randint(0, 3))), " ".join(rng.choices(vocab, k=rng.randint(0, 30))))
            for rid in range(3, 900, 2)]
    weights = (1.7, 0.9)
    old_block = keyword_index.BUILD_BLOCK
    keyword_index.BUILD_BLOCK = 64                                  # several blocks
    try:
        built = KeywordIndex.build(rows, weights)
    finally:
        keyword_index.BUILD_BLOCK = old_block
    added = KeywordIndex(weights)
    for i in range(0, len(rows), 100):
        part = rows[i:i + 100]
        added.add([r for r, _, _ in part], KeywordBatch.from_docs([(t, b) for _, t, b in part], weights))
    assert built.ntotal == added.ntotal == len(rows)
    built.remove(np.arange(3, 300, 6))
    added.remove(np.arange(3, 300, 6))
    # the added one keeps its postings as a delta; merged (compacted) and saved/loaded it is CSR
    for other in (added, added.compacted(), KeywordIndex.from_arrays(added.arrays())):
        for _ in range(20):
            query = rng.sample(vocab, rng.randint(1, 5))
            got, expected = built.search(query, 50), other.search(query, 50)
            assert [r for r, _ in got] == [r for r, _ in expected]
            np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-6)
            assert built.document_frequencies(query) == other.document_frequencies(query)
            rids = np.arange(1, 900)
            np.testing.assert_allclose(built.score_rows(query, rids), other.score_rows(query, rids), rtol=1e-6)
    a = built.arrays()
    assert a["positions"].dtype == np.int32 and a["tfs"].dtype == np.float32
    assert len(a["positions"]) == sum(len(set(t.split() + b.split())) for _, t, b in rows)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_big_files_are_memory_mapped_then_owned_at_the_first_write(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(persistence, "MAP_ABOVE_BYTES", 0)          # every file counts as big here
    settings = settings_for(tmp_path, default_index_kind=kind)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 40))
    expected = await answers(store)
    store.close()
    store = KnowledgeStore(settings, HashEmbedder())
    try:
        assert await answers(store) == expected
        tenant = await store._tenants.get("t")
        assert tenant.index._mapped and isinstance(tenant.keywords._bpos, np.memmap)
        await store.ingest("t", "", docs(40, 5))                        # the first write owns a copy
        await store.delete("t", ["d2"])
        assert not tenant.index._mapped
        integrity = await store.verify_integrity("t")
        assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"] == 44
        after = await answers(store)
    finally:
        store.close()
    store = KnowledgeStore(settings, HashEmbedder())
    try:
        assert await answers(store) == after
    finally:
        store.close()


async def test_a_corrupt_mapped_file_is_caught_in_the_background_and_rebuilt(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(persistence, "MAP_ABOVE_BYTES", 0)
    settings = settings_for(tmp_path)
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", docs(0, 30))
    expected = await answers(store)
    store.close()
    vectors = next(derived_dir(tmp_path).glob("vectors.*.faiss"))
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0x01                                     # a flipped bit among the codes
    vectors.write_bytes(bytes(data))
    store = KnowledgeStore(settings, HashEmbedder())
    try:
        with caplog.at_level(logging.WARNING):
            await store.stats("t")
            assert store._tenants.counters.get("opened_loaded") == 1    # mapped: checked afterwards
            for _ in range(500):
                if store._tenants.counters.get("verify_failed"):
                    break
                await asyncio.sleep(0.01)
        assert store._tenants.counters.get("verify_failed") == 1
        assert any("fail verification" in r.message for r in caplog.records)
        assert await answers(store) == expected                      # reopened: rebuilt from SQLite
        assert store._tenants.counters.get("opened_rebuilt") == 1
    finally:
        store.close()
