"""RM3 feedback weights against a naive loop, and the learned re-ranker applied to candidates."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ranking import Candidates, RankingConfig, rank
from ranking.feedback import rm3
from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.learned import learned_order
from ranking.trees import load_model


def _naive_rm3(query, tf, lengths, scores, term_ids, terms, lam):
    total = sum(max(s, 0.0) for s in scores)
    p = {}
    for k, term in enumerate(term_ids):
        p[term] = sum(max(scores[d], 0.0) / total * tf[d][k] / max(lengths[d], 1.0) for d in range(len(scores)))
    kept = sorted(p, key=lambda w: (-p[w], w))[:terms]
    z = sum(p[w] for w in kept)
    weights = {q: lam / len(query) for q in query}
    for w in kept:
        weights[w] = weights.get(w, 0.0) + (1 - lam) * p[w] / z
    s = sum(weights.values())
    return {w: v * len(query) / s for w, v in weights.items()}


@pytest.mark.parametrize("seed", range(5))
def test_rm3_weights_equal_a_naive_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    term_ids = np.sort(rng.choice(50, size=20, replace=False)).astype(np.intp)
    tf = rng.integers(0, 4, size=(6, 20)).astype(float)
    lengths, scores = tf.sum(axis=1) + 3, rng.uniform(0, 10, 6)
    query = term_ids[rng.choice(20, size=3, replace=False)]
    ids, weights = rm3(query, tf, lengths, scores, term_ids, terms=5, original_weight=0.5)
    want = _naive_rm3(query.tolist(), tf.tolist(), lengths.tolist(), scores.tolist(), term_ids.tolist(), 5, 0.5)
    assert dict(zip(ids.tolist(), weights.tolist())) == pytest.approx(want)
    assert weights.sum() == pytest.approx(3.0)


def _model(weights: list[float], top_n: int):
    m = len(FEATURE_NAMES)
    doc = {"format": "nucleus-ranker", "kind": "linear", "feature_version": FEATURE_VERSION,
           "feature_names": list(FEATURE_NAMES), "init_scale": 1.0, "calibration": [1.0, 0.0], "top_n": top_n,
           "center": [0.0] * m, "scale": [1.0] * m, "weights": weights + [0.0] * (m - len(weights))}
    return load_model(json.dumps(doc).encode(), FEATURE_NAMES, FEATURE_VERSION)


def test_without_a_model_the_order_is_todays_and_a_model_reorders_only_its_top_n() -> None:
    rng = np.random.default_rng(1)
    c = Candidates.build(dense=rng.uniform(0, 1, 30), bm25=rng.uniform(0, 9, 30))
    cfg = RankingConfig(fusion="convex", weights=(1.0, 0.0, 0.0, 0.0))
    today = rank(c, cfg, 30).rows
    signal = rng.normal(size=30).astype(np.float32)

    def features_of(rows, fused):
        x = np.zeros((rows.size, len(FEATURE_NAMES)), dtype=np.float32)
        x[:, 0] = signal[rows]
        return x

    assert learned_order(c, cfg, None, 30, features_of).tolist() == today.tolist()
    out = learned_order(c, cfg, _model([100.0], top_n=10), 30, features_of)
    assert sorted(out[:10].tolist()) == sorted(today[:10].tolist())      # the top 10 re-ordered among themselves
    assert out[:10].tolist() == today[:10][np.argsort(-signal[today[:10]], kind="stable")].tolist()
    assert out[10:].tolist() == today[10:].tolist()                     # the rest keeps its place


def test_the_served_ranking_explains_the_learned_order_and_its_features_mark_unserved_signals_missing() -> None:
    from ranking.rank import reputation, richness
    from ranking.learned import SERVED_MISSING, fused_scores, learned_ranking, served_features
    rng = np.random.default_rng(2)
    dense = rng.uniform(0, 1, 40)
    dense[[3, 7]] = np.nan                                         # absent dense leg for two rows
    c = Candidates.build(dense=dense, bm25=rng.uniform(0, 9, 40), richness=rng.uniform(0, 1, 40),
                         reputation_prior=rng.uniform(0, 1, 40))
    cfg = RankingConfig(fusion="convex", weights=(0.7, 0.0, 0.2, 0.1))
    features_of = lambda rows, fused: served_features(c, cfg, 3, rows, fused)  # noqa: E731
    model = _model([0.0] * FEATURE_NAMES.index("richness") + [5.0], top_n=15)   # residual on richness
    learned = learned_ranking(c, cfg, model, 10, features_of)
    column, ranked = learned.column, learned.ranked
    assert ranked.rows.tolist() == learned_order(c, cfg, model, 10, features_of).tolist()
    assert np.isfinite(column).sum() == 15 and np.all((column[np.isfinite(column)] >= 0) & (column[np.isfinite(column)] <= 1))
    np.testing.assert_allclose(ranked.factors[:, 0], column[ranked.rows], rtol=1e-6)   # Relevancy = the learned one
    x = features_of(np.arange(40), fused_scores(c, cfg))
    names = list(FEATURE_NAMES)
    assert np.isnan(x[:, [names.index(n) for n in SERVED_MISSING]]).all()
    np.testing.assert_allclose(x[:, names.index("richness")], richness(c.richness))
    np.testing.assert_allclose(x[:, names.index("reputation")],
                               reputation(c.reputation_prior, c.helpful, c.unhelpful, cfg.default_reputation,
                                          cfg.prior_strength))
    assert x[:, names.index("dense_absent")].tolist() == np.isnan(dense).astype(float).tolist()
    assert np.isnan(x[[3, 7], names.index("dense_rank")]).all() and np.isfinite(x[0, names.index("bm25_gap")])
    np.testing.assert_allclose(x[:, names.index("query_terms")], np.log2(4.0))
