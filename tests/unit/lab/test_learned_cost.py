"""The learned ranking served in one pass ranks exactly as the three-pass path it replaced (kept in
lab/learned_cost.py as the benchmark's "before"), on random candidates, configs and models."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from lab.learned_cost import QUERY_TERMS, before, before_served_features, make_candidates, same, train_model
from ranking import RankingConfig, relevancy
from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.learned import learned_ranking, served_features
from ranking.trees import load_model
from tests.support.ranking_models import linear_model

pytest.importorskip("lightgbm")

NOW = 1_750_000_000.0


@pytest.fixture(scope="module")
def trees():
    return train_model(np.random.default_rng(5), 60, queries=30, rounds=20, top_n=30)


def _linear(rng):
    weights = rng.normal(size=len(FEATURE_NAMES)).tolist()
    return load_model(linear_model(top_n=int(rng.integers(1, 40)), weights=weights,
                                   center=rng.normal(size=len(weights)).tolist()), FEATURE_NAMES, FEATURE_VERSION)


@pytest.mark.parametrize("seed", range(6))
def test_the_one_pass_learned_ranking_equals_the_three_pass_one_bit_for_bit(trees, seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        c, _ = make_candidates(rng, int(rng.integers(1, 80)))
        if rng.random() < 0.3:
            c = replace(c, timestamp=np.where(rng.random(len(c)) < 0.5, 0.0, NOW - rng.uniform(0, 1e8, len(c))))
        side = rng.uniform(0, 1, 3) * (rng.random(3) < 0.7)
        cfg = RankingConfig(fusion=str(rng.choice(["convex", "convex_minmax", "rrf"])), now_unix=NOW,
                            weights=(float(rng.uniform(0.1, 1)), *(float(w) for w in side)),
                            apply_recency=bool(rng.random() < 0.5))
        model = trees if rng.random() < 0.5 else _linear(rng)
        k = int(rng.integers(1, 60))
        old = before(c, cfg, model, k, QUERY_TERMS)
        new = learned_ranking(c, cfg, model, k, lambda rs, fused: served_features(c, cfg, QUERY_TERMS, rs, fused))
        assert same(old, new.ranked), (seed, k, model.kind)
        assert np.array_equal(old.contributions, new.ranked.contributions)
        rows = np.arange(len(c))[::-1]
        fused = relevancy(c, cfg)[1].fused
        np.testing.assert_array_equal(served_features(c, cfg, QUERY_TERMS, rows, fused),
                                      before_served_features(c, cfg, QUERY_TERMS, rows, fused))
