from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ranking.inputs import Candidates
from ranking.inputs import RankingConfig
from ranking.rank import relevancy
from ranking.query_features import QueryFeatures
from ranking.rank import Ranked, effective_weights, rank, top_k
from shared.errors import InvalidArgument
from tests.unit.ranking import naive
from tests.unit.ranking.strategies import DAY, NOW, candidates, complete_candidates, configs, random_candidates

TOL = naive.TOL


def assert_matches_naive(c: Candidates, cfg: RankingConfig, k: int, got: Ranked) -> None:
    """`got` is a correct top-k under the naive scores (up to float32 near-ties) and carries
    the naive factors, contributions and weights; exact ties go to the lower row."""
    expected = naive.rank(c, cfg, k)
    overall = np.array(expected["overall"])
    n = len(c)
    rows = got.rows

    assert rows.dtype == np.intp and rows.shape == (min(k, n),)
    assert len(set(rows.tolist())) == rows.shape[0]
    for name in ("overall", "factors", "contributions", "weights", "dense_norm", "bm25_norm"):
        value = getattr(got, name)
        assert value.dtype == np.float32, name
        assert not np.isnan(value).any(), name
    assert ((got.overall >= 0) & (got.overall <= 1)).all()
    assert ((got.factors >= 0) & (got.factors <= 1)).all()

    np.testing.assert_allclose(got.weights, expected["weights"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(got.overall, overall[rows], atol=TOL, rtol=0)
    np.testing.assert_allclose(got.factors, np.array(expected["factors"]).reshape(n, 4)[rows],
                               atol=TOL, rtol=0)
    np.testing.assert_allclose(got.contributions, got.factors * got.weights, rtol=1e-6)
    np.testing.assert_allclose(got.contributions.sum(axis=1), got.overall, atol=TOL, rtol=0)
    np.testing.assert_allclose(got.dense_norm, np.array(expected["dense_norm"])[rows],
                               atol=TOL, rtol=0)
    np.testing.assert_allclose(got.bm25_norm, np.array(expected["bm25_norm"])[rows],
                               atol=TOL, rtol=0)
    assert got.confidence == pytest.approx(expected["confidence"], abs=TOL)
    assert got.dense_weight == pytest.approx(expected["alpha"], abs=1e-9)
    assert got.probability.dtype == np.float32 and got.probability.shape == rows.shape
    np.testing.assert_allclose(got.probability, np.array(expected["probability"])[rows], atol=TOL, rtol=0)

    # best first (exactly, on the returned float32 scores), ties to the lower row
    for a in range(rows.shape[0] - 1):
        assert got.overall[a] >= got.overall[a + 1]
        if got.overall[a] == got.overall[a + 1]:
            assert rows[a] < rows[a + 1]
    # nothing left out scores better than something kept (beyond float32 rounding)
    left_out = np.setdiff1d(np.arange(n), rows)
    if rows.shape[0] and left_out.shape[0]:
        assert overall[left_out].max() <= overall[rows].min() + TOL
    # where the naive scores have no near-ties, the order is exactly the naive order
    naive_top = expected["top"]
    gaps = np.diff(np.sort(overall))
    if n < 2 or gaps.min() > 2 * TOL:
        assert rows.tolist() == naive_top


# 100 examples (Hypothesis's default) a run for the two naive-loop properties: ~3/4 of their time is
# drawing the candidates, and every CI run draws new ones; the seeded test below adds 2000-row inputs.
@settings(max_examples=100, deadline=None)
@given(c=candidates(), cfg=configs(), k=st.integers(1, 40))
def test_rank_matches_naive_loop(c: Candidates, cfg: RankingConfig, k: int) -> None:
    assert_matches_naive(c, cfg, k, rank(c, cfg, k))


@settings(max_examples=100, deadline=None)
@given(c=complete_candidates(), cfg=configs(), k=st.integers(1, 40))
def test_completed_fusion_matches_naive_loop(c: Candidates, cfg: RankingConfig, k: int) -> None:
    """Score completion leaves no absent signal: every candidate is fused on both legs."""
    got = rank(c, cfg, k)
    assert_matches_naive(c, cfg, k, got)
    if cfg.fusion != "rrf":            # both legs present: each candidate's fused value uses both
        expected = naive.relevancy(naive.rows_of(c), cfg)
        alpha = expected["alpha"]
        _, trace = relevancy(c, cfg)   # the vectorised core's own trace, not the naive one
        np.testing.assert_allclose(trace.dense_weight, alpha, atol=1e-6)
        np.testing.assert_allclose(
            trace.fused, alpha * trace.dense_norm + (1 - alpha) * trace.bm25_norm, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_rank_matches_naive_loop_on_large_seeded_inputs(seed: int) -> None:
    c = random_candidates(seed, 2000, ties=seed % 2 == 1)
    cfg = RankingConfig(fusion=("convex", "adaptive", "rrf")[seed % 3],
                        query=QueryFeatures(words=seed + 1, identifiers=seed % 2, rarity=0.2 * seed),
                        apply_recency=seed % 2 == 0, now_unix=NOW,
                        weights=(0.6, 0.2, 0.1, 0.1) if seed > 2 else (0.75, 0.1, 0.05, 0.1))
    for k in (1, 10, 100, 2000, 5000):
        assert_matches_naive(c, cfg, k, rank(c, cfg, k))


def test_rank_returns_all_candidates_sorted_when_k_exceeds_n() -> None:
    c = random_candidates(11, 7)
    got = rank(c, RankingConfig(), 50)
    assert got.rows.shape == (7,)
    assert sorted(got.rows.tolist()) == list(range(7))
    assert (np.diff(got.overall) <= 0).all()


def test_rank_of_no_candidates_is_empty() -> None:
    got = rank(Candidates.build(dense=[]), RankingConfig(), 10)
    assert got.rows.shape == (0,) and got.rows.dtype == np.intp
    assert got.factors.shape == (0, 4) and got.contributions.shape == (0, 4)
    assert got.overall.shape == got.dense_norm.shape == got.bm25_norm.shape == (0,)
    assert got.confidence == 0.0
    np.testing.assert_allclose(got.weights.sum(), 1.0, rtol=1e-6)


@pytest.mark.parametrize("k", [0, -1, 2.5, "3", True, None])
def test_rank_rejects_a_k_that_is_not_a_positive_integer(k: object) -> None:
    for c in (Candidates.build(dense=[0.5]), Candidates.build(dense=[])):
        with pytest.raises(InvalidArgument) as err:
            rank(c, RankingConfig(), k)  # type: ignore[arg-type]
        assert err.value.field == "k"


def test_rank_accepts_numpy_integer_k() -> None:
    got = rank(random_candidates(3, 20), RankingConfig(), np.int64(5))  # type: ignore[arg-type]
    assert got.rows.shape == (5,)


def test_rank_order_is_stable_on_ties_lower_row_first() -> None:
    # five identical candidates, then two better ones that tie with each other
    c = Candidates.build(dense=[0.5] * 5 + [0.9, 0.9], bm25=[3.0] * 5 + [8.0, 8.0])
    got = rank(c, RankingConfig(), 4)
    assert got.rows.tolist() == [5, 6, 0, 1]
    got = rank(c, RankingConfig(), 100)
    assert got.rows.tolist() == [5, 6, 0, 1, 2, 3, 4]


@settings(max_examples=300, deadline=None)
@given(scores=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), max_size=60),
       k=st.integers(1, 70))
def test_top_k_keeps_the_lowest_rows_among_ties_at_the_cut(scores: list[float], k: int) -> None:
    got = top_k(np.array(scores, dtype=np.float32), k)
    expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    assert got.tolist() == expected


def test_with_relevancy_weight_only_the_order_is_the_fused_relevancy_order() -> None:
    for seed in range(4):
        c = random_candidates(seed, 1000)
        c = Candidates.build(dense=c.dense, bm25=c.bm25, timestamp=c.timestamp,
                             richness=c.richness, reputation_prior=c.reputation_prior,
                             helpful=c.helpful, unhelpful=c.unhelpful)  # no rerank
        for fusion in ("convex", "rrf"):
            cfg = RankingConfig(weights=(1.0, 0.0, 0.0, 0.0), fusion=fusion,
                                apply_recency=True, now_unix=NOW)
            _, trace = relevancy(c, cfg)
            got = rank(c, cfg, 1000)
            assert got.rows.tolist() == np.argsort(-trace.fused, kind="stable").tolist()
            np.testing.assert_array_equal(got.contributions[:, 1:], 0.0)


def test_recency_not_applied_gets_zero_weight_and_a_neutral_factor() -> None:
    c = random_candidates(5, 300)
    cfg = RankingConfig(apply_recency=False, now_unix=NOW)
    got = rank(c, cfg, 20)
    assert got.weights[1] == 0.0
    np.testing.assert_allclose(got.weights.sum(), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(got.factors[:, 1], 0.5)
    np.testing.assert_array_equal(got.contributions[:, 1], 0.0)
    # timestamps then cannot matter
    moved = Candidates.build(dense=c.dense, bm25=c.bm25, timestamp=np.zeros(len(c)),
                             richness=c.richness, reputation_prior=c.reputation_prior,
                             helpful=c.helpful, unhelpful=c.unhelpful, rerank=c.rerank)
    assert rank(moved, cfg, 20).rows.tolist() == got.rows.tolist()


def test_applied_recency_prefers_the_newer_of_two_equal_matches() -> None:
    c = Candidates.build(dense=[0.6, 0.6], timestamp=[NOW - 400 * DAY, NOW - 2 * DAY])
    assert rank(c, RankingConfig(apply_recency=True, now_unix=NOW), 2).rows.tolist() == [1, 0]
    assert rank(c, RankingConfig(apply_recency=False, now_unix=NOW), 2).rows.tolist() == [0, 1]


def test_recency_is_measured_from_the_time_the_caller_passes() -> None:
    c = Candidates.build(dense=[0.6], timestamp=[NOW - 1 * DAY])
    got = rank(c, RankingConfig(apply_recency=True, half_life_days=1.0, now_unix=NOW), 1)
    assert got.factors[0, 1] == pytest.approx(0.5, abs=1e-6)
    later = rank(c, RankingConfig(apply_recency=True, half_life_days=1.0, now_unix=NOW + DAY), 1)
    assert later.factors[0, 1] == pytest.approx(0.25, abs=1e-6)


def test_applied_recency_without_a_reference_time_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="now_unix"):
        RankingConfig(apply_recency=True)


def test_zero_weight_factors_are_still_reported_for_the_returned_rows() -> None:
    c = random_candidates(9, 400)
    full = rank(c, RankingConfig(weights=(0.7, 0.1, 0.1, 0.1), apply_recency=True,
                                 now_unix=NOW), 400)
    only = rank(c, RankingConfig(weights=(1.0, 0.0, 0.0, 0.0), apply_recency=True,
                                 now_unix=NOW), 30)
    by_row = {int(r): f for r, f in zip(full.rows, full.factors)}
    for r, f in zip(only.rows, only.factors):
        np.testing.assert_array_equal(f, by_row[int(r)])


def test_relevance_dominates_with_default_weights() -> None:
    # a clear match with poor side factors beats a poor match with perfect side factors
    c = Candidates.build(dense=[0.75, 0.30], bm25=[15.0, 1.0],
                         timestamp=[NOW - 3000 * DAY, NOW], richness=[0.0, 1.0],
                         reputation_prior=[0.01, 1.0], helpful=[0, 100], unhelpful=[50, 0])
    for apply in (False, True):
        got = rank(c, RankingConfig(apply_recency=apply, now_unix=NOW), 2)
        assert got.rows.tolist() == [0, 1]


def test_effective_weights_renormalise_without_recency() -> None:
    w = effective_weights(RankingConfig(weights=(0.75, 0.1, 0.05, 0.1)))
    np.testing.assert_allclose(w, [0.75 / 0.9, 0.0, 0.05 / 0.9, 0.1 / 0.9], rtol=1e-6)
    w = effective_weights(RankingConfig(weights=(3, 1, 0, 0), apply_recency=True, now_unix=NOW))
    np.testing.assert_allclose(w, [0.75, 0.25, 0.0, 0.0], rtol=1e-6)
