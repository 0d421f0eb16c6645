from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ranking.inputs import Candidates
from ranking.inputs import RankingConfig
from ranking.rank import recency, relevancy, reputation, richness
from shared.errors import InvalidArgument
from tests.unit.ranking import naive
from tests.unit.ranking.strategies import DAY, NOW, candidates, configs, random_candidates

TOL = naive.TOL


def _assert_unit_float32(x: np.ndarray) -> None:
    assert x.dtype == np.float32
    assert not np.isnan(x).any()
    assert (x >= 0).all() and (x <= 1).all()


# --- relevancy against the naive loop -------------------------------------------------------

# 100 examples a run (Hypothesis's default) for the two relevancy properties drawn from candidates(): most of
# their time is drawing the candidates; with the four fusions that is still 400 cases a run, new ones each run.
@pytest.mark.parametrize("fusion", ["convex", "convex_minmax", "rrf", "adaptive"])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_relevancy_matches_naive_loop(fusion: str, data: st.DataObject) -> None:
    c = data.draw(candidates())
    cfg = data.draw(configs(fusion=fusion))
    rel, trace = relevancy(c, cfg)
    expected = naive.relevancy(naive.rows_of(c), cfg)

    for got in (rel, trace.dense_norm, trace.bm25_norm, trace.fused):
        _assert_unit_float32(got)
        assert got.shape == (len(c),)
    np.testing.assert_allclose(trace.dense_norm, expected["dense_norm"], atol=TOL, rtol=0)
    np.testing.assert_allclose(trace.bm25_norm, expected["bm25_norm"], atol=TOL, rtol=0)
    np.testing.assert_allclose(trace.fused, expected["fused"], atol=TOL, rtol=0)
    assert trace.confidence == pytest.approx(expected["confidence"], abs=TOL)
    assert 0.0 <= trace.confidence <= 1.0
    assert trace.dense_weight == pytest.approx(expected["alpha"], abs=1e-9)
    np.testing.assert_allclose(rel, expected["relevancy"], atol=TOL, rtol=0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("fusion", ["convex", "convex_minmax", "rrf", "adaptive"])
def test_relevancy_matches_naive_loop_on_large_seeded_inputs(seed: int, fusion: str) -> None:
    c = random_candidates(seed, 3000, ties=seed % 2 == 1)
    cfg = RankingConfig(fusion=fusion, dense_weight=0.3 + 0.1 * seed)
    rel, trace = relevancy(c, cfg)
    expected = naive.relevancy(naive.rows_of(c), cfg)
    np.testing.assert_allclose(trace.fused, expected["fused"], atol=TOL, rtol=0)
    np.testing.assert_allclose(rel, expected["relevancy"], atol=TOL, rtol=0)
    assert trace.confidence == pytest.approx(expected["confidence"], abs=TOL)


@settings(max_examples=100, deadline=None)
@given(c=candidates(), cfg=configs())
def test_relevancy_never_inverts_the_order_of_fused_without_rerank(
        c: Candidates, cfg: RankingConfig) -> None:
    c = Candidates.build(dense=c.dense, bm25=c.bm25, dense_rank=c.dense_rank,
                         bm25_rank=c.bm25_rank)  # no rerank
    rel, trace = relevancy(c, cfg)
    fused = trace.fused
    for i in range(len(c)):
        for j in range(len(c)):
            if fused[i] == fused[j]:
                assert rel[i] == rel[j]
            elif fused[i] > fused[j]:
                assert rel[i] >= rel[j]


def test_relevancy_keeps_the_exact_fused_order_and_scales_by_confidence() -> None:
    c = random_candidates(7, 500)
    c = Candidates.build(dense=c.dense, bm25=c.bm25)
    rel, trace = relevancy(c, RankingConfig())
    assert list(np.argsort(-rel, kind="stable")) == list(np.argsort(-trace.fused, kind="stable"))
    np.testing.assert_allclose(rel, trace.fused * (0.5 + 0.5 * trace.confidence), rtol=1e-6)


def test_weak_best_match_gives_lower_relevancy_than_strong_best_match() -> None:
    strong = Candidates.build(dense=[0.80, 0.60, 0.40], bm25=[12.0, 6.0, 1.0])
    weak = Candidates.build(dense=[0.30, 0.20, 0.10], bm25=[1.2, 0.6, 0.1])
    cfg = RankingConfig(fusion="convex_minmax")
    rel_strong, trace_strong = relevancy(strong, cfg)
    rel_weak, trace_weak = relevancy(weak, cfg)
    # identical within-query fusion (same min-max shape) ...
    np.testing.assert_allclose(trace_strong.fused, trace_weak.fused, atol=1e-6)
    # ... but the weak query's calibrated relevancies are lower wherever fused > 0
    assert trace_weak.confidence < trace_strong.confidence
    assert rel_weak[0] < rel_strong[0] and rel_weak[1] < rel_strong[1]


def test_keyword_only_query_uses_bm25_alone_whatever_the_dense_weight() -> None:
    c = Candidates.build(bm25=[10.0, 5.0, 0.0])
    rel, trace = relevancy(c, RankingConfig(dense_weight=0.9))
    np.testing.assert_allclose(trace.fused, [1.0, 0.5, 0.0], atol=1e-6)
    assert trace.confidence == pytest.approx(10.0 / (10.0 + 10.0))
    np.testing.assert_allclose(trace.dense_norm, 0.0)


def test_dense_only_query_uses_dense_alone_whatever_the_dense_weight() -> None:
    c = Candidates.build(dense=[0.75, 0.45, 0.15])
    rel, trace = relevancy(c, RankingConfig(fusion="convex_minmax", dense_weight=0.1))
    np.testing.assert_allclose(trace.fused, [1.0, 0.5, 0.0], atol=1e-6)
    assert trace.confidence == pytest.approx(1.0)
    np.testing.assert_allclose(rel, [1.0, 0.5, 0.0], atol=1e-6)


def test_a_leg_with_one_hit_normalises_that_hit_to_one() -> None:
    c = Candidates.build(dense=[0.2, math.nan, math.nan], bm25=[math.nan, 3.0, 3.0])
    _, trace = relevancy(c, RankingConfig())
    np.testing.assert_array_equal(trace.dense_norm, [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(trace.bm25_norm, [0.0, 1.0, 1.0])


def test_rrf_candidate_first_in_both_legs_scores_one() -> None:
    c = Candidates.build(dense=[0.9, 0.5], bm25=[9.0, 2.0])
    _, trace = relevancy(c, RankingConfig(fusion="rrf", rrf_k=60.0))
    assert trace.fused[0] == pytest.approx(1.0)
    assert trace.fused[1] == pytest.approx((61 / 62))


@pytest.mark.parametrize("rrf_k", [0.0, 1.0, 31.33719132012725, 60.0, 99.9])
def test_rrf_first_rank_normalises_to_exactly_one_and_never_above(rrf_k: float) -> None:
    c = Candidates.build(bm25=[9.0, 7.0, 5.0, math.nan], bm25_rank=[1, 2, 1000, 0])
    _, trace = relevancy(c, RankingConfig(fusion="rrf", rrf_k=rrf_k))
    assert trace.bm25_norm[0] == 1.0 and trace.fused[0] == 1.0
    assert 0.0 < trace.bm25_norm[2] < trace.bm25_norm[1] < 1.0
    assert trace.bm25_norm[3] == 0.0


def test_rerank_is_blended_only_where_present() -> None:
    c = Candidates.build(dense=[0.75, 0.15], rerank=[math.nan, 1.0])
    rel, trace = relevancy(c, RankingConfig(fusion="convex_minmax", rerank_weight=0.25))
    assert rel[0] == pytest.approx(1.0)           # not re-ranked: untouched
    assert rel[1] == pytest.approx(0.75 * 0.0 + 0.25 * 1.0)


def test_theoretical_minmax_keeps_ratios_where_minmax_would_stretch_a_near_tie() -> None:
    c = Candidates.build(dense=[0.80, 0.78], bm25=[4.20, 4.07])
    _, tmm = relevancy(c, RankingConfig(fusion="convex"))
    _, mm = relevancy(c, RankingConfig(fusion="convex_minmax"))
    np.testing.assert_allclose(tmm.dense_norm, [1.0, 0.78 / 0.80], rtol=1e-6)
    np.testing.assert_allclose(tmm.bm25_norm, [1.0, 4.07 / 4.20], rtol=1e-6)
    np.testing.assert_allclose(mm.bm25_norm, [1.0, 0.0], atol=1e-6)
    assert tmm.fused[1] > 0.95 > mm.fused[1]


def test_no_candidates_gives_empty_relevancy_and_zero_confidence() -> None:
    rel, trace = relevancy(Candidates.build(dense=[]), RankingConfig())
    assert rel.shape == (0,) and rel.dtype == np.float32
    assert trace.confidence == 0.0


# --- recency ------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(timestamps=st.lists(st.one_of(st.just(0.0),
                                     st.floats(0.0, NOW + 400 * DAY, allow_nan=False)),
                           max_size=40),
       half_life=st.floats(0.01, 5000.0))
