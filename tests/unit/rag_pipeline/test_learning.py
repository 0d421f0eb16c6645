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


def test_tune_offers_rm3_settings_chooses_one_that_wins_and_saves_it_in_the_profile() -> None:
    """`nucleus tune` compares "off, rm3" and "trees N30, rm3" (the RM3 capture pass is the
    `feedback` source of the learner); a chosen RM3 setting saves feedback_expansion "rm3"."""
    from cli.tune import _settings, next_profile
    from ranking import Candidates, RankingConfig
    from ranking.profile import RankingProfile
    from services.rag_pipeline.learning.crossval import Learner, Prepared, Setting

    names = [s.name for s in _settings()]
    assert names[0] == "off" and "off, rm3" in names and "trees N30, rm3" in names
    assert "linear N100, rm3" not in names and "trees N100, rm3" not in names
    qids = [f"q{i}" for i in range(12)]
    qrels = {q: {f"{q}-rel": 1} for q in qids}

    def captured(qid: str, feedback: bool) -> Prepared:       # RM3 brings the judged document up
        ids = [f"{qid}-other{j}" for j in range(5)] + [f"{qid}-rel"]
        bm25 = np.asarray([5, 4, 3, 2, 1, 6 if feedback else 0.5], np.float32)
        dense = np.asarray([0.5, 0.4, 0.3, 0.2, 0.1, 0.6 if feedback else 0.05], np.float32)
        return Prepared(ids, Candidates.build(dense=dense, bm25=bm25), RankingConfig(),
                        lambda rows, fused: np.zeros((len(rows), len(FEATURE_NAMES)), np.float32))

    chosen = Learner(captured, qrels, [s for s in _settings() if s.kind == "off"]).choose(qids)
    assert chosen.setting.name == "off, rm3"
    current = RankingProfile(tenant_id="t", name="default", version=3, dense_weight=0.6)
    saved = next_profile(current, chosen.setting)
    assert (saved.feedback_expansion, saved.version, saved.dense_weight) == ("rm3", 0, 0.6)
    assert next_profile(current, Setting(dense_weight=0.5)).feedback_expansion == ""
    with_rm3 = next_profile(RankingProfile(tenant_id="t", name="d", feedback_expansion="rm3"), Setting("trees", 30))
    assert with_rm3.feedback_expansion == "rm3"        # the current ranking was captured with it
