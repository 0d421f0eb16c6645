"""Topics and the consistency check on both backends (embedded; qdrant-client's local mode), filled
with the demo corpus: the same partition of the same vectors for the same seed (labels aside), and
the check finding what was broken behind each store's back, the repair mending what is derived.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

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
        assert maps["qdrant"]["k"] == maps["embedded"]["k"] and maps["qdrant"]["criterion"] == maps["embedded"]["criterion"]
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