def test_recency_matches_naive_loop(timestamps: list[float], half_life: float) -> None:
    got = recency(np.array(timestamps, dtype=np.float64), NOW, half_life)
    _assert_unit_float32(got)
    np.testing.assert_allclose(got, naive.recency(timestamps, NOW, half_life), atol=TOL, rtol=0)


def test_recency_is_neutral_when_the_timestamp_is_unknown() -> None:
    got = recency(np.array([0.0, 0.0]), NOW, 30.0)
    np.testing.assert_array_equal(got, [0.5, 0.5])


def test_recency_halves_every_half_life_and_caps_future_dates_at_one() -> None:
    ts = np.array([NOW, NOW - 30 * DAY, NOW - 60 * DAY, NOW + 10 * DAY])
    np.testing.assert_allclose(recency(ts, NOW, 30.0), [1.0, 0.5, 0.25, 1.0], rtol=1e-6)


def test_recency_rejects_a_non_positive_half_life() -> None:
    with pytest.raises(InvalidArgument) as err:
        recency(np.array([NOW]), NOW, 0.0)
    assert err.value.field == "half_life_days"


# --- reputation ---------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.just(0.0), st.floats(0.0, 1.0, width=32)),
                               st.integers(0, 10_000), st.integers(0, 10_000)), max_size=40),
       default=st.floats(0.0, 1.0), strength=st.floats(0.01, 100.0))
