"""HNSW search depth chosen per index from a recall target (search_depth.py): a small index gets
a smaller efSearch than the configured one and still meets the target, checked against exact
search; the choice survives save and restore; 0 turns the choice off."""
from __future__ import annotations

import faiss
import numpy as np

from services.knowledge_store.embedded import search_depth
from services.knowledge_store.embedded.vector_index import IndexConfig, VectorIndex

CAP = 768


def clustered(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    """Unit vectors around 50 centres (embeddings are clustered, not isotropic)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, dim)).astype(np.float32)
    v = centres[rng.integers(0, 50, n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def recall_at_10(index: VectorIndex, ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray) -> float:
    """Recall@10 of the index's searches against a naive exact search."""
    _, found = index.search(queries, 10)
    exact = ids[np.argsort(-(queries @ vectors.T), axis=1)[:, :10]]
    return float(np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found.tolist(), exact.tolist())]))


def test_a_small_index_gets_a_smaller_ef_that_meets_the_target_on_fresh_queries(tmp_path):
    drawn = clustered(3_300)
    vectors, fresh = drawn[:3_000], drawn[3_000:]        # fresh: queries the measurement never saw
    ids = np.arange(100, 3_100, dtype=np.int64)
    index = VectorIndex(32, IndexConfig(kind="hnsw", hnsw_m=16, hnsw_ef_search=CAP), ids, vectors)
    assert index.kind == "hnsw" and index.depth is not None
    assert index.ef_search < CAP and index.ef_search in search_depth.LADDER
    assert index.depth.recall >= 0.99 and index.depth.measured_at == 3_000
    assert recall_at_10(index, ids, vectors, fresh) >= 0.98
    # a rung lower would have missed the target (the choice is the smallest that meets it)
    lower = [e for e in search_depth.LADDER if e < index.ef_search]
    if lower:
        hnsw_only = search_depth.choose(index._index, lower[-1])
        assert hnsw_only.recall < 0.99
    # saved with the index, and restored
    state = index.save(str(tmp_path / "v.faiss"))
    back = VectorIndex.restore(32, index.config, str(tmp_path / "v.faiss"), kind=state["kind"],
                               tombstones=state["tombstones"], trained_on=state["trained_on"],
                               depth=state["depth"])
    assert back.ef_search == index.ef_search and back.depth == index.depth


def test_the_configured_ef_is_a_cap_and_a_zero_target_keeps_it():
    vectors = clustered(1_200, seed=3)
    ids = np.arange(1_200, dtype=np.int64)
    capped = VectorIndex(32, IndexConfig(kind="hnsw", hnsw_m=16, hnsw_ef_search=16), ids, vectors)
    assert capped.ef_search <= 16
    search_depth.set_recall_target(0.0)
    try:
        fixed = VectorIndex(32, IndexConfig(kind="hnsw", hnsw_m=16, hnsw_ef_search=CAP), ids, vectors)
    finally:
        search_depth.set_recall_target(0.99)
    assert fixed.ef_search == CAP and fixed.depth is not None and fixed.depth.recall == 0.0
    assert faiss.downcast_index(fixed._index.index).hnsw.efSearch == CAP
