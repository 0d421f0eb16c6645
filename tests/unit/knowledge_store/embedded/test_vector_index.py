"""VectorIndex (FAISS) against naive loops: exact top-k, selectors, removal, index kinds."""
from __future__ import annotations

import numpy as np
import pytest

from services.knowledge_store.embedded.vector_index import IndexConfig, VectorIndex, auto_nlist, exact_top_k

DIM = 32


def _unit(rng: np.random.Generator, n: int, d: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _naive_top_k(queries, ids, vectors, k):
    """One query at a time, a full sort, no numpy tricks."""
    out = []
    for q in queries:
        scored = sorted(((float(np.dot(q, v)), int(i)) for i, v in zip(ids, vectors)), key=lambda t: (-t[0], t[1]))
        out.append(scored[:k])
    return out


@pytest.mark.parametrize("seed", range(10))
def test_exact_top_k_matches_a_naive_loop(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 60)), int(rng.integers(1, 20))
    ids = rng.choice(10_000, size=n, replace=False).astype(np.int64)
    vectors, queries = _unit(rng, n), _unit(rng, 3)
    scores, labels = exact_top_k(queries, ids, vectors, k)
    for row, expected in enumerate(_naive_top_k(queries, ids, vectors, k)):
        got = [(float(s), int(i)) for s, i in zip(scores[row], labels[row]) if i >= 0]
        assert [i for _, i in got] == [i for _, i in expected]
        np.testing.assert_allclose([s for s, _ in got], [s for s, _ in expected], rtol=1e-5, atol=1e-6)
        assert (labels[row] == -1).sum() == max(0, k - n)


@pytest.mark.parametrize("seed", range(5))
def test_flat_search_with_selector_matches_naive_over_allowed_ids(seed):
    rng = np.random.default_rng(seed)
    ids = np.arange(100, 400, dtype=np.int64)
    vectors = _unit(rng, len(ids))
    index = VectorIndex(DIM, IndexConfig("flat"), ids, vectors)
    allowed = np.sort(rng.choice(ids, size=17, replace=False))
    queries = _unit(rng, 4)
    scores, labels = index.search(queries, 10, allowed)
    mask = np.isin(ids, allowed)
    for row, expected in enumerate(_naive_top_k(queries, ids[mask], vectors[mask], 10)):
        assert labels[row].tolist() == [i for _, i in expected]
        np.testing.assert_allclose(scores[row], [s for s, _ in expected], rtol=1e-5, atol=1e-6)


def test_flat_remove_drops_ids_from_results_and_count():
    rng = np.random.default_rng(1)
    ids = np.arange(1, 51, dtype=np.int64)
    vectors = _unit(rng, 50)
    index = VectorIndex(DIM, IndexConfig("flat"), ids, vectors)
    index.remove(np.array([5, 6, 7], np.int64))
    assert index.ntotal == 47
    _, labels = index.search(vectors[4:7], 50)
    assert not set(labels.ravel().tolist()) & {5, 6, 7}


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_kinds_find_each_vector_itself(kind):
    rng = np.random.default_rng(2)
    n = 2_000
    ids = np.arange(1, n + 1, dtype=np.int64)
    vectors = _unit(rng, n)
    index = VectorIndex(DIM, IndexConfig(kind, ivf_nprobe=4), ids, vectors)
    assert index.kind == kind and index.ntotal == n
    scores, labels = index.search(vectors[:200], 1)
    assert (labels[:, 0] == ids[:200]).mean() > 0.95
    np.testing.assert_allclose(scores[labels[:, 0] == ids[:200], 0], 1.0, atol=1e-5)


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_kinds_respect_the_selector(kind):
    rng = np.random.default_rng(3)
    ids = np.arange(1, 2_001, dtype=np.int64)
    vectors = _unit(rng, 2_000)
    index = VectorIndex(DIM, IndexConfig(kind), ids, vectors)
    allowed = np.sort(rng.choice(ids, size=500, replace=False))
    _, labels = index.search(_unit(rng, 10), 20, allowed)
    found = labels[labels >= 0]
    assert len(found) and np.isin(found, allowed).all()


def test_hnsw_remove_hides_ids_and_asks_for_rebuild_past_the_threshold():
    rng = np.random.default_rng(4)
    ids = np.arange(1, 101, dtype=np.int64)
    vectors = _unit(rng, 100)
    index = VectorIndex(DIM, IndexConfig("hnsw", hnsw_m=8), ids, vectors)
    index.remove(ids[:10])
    assert index.ntotal == 90 and not index.needs_rebuild
    _, labels = index.search(vectors[:10], 5)
    assert not np.isin(labels, ids[:10]).any()
    _, labels = index.exact(vectors[:10], 5, ids)
    assert not np.isin(labels, ids[:10]).any()
    index.remove(ids[10:30])
    assert index.needs_rebuild


def test_ivf_serves_as_flat_until_it_can_be_trained():
    rng = np.random.default_rng(5)
    small = VectorIndex(DIM, IndexConfig("ivf"), np.arange(1, 101, dtype=np.int64), _unit(rng, 100))
    assert small.kind == "flat" and not small.needs_rebuild
    small.add(np.arange(101, 1_200, dtype=np.int64), _unit(rng, 1_099))
    assert small.needs_rebuild, "enough vectors to train now"
    explicit = VectorIndex(DIM, IndexConfig("ivf", ivf_nlist=4), np.arange(1, 201, dtype=np.int64), _unit(rng, 200))
    assert explicit.kind == "ivf"


def test_ivf_remove_and_exact():
    rng = np.random.default_rng(6)
    ids = np.arange(1, 1_501, dtype=np.int64)
    vectors = _unit(rng, 1_500)
    index = VectorIndex(DIM, IndexConfig("ivf"), ids, vectors)
    index.remove(ids[:100])
    assert index.ntotal == 1_400
    scores, labels = index.exact(vectors[100:103], 3, ids[100:])
    assert labels[:, 0].tolist() == ids[100:103].tolist()


def test_auto_nlist_keeps_39_points_per_list():
    assert auto_nlist(1_024) == 26
    assert auto_nlist(5_183) == 132
    assert auto_nlist(1_000_000) == 4_000


def test_empty_index_and_empty_selector_return_nothing():
    index = VectorIndex(DIM, IndexConfig("flat"), np.zeros(0, np.int64), np.zeros((0, DIM), np.float32))
    scores, labels = index.search(np.ones((2, DIM), np.float32), 5)
    assert labels.shape == (2, 0)
    rng = np.random.default_rng(7)
    index.add(np.array([1, 2], np.int64), _unit(rng, 2))
    _, labels = index.search(np.ones((1, DIM), np.float32), 5, np.zeros(0, np.int64))
    assert labels.shape == (1, 0)