def test_reputation_matches_naive_loop(rows: list[tuple[float, int, int]], default: float,
                                       strength: float) -> None:
    prior = np.array([r[0] for r in rows], dtype=np.float32)
    helpful = np.array([r[1] for r in rows], dtype=np.int32)
    unhelpful = np.array([r[2] for r in rows], dtype=np.int32)
    got = reputation(prior, helpful, unhelpful, default, strength)
    _assert_unit_float32(got)
    expected = naive.reputation([float(p) for p in prior], [r[1] for r in rows],
                                [r[2] for r in rows], default, strength)
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)


def test_helpful_votes_raise_reputation_monotonically() -> None:
    helpful = np.arange(0, 50, dtype=np.int32)
    got = reputation(np.full(50, 0.3, np.float32), helpful, np.full(50, 5, np.int32), 0.5, 4.0)
    assert (np.diff(got) > 0).all()
    unhelpful = np.arange(0, 50, dtype=np.int32)
    got = reputation(np.full(50, 0.3, np.float32), np.full(50, 5, np.int32), unhelpful, 0.5, 4.0)
    assert (np.diff(got) < 0).all()


def test_reputation_without_votes_is_the_prior_or_the_default_when_unknown() -> None:
    got = reputation(np.array([0.8, 0.0], np.float32), np.zeros(2, np.int32),
                     np.zeros(2, np.int32), 0.4, 4.0)
    np.testing.assert_allclose(got, [0.8, 0.4], rtol=1e-6)


# --- richness -----------------------------------------------------------------------------

def test_richness_is_a_clipped_float32_copy() -> None:
    r = np.array([-0.5, 0.25, 1.5], dtype=np.float32)
    got = richness(r)
    np.testing.assert_array_equal(got, [0.0, 0.25, 1.0])
    assert got.dtype == np.float32 and got is not r
    assert r[0] == -0.5
