"""Topics and the consistency check on both backends (embedded; qdrant-client's local mode), filled
with the demo corpus: the same partition of the same vectors for the same seed (labels aside), and
the check finding what was broken behind each store's back, the repair mending what is derived.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import models as qm

from services.knowledge_store.backend import StoreBackend, open_store
from shared.documents import iter_paths, load_document
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for

DEMO = Path(__file__).resolve().parents[3] / "demo" / "corpus"
TENANT = "demo"


@pytest.fixture(scope="module")
def demo_docs():
    return [load_document(p) for p in iter_paths(DEMO)]


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, StoreBackend]:
    base = tmp_path_factory.mktemp("backends")
    out = {"embedded": open_store(settings_for(base / "embedded"), HashEmbedder()),
           "qdrant": open_store(settings_for(base / "q", backend="qdrant", qdrant_path=base / "q" / "qdrant"),
                                HashEmbedder())}
    yield out
    for s in out.values():
        s.close()


async def _ready(store: StoreBackend, tenant: str, kind: str, filters: SearchFilters = SearchFilters(), **kw):
    for _ in range(600):
        out = await store.topics(tenant, filters, kind, **kw)
        if out["status"] == "ready":
            return out
        await asyncio.sleep(0.05)
    raise AssertionError("topics never became ready")


def _partition(answer: dict) -> set[frozenset[str]]:
    by_topic: dict[int, set[str]] = {}
    for p in answer["points"]:
        by_topic.setdefault(p["topic_id"], set()).add(p["artifact_id"])
    return {frozenset(m) for m in by_topic.values()}


async def test_topics_give_the_same_partition_on_both_backends(stores, demo_docs):
    for s in stores.values():
        await s.ingest(TENANT, "", demo_docs)
    for k in (0, 4):
        maps = {name: await _ready(s, TENANT, "map", k=k, max_points=1_000) for name, s in stores.items()}
        assert len(maps["embedded"]["points"]) == len(demo_docs)
        q, e = maps["qdrant"], maps["embedded"]
        assert (q["k"], q["criterion"]) == (e["k"], e["criterion"])
        assert _partition(maps["qdrant"]) == _partition(maps["embedded"])
        xy = {name: {p["artifact_id"]: (p["x"], p["y"]) for p in m["points"]} for name, m in maps.items()}
        for a, (x, y) in xy["embedded"].items():                       # the same PCA map, to rounding
            assert np.allclose(xy["qdrant"][a], (x, y), atol=1e-3), a
    hidden = SearchFilters(enforce_visibility=True)                # what a caller without groups sees
    seen = {name: await _ready(s, TENANT, "topics", hidden, k=4, examples=20) for name, s in stores.items()}
    assert ([t["size"] for t in seen["qdrant"]["topics"]] == [t["size"] for t in seen["embedded"]["topics"]])
    assert [t["label"] for t in seen["qdrant"]["topics"]] == [t["label"] for t in seen["embedded"]["topics"]]


async def test_a_write_gives_the_qdrant_tenant_a_new_generation(stores, demo_docs):
    q = stores["qdrant"]
    tenant = "gen"
    await q.ingest(tenant, "", demo_docs[:6])
    before = await _ready(q, tenant, "topics", k=2)
    assert before["documents"] == 6
    gen = await q._topics._source.generation(tenant)
    await q.delete(tenant, [demo_docs[0].artifact.artifact_id])
    assert await q._topics._source.generation(tenant) != gen
    after = await _ready(q, tenant, "topics", k=2)
    assert after["documents"] == 5


# ---------------------------------------------------------------------------- the check
def _damage_embedded(store, base: Path, tenant: str) -> None:
    """Behind the store's back: an entry's vector row deleted, another's vector changed, a keyword row deleted."""
    import sqlite3

    from services.knowledge_store.embedded.storage.db import DB_FILE
    conn = sqlite3.connect(base / "embedded" / "tenants" / tenant / DB_FILE, isolation_level=None)
    rids = [r[0] for r in conn.execute("SELECT rid FROM entries ORDER BY rid")]
    conn.execute("DELETE FROM entry_vectors WHERE rid = ?", (rids[0],))
    blob = bytearray(conn.execute("SELECT vector FROM entry_vectors WHERE rid = ?", (rids[1],)).fetchone()[0])
    blob[100] ^= 0x40
    conn.execute("UPDATE entry_vectors SET vector = ? WHERE rid = ?", (bytes(blob), rids[1]))
    conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (rids[2],))
    conn.close()


