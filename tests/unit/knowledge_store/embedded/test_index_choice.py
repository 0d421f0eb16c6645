"""Index choice by size (vector_index.py "auto"): flat below `hnsw_threshold` vectors, HNSW from
there on, shown in stats; filtered searches on HNSW stay correct and fill k; HNSW recall@10
against exact search at the default efSearch. Small data (thresholds are settings)."""
from __future__ import annotations

import numpy as np
import pytest

from services.knowledge_store.embedded import search
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.vector_index import IndexConfig, VectorIndex, exact_top_k
from shared.records import SearchFilters
from shared.settings import KnowledgeStoreSettings
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


def notes(start: int, n: int) -> list:
    return [doc(f"n{i}", f"Maintenance note {i}: check unit {i % 13} and part {i % 29} of line {i % 7}.",
                tags=("rare",) if i % 40 == 0 else ("half",) if i % 2 else ())
            for i in range(start, start + n)]


@pytest.fixture
async def store(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, hnsw_threshold=300), HashEmbedder())
    yield store
    store.close()


async def test_auto_switches_from_flat_to_hnsw_past_the_threshold(store):
    await store.ingest("t", "", notes(0, 200))
    assert (await store.stats("t")).index_kind == "flat"
    await store.ingest("t", "", notes(200, 200))
    stats = await store.stats("t")
    assert (stats.index_kind, stats.vectors) == ("hnsw", 400)
    await store.delete("t", [f"n{i}" for i in range(260)])      # well below half the threshold
    assert (await store.stats("t")).index_kind == "flat"


async def test_an_explicit_kind_is_kept_whatever_the_size(store):
    await store.ingest("t", "", notes(0, 400))
    assert await store.configure_index("t", "flat") == ("flat", 400)
    await store.ingest("t", "", notes(400, 10))
    assert (await store.stats("t")).index_kind == "flat"


@pytest.mark.parametrize("through_hnsw", [False, True], ids=["exact-small-filter", "hnsw-selector"])
@pytest.mark.parametrize("filters, allowed", [(SearchFilters(tags=("rare",)), 10),
                                              (SearchFilters(tags=("half",)), 200)])
async def test_filtered_hnsw_searches_fill_k_with_matching_entries_only(store, monkeypatch, filters, allowed,
                                                                       through_hnsw):
    if through_hnsw:        # search HNSW with the filter's selector, falling back to exact when short
        monkeypatch.setattr(search, "EXACT_FILTER_MAX", 0)
    await store.ingest("t", "", notes(0, 400))
    assert (await store.stats("t")).index_kind == "hnsw"
    tag = filters.tags[0]
    query = HashEmbedder().vector("maintenance note check unit 3 part 5")[None, :]
    for k in (5, 10, 50):
        hits = (await store.dense("t", query, k, filters, hits=True))[0]
        assert len(hits) == min(k, allowed)
        assert all(tag in h.artifact.tags for h in hits)
        assert len({h.entry.id for h in hits}) == len(hits)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)


def test_the_default_threshold_and_ef_search_are_settings():
    settings = KnowledgeStoreSettings()
    assert settings.default_index_kind == "auto"
    assert settings.hnsw_threshold > 0 and settings.hnsw_ef_search > 0


