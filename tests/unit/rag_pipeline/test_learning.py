"""Training a tenant's ranking: it reproduces with a seed, its folds keep related queries
together, and the save rule refuses a gain that is not significant."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.metrics import ndcg_at_k
from ranking.features import FEATURE_NAMES
from services.rag_pipeline.learning.crossval import folds, query_groups
from services.rag_pipeline.learning.report import ndcg_at_10, paired, sign_test
from services.rag_pipeline.learning.train import TrainRows, fit

pytest.importorskip("lightgbm")


def _rows(seed: int, queries: int = 40, per: int = 30) -> TrainRows:
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(queries):
        x = rng.normal(size=(per, len(FEATURE_NAMES))).astype(np.float32)
        x[rng.random(x.shape) < 0.1] = np.nan
        fused = rng.random(per).astype(np.float32)
        labels = ((np.nan_to_num(x[:, 0]) + fused + rng.normal(scale=0.5, size=per)) > 1.5).astype(np.int32)
        parts.append((x, fused, labels))
    return TrainRows.concat(parts)


@pytest.mark.parametrize("kind", ["trees", "linear"])
def test_training_reproduces_byte_for_byte_with_the_seed(kind: str) -> None:
    train, valid = _rows(1), _rows(2, queries=15)
    first, model, rounds = fit(kind, train, 30, valid=valid)
    second, _, _ = fit(kind, train, 30, valid=valid)
    assert first == second
    assert model.kind == kind and model.calibration[0] > 0
    if kind == "trees":
        assert rounds >= 1 and model.forest is not None
    # the learned residual carries the signal it was trained on: feature 0 raises the score
    x = np.zeros((2, len(FEATURE_NAMES)), dtype=np.float32)
    x[1, 0] = 2.0
    s = model.score(x, np.zeros(2))
    assert s[1] > s[0]


def test_the_save_rule_refuses_a_gain_whose_interval_reaches_zero() -> None:
    rng = np.random.default_rng(0)
    current = rng.random(150)
    noisy = current + rng.normal(scale=0.05, size=150)          # no real gain
    report = paired(current.tolist(), noisy.tolist())
    assert report.low < 0 < report.high and not report.significant
    better = paired(current.tolist(), (current + 0.03 + rng.normal(scale=0.01, size=150)).tolist())
    assert better.significant and better.wins > better.losses and better.p_sign < 0.001
    assert not paired([0.5] * 10, [0.5] * 10).significant


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 5) == 1.0
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)


def test_ndcg_at_10_equals_the_benchmarks_metric() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        docs = [f"d{i}" for i in rng.permutation(30)[:15]]
        qrels = {f"d{i}": int(rng.integers(1, 3)) for i in rng.permutation(30)[:3]}
        assert ndcg_at_10(docs, qrels) == pytest.approx(ndcg_at_k(docs, qrels, 10))


def test_queries_sharing_a_judged_document_or_near_duplicates_stay_in_one_fold() -> None:
    qids = ["1", "2", "3", "4", "5", "6"]
    qrels = {"1": {"a": 1}, "2": {"a": 1}, "3": {"b": 1}, "4": {"c": 1}, "5": {"d": 1}, "6": {"e": 0}}
    texts = {"1": "x", "2": "y", "3": "vitamin d lowers blood pressure", "4": "vitamin D lowers the blood pressure",
             "5": "aspirin and stroke", "6": "gut microbiome"}
    groups = query_groups(qids, qrels, texts)
    assert groups["1"] == groups["2"] and groups["3"] == groups["4"]
    assert len({groups[q] for q in qids}) == 4                   # "6" judged e as not relevant: alone
    parts = folds(qids, groups, 2)
    assert sorted(q for f in parts for q in f) == sorted(qids)
    for a, b in (("1", "2"), ("3", "4")):
        assert any(a in f and b in f for f in parts)
    assert parts == folds(qids, groups, 2)                       # deterministic
