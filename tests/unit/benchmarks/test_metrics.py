from __future__ import annotations

import math
import os
import random

import pytest
import pytrec_eval

from benchmarks.metrics import (
    evaluate,
    latency_summary,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    recall_at_k,
    rss_mb,
    unique_in_order,
)

QRELS = {"d1": 2, "d2": 1, "d3": 0}
RANKING = ["d3", "d1", "d4"]


def test_ndcg_matches_a_value_worked_by_hand() -> None:
    # DCG = 0/log2(2) + 2/log2(3) + 0; IDCG = 2/log2(2) + 1/log2(3)
    expected = (2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert ndcg_at_k(RANKING, QRELS, 10) == pytest.approx(expected)
    assert expected == pytest.approx(0.4796249331362629)


def test_ndcg_is_one_for_the_ideal_ranking_and_zero_without_relevant_hits() -> None:
    assert ndcg_at_k(["d1", "d2", "d3"], QRELS, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["d3", "d4"], QRELS, 10) == 0.0
    assert ndcg_at_k([], QRELS, 10) == 0.0
    assert ndcg_at_k(["d1"], {"d1": 0}, 10) == 0.0  # no relevant judgement at all


def test_ndcg_cut_ignores_documents_below_k() -> None:
    assert ndcg_at_k(["x1", "x2", "d1"], QRELS, 2) == 0.0


def test_recall_counts_relevant_documents_in_the_top_k() -> None:
    assert recall_at_k(RANKING, QRELS, 100) == 0.5
    assert recall_at_k(["d2", "d1"], QRELS, 1) == 0.5
    assert recall_at_k(["d2", "d1"], QRELS, 2) == 1.0
    assert recall_at_k(["d1"], {"d1": 0}, 10) == 0.0


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_within_k() -> None:
    assert mrr_at_k(RANKING, QRELS, 10) == 0.5
    assert mrr_at_k(["x"] * 0 + [f"x{i}" for i in range(10)] + ["d1"], QRELS, 10) == 0.0
    assert mrr_at_k([f"x{i}" for i in range(9)] + ["d2"], QRELS, 10) == pytest.approx(0.1)


def test_a_repeated_document_counts_once_at_its_best_rank() -> None:
    assert unique_in_order(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]
    # chunks of d3 twice, then d1: d1 is at document rank 2, not 3
    assert ndcg_at_k(["d3", "d3", "d1"], QRELS, 10) == pytest.approx(ndcg_at_k(["d3", "d1"], QRELS, 10))
    assert mrr_at_k(["d3", "d3", "d1"], QRELS, 10) == 0.5


def test_evaluate_averages_over_judged_queries_and_scores_missing_runs_zero() -> None:
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d9": 0}}   # q3 has no relevant document
    means, per = evaluate({"q1": ["d1"]}, qrels)
    assert set(per) == {"q1", "q2"}
    assert per["q2"] == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert means == {"ndcg@10": 0.5, "recall@100": 0.5, "mrr@10": 0.5}


def _pytrec(qrels: dict, run: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """pytrec_eval on rankings given as lists: scores strictly decreasing, so no tie-breaking."""
    scored = {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in run.items()}
    cut10 = {q: {d: s for d, s in docs.items() if s > len(run[q]) - 10} for q, docs in scored.items()}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(scored)
    top10 = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut10)
    return {q: {"ndcg@10": full[q]["ndcg_cut_10"], "recall@100": full[q]["recall_100"],
                "mrr@10": top10[q]["recip_rank"]} for q in run}


@pytest.mark.parametrize("seed", range(20))
def test_metrics_agree_with_pytrec_eval_on_random_runs(seed: int) -> None:
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(300)]
    qrels, run = {}, {}
    for q in range(15):
        judged = rng.sample(docs, rng.randint(1, 12))
        qrels[f"q{q}"] = {d: rng.choice([0, 1, 1, 2, 3]) for d in judged}
        if not any(qrels[f"q{q}"].values()):
            qrels[f"q{q}"][judged[0]] = 1
        pool = rng.sample(judged, rng.randint(0, len(judged))) + rng.sample(docs, rng.randint(1, 150))
        ranking = unique_in_order(rng.sample(pool, len(pool)))
        run[f"q{q}"] = ranking
    expected = _pytrec(qrels, run)
    for q, ranking in run.items():
        ours = {"ndcg@10": ndcg_at_k(ranking, qrels[q], 10), "recall@100": recall_at_k(ranking, qrels[q], 100),
                "mrr@10": mrr_at_k(ranking, qrels[q], 10)}
        assert ours == pytest.approx(expected[q], abs=1e-9), q


def test_latency_summary_reports_percentiles_and_handles_no_samples() -> None:
    s = latency_summary([float(v) for v in range(1, 101)])
    assert s["count"] == 100 and s["mean"] == pytest.approx(50.5)
    assert s["p50"] == pytest.approx(50.5) and s["p95"] == pytest.approx(95.05) and s["p99"] == pytest.approx(99.01)
    empty = latency_summary([])
    assert empty["count"] == 0 and math.isnan(empty["p50"])


def test_percentile_interpolates_like_latency_summary_and_is_nan_without_samples() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(latency_summary(values)["p99"]) == pytest.approx(99.01)
    assert math.isnan(percentile([], 50))


def test_rss_mb_reads_this_process_and_is_nan_for_a_missing_one() -> None:
    if not os.path.exists("/proc/self/status"):
        pytest.skip("resident memory is read from /proc")
    assert 1 < rss_mb() < 100_000
    assert math.isnan(rss_mb(2 ** 31 - 1))