def test_vector_index_auto_picks_by_size_and_asks_for_a_rebuild_when_crossing():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((120, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(1, 121, dtype=np.int64)
    small = VectorIndex(16, IndexConfig("auto"), ids[:90], x[:90], auto_threshold=100)
    assert small.kind == "flat" and not small.needs_rebuild
    small.add(ids[90:], x[90:])
    assert small.needs_rebuild
    big = VectorIndex(16, IndexConfig("auto"), ids, x, auto_threshold=100)
    assert big.kind == "hnsw" and not big.needs_rebuild
    big.remove(ids[:80])
    assert big.needs_rebuild


def test_hnsw_recall_at_10_against_exact_search_at_the_default_settings():
    """Clustered unit vectors (as sentence embeddings are), 5,000 of them, 200 queries."""
    rng = np.random.default_rng(7)
    d, n = 64, 5_000
    centres = rng.standard_normal((50, d)).astype(np.float32)
    x = centres[rng.integers(0, 50, n)] + 0.6 * rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(n, 200, replace=False)] + 0.3 * rng.standard_normal((200, d)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    ids = np.arange(10, 10 + n, dtype=np.int64)
    ef = KnowledgeStoreSettings().hnsw_ef_search
    hnsw = VectorIndex(d, IndexConfig("hnsw", hnsw_ef_search=ef), ids, x)
    _, got = hnsw.search(q, 10)
    _, truth = exact_top_k(q, ids, x, 10)
    recall = np.mean([len(set(g) & set(t)) / 10 for g, t in zip(got.tolist(), truth.tolist())])
    assert recall >= 0.95, recall


def hnsw_of(tenant):
    """The FAISS HNSW structure inside a tenant's index (IndexIDMap2 around IndexHNSWFlat)."""
    import faiss
    return faiss.downcast_index(tenant.index._index.index).hnsw


def opened(store: KnowledgeStore) -> set[str]:
    return {k for k, v in store._tenants.counters.items() if k.startswith("opened_") and v}


async def test_hnsw_m_and_ef_construction_are_settings_that_reach_the_graph(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, hnsw_threshold=300, hnsw_m=12, hnsw_ef_construction=150),
                           HashEmbedder())
    try:
        await store.ingest("t", "", notes(0, 400))
        tenant = await store._tenants.get("t")
        assert tenant.index.kind == "hnsw"
        assert (hnsw_of(tenant).efConstruction, hnsw_of(tenant).nb_neighbors(1)) == (150, 12)
    finally:
        store.close()


async def test_saved_hnsw_files_are_rebuilt_when_m_or_ef_construction_change_not_ef_search(tmp_path, caplog):
    import logging

    def open_store(**overrides):
        return KnowledgeStore(settings_for(tmp_path, hnsw_threshold=300, **overrides), HashEmbedder())

    defaults = KnowledgeStoreSettings()
    store = open_store()
    await store.ingest("t", "", notes(0, 400))
    store.close()                                        # saves the HNSW files
    ef_construction = defaults.hnsw_ef_construction + 40
    for overrides, how in (({"hnsw_ef_search": defaults.hnsw_ef_search + 100}, "opened_loaded"),
                           ({"hnsw_ef_construction": ef_construction}, "opened_rebuilt"),
                           ({"hnsw_ef_construction": ef_construction}, "opened_loaded"),
                           ({"hnsw_ef_construction": ef_construction, "hnsw_m": 16}, "opened_rebuilt")):
        store = open_store(**overrides)
        caplog.clear()
        try:
            with caplog.at_level(logging.WARNING):
                tenant = await store._tenants.get("t")
            assert opened(store) == {how}, (overrides, opened(store))
            assert hnsw_of(tenant).efConstruction == overrides.get("hnsw_ef_construction",
                                                                   defaults.hnsw_ef_construction)
            assert hnsw_of(tenant).nb_neighbors(1) == overrides.get("hnsw_m", defaults.hnsw_m)
            assert tenant.index.config.hnsw_ef_search == overrides.get("hnsw_ef_search", defaults.hnsw_ef_search)
            assert (how == "opened_rebuilt") == any("index_config" in r.getMessage() for r in caplog.records)
        finally:
            store.close()


async def test_files_saved_before_ef_construction_was_a_setting_still_load(tmp_path):
    """Manifests written before the setting existed lack the field: their HNSW graphs were built
    with efConstruction 80 and load as such; a flat tenant's files ignore the HNSW parameters."""
    import json

    from services.knowledge_store.embedded import persistence

    legacy = {"hnsw_threshold": 300, "hnsw_m": 32, "hnsw_ef_construction": 80}    # the settings of those files
    store = KnowledgeStore(settings_for(tmp_path, **legacy), HashEmbedder())
    await store.ingest("big", "", notes(0, 400))
    await store.ingest("small", "", notes(0, 50))
    store.close()
    for tenant in ("big", "small"):
        manifest_path = tmp_path / "tenants" / tenant / persistence.DIR_NAME / persistence.MANIFEST
        manifest = json.loads(manifest_path.read_text())
        config = json.loads(manifest["index_config"])
        del config["hnsw_ef_construction"]
        manifest["index_config"] = json.dumps(config, sort_keys=True)
        manifest_path.write_text(json.dumps(manifest))
    store = KnowledgeStore(settings_for(tmp_path, **legacy), HashEmbedder())
    try:
        assert (await store._tenants.get("big")).index.kind == "hnsw"
        assert opened(store) == {"opened_loaded"}
    finally:
        store.close()
    store = KnowledgeStore(settings_for(tmp_path, hnsw_threshold=300, hnsw_m=8, hnsw_ef_construction=100),
                           HashEmbedder())
    try:
        assert (await store._tenants.get("small")).index.kind == "flat"
        assert opened(store) == {"opened_loaded"}, "a flat index does not depend on the HNSW parameters"
        await store._tenants.get("big")
        assert store._tenants.counters["opened_rebuilt"] == 1
    finally:
        store.close()
