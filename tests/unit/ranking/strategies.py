"""Hypothesis strategies and seeded generators for candidates and configs."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ranking.inputs import Candidates
from ranking.inputs import RankingConfig
from ranking.query_features import QueryFeatures

NOW = 1_750_000_000.0
DAY = 86_400.0


def _f32(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, width=32, allow_nan=False, allow_subnormal=False)


@st.composite
def candidates(draw: st.DrawFn, max_n: int = 30, min_n: int = 0) -> Candidates:
    """Random candidates: legs mixed / entirely absent / complete, frequent exact ties."""
    n = draw(st.integers(min_n, max_n))
    few_values = draw(st.booleans())  # draw from a tiny pool so that ties are common

    def values(lo: float, hi: float) -> st.SearchStrategy[float]:
        if few_values:
            return st.sampled_from([lo, lo + (hi - lo) / 3, hi])
        return _f32(lo, hi)

    def leg(lo: float, hi: float) -> tuple[list[float], list[int]]:
        mode = draw(st.sampled_from(["mixed", "mixed", "absent", "complete"]))
        scores = draw(st.lists(values(lo, hi), min_size=n, max_size=n))
        if mode == "absent":
            scores = [math.nan] * n
        elif mode == "mixed":
            keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            scores = [s if k else math.nan for s, k in zip(scores, keep)]
        ranks = [0 if math.isnan(s) else draw(st.integers(1, 3 if few_values else 60))
                 for s in scores]
        return scores, ranks

    dense, dense_rank = leg(-1.0, 1.0)
    bm25, bm25_rank = leg(0.0, 40.0)
    timestamp = draw(st.lists(
        st.one_of(st.just(0.0),
                  st.floats(NOW - 3000 * DAY, NOW + 30 * DAY, allow_nan=False)),
        min_size=n, max_size=n))
    richness = draw(st.lists(values(0.0, 1.0), min_size=n, max_size=n))
    prior = draw(st.lists(st.one_of(st.just(0.0), values(0.0, 1.0)), min_size=n, max_size=n))
    helpful = draw(st.lists(st.integers(0, 3 if few_values else 500), min_size=n, max_size=n))
    unhelpful = draw(st.lists(st.integers(0, 3 if few_values else 500), min_size=n, max_size=n))
    rerank = draw(st.lists(st.one_of(st.just(math.nan), values(0.0, 1.0)),
                           min_size=n, max_size=n))
    return Candidates.build(dense=dense, bm25=bm25, dense_rank=dense_rank, bm25_rank=bm25_rank,
                            timestamp=timestamp, richness=richness, reputation_prior=prior,
                            helpful=helpful, unhelpful=unhelpful, rerank=rerank)


@st.composite
def configs(draw: st.DrawFn, fusion: str | None = None) -> RankingConfig:
    weight = st.one_of(st.just(0.0), st.floats(0.0, 1.0))
    apply_recency = draw(st.booleans())
    weights = draw(st.tuples(weight, weight, weight, weight).filter(
        lambda w: (w[0] + w[2] + w[3] > 0) if not apply_recency else sum(w) > 0))
    lo = draw(st.floats(-0.5, 0.9))
    hi = draw(st.floats(lo + 0.01, 1.0))
    features = draw(st.one_of(st.none(), query_features()))
    return RankingConfig(
        weights=weights,
        fusion=fusion or draw(st.sampled_from(["convex", "convex_minmax", "rrf", "adaptive"])),
        query=features,
        probability_calibration=(draw(st.floats(0.1, 30.0)), draw(st.floats(0.0, 5.0)),
                                 draw(st.floats(-30.0, 5.0))),
        dense_weight=draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0))),
        rrf_k=draw(st.one_of(st.just(60.0), st.floats(0.0, 100.0))),
        half_life_days=draw(st.floats(0.5, 1000.0)),
        apply_recency=apply_recency,
        now_unix=NOW,
        default_reputation=draw(st.floats(0.0, 1.0)),
        prior_strength=draw(st.floats(0.1, 20.0)),
        rerank_weight=draw(st.floats(0.0, 1.0)),
        dense_calibration=(lo, hi),
        bm25_calibration=draw(st.floats(0.1, 50.0)),
    )


@st.composite
def query_features(draw: st.DrawFn) -> QueryFeatures:
    """Features of any query: short or long, quoted or not, identifiers, rarity."""
    return QueryFeatures(words=draw(st.integers(0, 40)), quoted=draw(st.booleans()),
                         identifiers=draw(st.integers(0, 3)), rarity=draw(st.floats(0.0, 1.0)))


@st.composite
def complete_candidates(draw: st.DrawFn, max_n: int = 30) -> Candidates:
    """Candidates as score completion leaves them: both signals known for every candidate."""
    c = draw(candidates(max_n=max_n, min_n=1))
    n = len(c)
    dense = draw(st.lists(_f32(-1.0, 1.0), min_size=n, max_size=n))
    bm25 = draw(st.lists(st.one_of(st.just(0.0), _f32(0.0, 40.0)), min_size=n, max_size=n))
    return Candidates.build(dense=dense, bm25=bm25, timestamp=c.timestamp, richness=c.richness,
                            reputation_prior=c.reputation_prior, helpful=c.helpful, unhelpful=c.unhelpful,
                            rerank=c.rerank)


def random_candidates(seed: int, n: int, *, ties: bool = False) -> Candidates:
    """Seeded numpy candidates shaped like a real merged result (for larger n)."""
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-0.2, 0.95, n).astype(np.float32)
    bm25 = rng.gamma(2.0, 4.0, n).astype(np.float32)
    if ties:
        dense = np.round(dense, 1)
        bm25 = np.round(bm25)
    dense_missing = rng.random(n) < 0.3
    bm25_missing = rng.random(n) < 0.5
    bm25_missing &= ~dense_missing  # every candidate came from at least one leg
    dense[dense_missing] = np.nan
    bm25[bm25_missing] = np.nan
    return Candidates.build(
        dense=dense, bm25=bm25,
        timestamp=np.where(rng.random(n) < 0.1, 0.0, rng.uniform(NOW - 2000 * DAY, NOW, n)),
        richness=rng.random(n).round(1) if ties else rng.random(n),
        reputation_prior=np.where(rng.random(n) < 0.2, 0.0, rng.random(n)),
        helpful=rng.integers(0, 30, n), unhelpful=rng.integers(0, 30, n),
        rerank=np.where(rng.random(n) < 0.8, np.nan, rng.random(n)),
    )