async def _damage_qdrant(store, tenant: str) -> str:
    """Behind the store's back: a point's vector changed, a term's document frequency removed from
    the statistics. Returns another point's id (to delete)."""
    from services.knowledge_store.qdrant import layout
    points, _ = await store._call("scroll", collection_name=store._names.chunks,
                                  scroll_filter=await store._scope(tenant), limit=2, with_payload=["entry_id"],
                                  with_vectors=[layout.SPARSE])
    await store._call("update_vectors", collection_name=store._names.chunks, wait=True, points=[qm.PointVectors(
        id=points[1].id, vector={layout.DENSE: np.roll(np.eye(1, store.dimension, 0, np.float32)[0], 7).tolist()})])
    term = int(points[1].vector[layout.SPARSE].indices[0])
    buckets = await store._buckets(tenant, [layout.term_bucket(term)])
    buckets[layout.term_bucket(term)].pop(str(term))
    await store._put_buckets(tenant, buckets)
    return points[0].id


async def test_the_check_finds_damage_on_both_backends_and_the_repair_mends_what_is_derived(
        stores, demo_docs, tmp_path_factory):
    tenant = "check"
    for s in stores.values():
        await s.ingest(tenant, "", demo_docs[:8])
        clean = await s.check_tenant(tenant, repair=False)
        assert clean.consistent, clean.summary()
        assert clean.unverified_rows == 0 and clean.entries > 0

    e = stores["embedded"]
    _damage_embedded(e, Path(e.status().data_dir).parent, tenant)
    found = await e.check_tenant(tenant, repair=False)
    assert (found.missing_vectors, found.corrupt_rows, found.missing_keyword_rows) == (1, 1, 1), found.summary()
    mended = await e.check_tenant(tenant, repair=True)
    assert (mended.repaired_vectors, mended.repaired_keyword_rows) == (1, 1)
    assert (mended.missing_vectors, mended.missing_keyword_rows, mended.corrupt_rows) == (0, 0, 1)   # re-ingest

    q = stores["qdrant"]
    point = await _damage_qdrant(q, tenant)
    found = await q.check_tenant(tenant, repair=False)
    assert (found.missing_entries, found.changed_vectors, found.keyword_stats_off) == (0, 1, 1), found.summary()
    [gone] = await q._call("retrieve", collection_name=q._names.chunks, ids=[point], with_payload=["entry_id"])
    lost = gone.payload["entry_id"]
    await q._call("delete", collection_name=q._names.chunks, wait=True, points_selector=qm.PointIdsList(points=[point]))
    found = await q.check_tenant(tenant, repair=False)
    assert not found.consistent
    assert (found.missing_entries, found.changed_vectors) == (1, 1) and found.keyword_stats_off > 1, found.summary()
    assert any(f"'{lost.split('#')[0]}'" in m and "ingest the document again" in m for m in found.integrity_errors)
    mended = await q.check_tenant(tenant, repair=True)
    assert mended.repaired_vectors == 1 and mended.repaired_keyword_rows == found.keyword_stats_off
    assert (mended.changed_vectors, mended.keyword_stats_off, mended.missing_entries) == (0, 0, 1)   # never invented
    assert not mended.consistent and await q.get_entries(tenant, [lost]) == []
    await q.ingest(tenant, "", [d for d in demo_docs[:8] if d.artifact.artifact_id == lost.split("#")[0]])
    assert (await q.check_tenant(tenant, repair=False)).consistent        # ingested again: whole
