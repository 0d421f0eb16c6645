"""GetFieldSignals' title vectors in memory (embedded/title_cache.py): read once per tenant,
served from memory while the tenant is unchanged, read again after a write (at most every
rebuild_after_s), never cached past the artifact limit — and always what SQLite holds."""
from __future__ import annotations

import numpy as np
import pytest

from services.knowledge_store.field_signals import field_signals
from tests.unit.knowledge_store.helpers import doc

DOCS = [doc("volcano", "Volcanic ash clouds ground aircraft.", title="Volcanic ash"),
        doc("bread", "Sourdough bread rises with wild yeast.", title="Bread"),
        doc("untitled", "A note without a title.")]
IDS = ["volcano#0", "bread#0", "untitled#0"]


async def _dense_title(store, embedder, tenant="titles"):
    q = embedder.vector("volcanic ash")
    return (await field_signals(store, tenant, IDS, "volcanic ash", q)).dense_title, q


async def test_title_vectors_are_read_once_and_served_from_memory_until_a_write(store, embedder):
    cache = store.titles
    cache.rebuild_after_s = 0.0
    await store.ingest("titles", "", DOCS)
    first, q = await _dense_title(store, embedder)
    want = [float(embedder.vector("Volcanic ash") @ q), float(embedder.vector("Bread") @ q), np.nan]
    np.testing.assert_allclose(first, want, atol=1e-6)
    builds = cache.builds
    again, _ = await _dense_title(store, embedder)
    np.testing.assert_array_equal(again, first)
    assert cache.builds == builds                                  # from memory
    await store.ingest("titles", "", [doc("bread", "Rye bread.", title="Rye")])   # a write: read again
    after, _ = await _dense_title(store, embedder)
    assert cache.builds == builds + 1
    assert after[1] == pytest.approx(float(embedder.vector("Rye") @ q), abs=1e-6)


async def test_a_changed_tenant_is_read_per_query_until_the_rebuild_interval_passes(store, embedder):
    cache = store.titles
    cache.rebuild_after_s = 3600.0
    await store.ingest("titles", "", DOCS)
    await _dense_title(store, embedder)
    builds = cache.builds
    await store.ingest("titles", "", [doc("bread", "Rye bread.", title="Rye")])
    after, q = await _dense_title(store, embedder)                 # stale matrix not used: SQLite read
    assert cache.builds == builds and after[1] == pytest.approx(float(embedder.vector("Rye") @ q), abs=1e-6)


async def test_a_tenant_over_the_limit_is_never_cached_and_reads_the_same(store, embedder):
    cache = store.titles
    cache.max_artifacts = 1
    await store.ingest("titles", "", DOCS)
    got, q = await _dense_title(store, embedder)
    assert cache.builds == 0
    assert got[0] == pytest.approx(float(embedder.vector("Volcanic ash") @ q), abs=1e-6) and np.isnan(got[2])


async def test_tenants_matrices_stay_under_the_byte_limit_least_recently_used_dropped(store, embedder):
    cache = store.titles
    cache.max_bytes = 2 * 384 * 4 + 1          # room for one tenant's two titled artifacts, not two tenants'
    cache.rebuild_after_s = 0.0
    for tenant in ("titles-a", "titles-b"):
        await store.ingest(tenant, "", DOCS)
        await _dense_title(store, embedder, tenant)
    assert cache.builds == 2 and cache.nbytes <= cache.max_bytes
    again, q = await _dense_title(store, embedder, "titles-a")   # dropped: read again, same values
    assert cache.builds == 3
    assert again[0] == pytest.approx(float(embedder.vector("Volcanic ash") @ q), abs=1e-6)
