"""The in-process baseline: fusion against a naive loop, retrieval with the real model and
real bm25s/FAISS, and the embedding cache."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.baseline import EmbeddingCache, InProcessBaseline, convex_fuse, encode, load_model
from benchmarks.beir import load_dataset


def naive_fuse(dense_rows, dense_scores, bm25_rows, bm25_scores, alpha, k):
    """One candidate at a time, in float32 like the implementation (so ties are the same ties)."""
    f32 = np.float32

    def norm(rows, scores):
        if not len(rows):
            return {}
        lo, hi = float(min(scores)), float(max(scores))
        return {int(r): (f32(1.0) if hi - lo <= 0 else f32((f32(s) - f32(lo)) / f32(hi - lo)))
                for r, s in zip(rows, scores)}

    d, b = norm(dense_rows, dense_scores), norm(bm25_rows, bm25_scores)
    fused = {}
    for r in set(d) | set(b):
        total = f32(0.0)
        if r in d:
            total = f32(total + f32(alpha) * d[r])
        if r in b:
            total = f32(total + f32(1.0 - alpha) * b[r])
        fused[r] = total
    order = sorted(fused, key=lambda r: (-fused[r], r))[:k]
    return order, [float(fused[r]) for r in order]


@pytest.mark.parametrize("seed", range(30))
def test_convex_fuse_matches_a_naive_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 200
    nd, nb = rng.integers(0, 60, 2)
    dense_rows = rng.choice(n, nd, replace=False)
    bm25_rows = rng.choice(n, nb, replace=False)
    dense_scores = rng.random(nd).astype(np.float32)
    bm25_scores = (rng.random(nb) * 20).astype(np.float32)
    if seed % 5 == 0 and nb:                 # ties inside a leg and across the fusion
        bm25_scores[:] = 3.0
    alpha = float(rng.choice([0.0, 0.3, 0.5, 1.0]))
    k = int(rng.integers(1, 80))
    rows, scores = convex_fuse(dense_rows, dense_scores, bm25_rows, bm25_scores, alpha, k)
    want_rows, want_scores = naive_fuse(dense_rows, dense_scores, bm25_rows, bm25_scores, alpha, k)
    assert rows.tolist() == want_rows                       # ties -> lower row, as the loop does
    np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    assert rows.dtype == np.intp and scores.dtype == np.float32


def test_convex_fuse_handles_empty_legs_and_rejects_bad_alpha() -> None:
    rows, scores = convex_fuse(np.array([3, 1]), np.array([0.9, 0.1], np.float32), np.array([], np.intp),
                               np.array([], np.float32), 0.5, 10)
    assert rows.tolist() == [3, 1] and scores.tolist() == pytest.approx([0.5, 0.0])
    rows, _ = convex_fuse(np.array([], np.intp), np.array([], np.float32), np.array([], np.intp),
                          np.array([], np.float32), 0.5, 10)
    assert rows.size == 0
    with pytest.raises(ValueError):
        convex_fuse(np.array([1]), np.array([1.0]), np.array([1]), np.array([1.0]), 1.5, 1)


@pytest.fixture(scope="module")
def model():
    return load_model()


DOCS = [("volcano", "Volcano eruptions", "Basaltic lava and magma chambers feed an eruption."),
        ("penguin", "Emperor penguins", "Penguin colonies huddle on Antarctic sea ice."),
        ("espresso", "Espresso", "Hot water is forced through finely ground coffee at pressure."),
        ("chess", "Chess openings", "The Sicilian defence is a sharp opening.")]


def test_the_baseline_finds_the_matching_document_and_times_each_stage(model) -> None:
    texts = [f"{t}\n{x}" for _, t, x in DOCS]
    baseline = InProcessBaseline(model, [d for d, _, _ in DOCS], texts, encode(model, texts), depth=3)
    hit, qv = baseline.search("where do penguins live on the ice")
    assert hit.doc_ids[0] == "penguin" and len(hit.doc_ids) <= 3
    assert set(hit.timings_ms) == {"encode", "bm25", "dense", "fuse", "total"}
    assert hit.timings_ms["total"] >= hit.timings_ms["encode"] > 0
    assert qv.shape == (384,) and np.linalg.norm(qv) == pytest.approx(1.0, abs=1e-4)
    only_stopwords, _ = baseline.search("the of and")          # dense leg alone
    assert len(only_stopwords.doc_ids) == 3


def _write(root: Path, docs) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n"
                                               for d, t, x in docs))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "penguins"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tpenguin\t1\n")
    return root


def test_the_embedding_cache_is_written_reused_and_rejected_when_stale(tmp_path: Path, model) -> None:
    cache = EmbeddingCache(tmp_path / "cache")
    ds = load_dataset(_write(tmp_path / "scifact", DOCS))
    vectors, cached = cache.corpus_vectors(ds, model)
    assert not cached and vectors.shape == (4, 384)
    assert cache.path_for(ds).name == f"{ds.fingerprint}_minilm.npy"
    np.testing.assert_array_equal(np.load(tmp_path / "cache" / "scifact_minilm.npy"), vectors)  # ks_index's name
    again, cached = cache.corpus_vectors(ds, model)
    assert cached
    np.testing.assert_array_equal(again, vectors)
    np.save(cache.path_for(ds), np.roll(vectors, 1, axis=0))                 # stale content, same shape
    (tmp_path / "cache" / "scifact_minilm.npy").unlink()
    fresh, cached = cache.corpus_vectors(ds, model)
    assert not cached
    np.testing.assert_allclose(fresh, vectors, atol=1e-5)
    cache.path_for(ds).unlink()                                              # only ks_index's file left
    reused, cached = cache.corpus_vectors(ds, model)
    assert cached and cache.path_for(ds).is_file()
    np.testing.assert_array_equal(reused, fresh)
    cache.write_query_vectors(ds, {"q1": fresh[1]})
    assert np.load(tmp_path / "cache" / "scifact_minilm_queries.npy").shape == (1, 384)
