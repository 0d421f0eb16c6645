"""The numpy evaluation of a stored model equals LightGBM's own prediction, and a stored model
is checked before it is parsed (size, pickle, nesting, trees, leaves, depth, features)."""
from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest

from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.trees import MAX_MODEL_BYTES, MAX_TREES, RankerModel, forest_from_dump, learned_relevancy, load_model
from shared.errors import InvalidArgument

lgb = pytest.importorskip("lightgbm")


def _data(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    x = rng.normal(size=(n, m))
    x[rng.random(x.shape) < 0.2] = np.nan
    x[rng.random(x.shape) < 0.1] = 0.0
    return x


def _booster(zero_as_missing: bool, objective: str, leaves: int = 7):
    rng = np.random.default_rng(3)
    x = _data(rng, 1000, 6)
    y = np.nan_to_num(x[:, 0]) + np.isnan(x[:, 1]) - (x[:, 2] == 0) + rng.normal(scale=0.2, size=1000)
    params = dict(objective=objective, num_leaves=leaves, min_data_in_leaf=20 if leaves < 20 else 5, verbose=-1,
                  deterministic=True, num_threads=1, seed=1, zero_as_missing=zero_as_missing)
    if objective == "lambdarank":
        y = np.clip(np.round(y), 0, 3).astype(int)
        data = lgb.Dataset(x, y, group=[50] * 20)
    else:
        data = lgb.Dataset(x, y)
    booster = lgb.train(params, data, num_boost_round=25)
    return booster, forest_from_dump(json.loads(json.dumps(booster.dump_model())), 6), _data(rng, 1000, 6)


@pytest.mark.parametrize("zero_as_missing,objective,leaves", [
    (False, "regression", 7), (True, "regression", 7), (False, "lambdarank", 7),
    (True, "regression", 12), (False, "regression", 40)])   # leaf masks of 8, 16 and 64 bits
def test_numpy_trees_equal_lightgbm_predict_on_random_inputs_with_missing_values(zero_as_missing, objective, leaves):
    booster, forest, test = _booster(zero_as_missing, objective, leaves)
    np.testing.assert_allclose(forest.predict(test), booster.predict(test, raw_score=True), rtol=0, atol=1e-9)


def _naive_saabas(dump: dict, row: np.ndarray, n_features: int) -> tuple[float, np.ndarray]:
    """(Σ tree means, contributions) by walking each tree of the dump for one row, in Python."""
    def count(node):
        return node["leaf_count"] if "leaf_value" in node else count(node["left_child"]) + count(node["right_child"])

    def mean(node):
        if "leaf_value" in node:
            return node["leaf_value"]
        lo, hi = node["left_child"], node["right_child"]
        return (count(lo) * mean(lo) + count(hi) * mean(hi)) / (count(lo) + count(hi))

    def goes_left(node, v):
        kind = node["missing_type"]
        if math.isnan(v) and kind != "NaN":
            v = 0.0
        if (kind == "Zero" and abs(v) <= 1e-35) or (kind == "NaN" and math.isnan(v)):
            return node["default_left"]
        return v <= node["threshold"]

    base, out = 0.0, np.zeros(n_features)
    for info in dump["tree_info"]:
        node = info["tree_structure"]
        base += mean(node)
        while "leaf_value" not in node:
            child = node["left_child"] if goes_left(node, float(row[node["split_feature"]])) else node["right_child"]
            out[node["split_feature"]] += mean(child) - mean(node)
            node = child
    return base, out


@pytest.mark.parametrize("zero_as_missing,objective", [(True, "regression"), (False, "lambdarank")])
def test_tree_contributions_are_saabas_along_each_path_and_sum_with_lightgbms_bias_to_its_prediction(
        zero_as_missing, objective):
    booster, forest, test = _booster(zero_as_missing, objective)
    dump = booster.dump_model()
    contributions = forest.contributions(test[:40])
    for row, got in zip(test[:40], contributions):
        base, want = _naive_saabas(dump, row, 6)
        assert forest.expected == pytest.approx(base, abs=1e-12)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert forest.expected == pytest.approx(booster.predict(test[:1], pred_contrib=True)[0, -1], abs=1e-12)
    np.testing.assert_allclose(forest.expected + contributions.sum(axis=1),
                               booster.predict(test[:40], raw_score=True), rtol=0, atol=1e-9)


def test_a_model_s_contributions_plus_its_base_are_its_score_trees_and_linear() -> None:
    trees = {"tree_info": [_tree(0), {**_tree(2, feature=3), "num_leaves": 3}, _tree(0)]}   # one-leaf trees too
    x = np.array([[0.0] * len(FEATURE_NAMES)] * 3)
    x[:, 3] = [-1.0, np.nan, 2.0]
    fused = np.array([0.2, 0.5, 0.9])
    for model in (_load(_envelope(kind="trees", lightgbm=trees)),
                  _load(_envelope(center=[0.5] * len(FEATURE_NAMES), scale=[2.0] * len(FEATURE_NAMES)))):
        base, contributions = model.contributions(x, fused)
        np.testing.assert_allclose(base + contributions.sum(axis=1), model.score(x, fused), rtol=0, atol=1e-12)
    np.testing.assert_allclose(contributions[:, 0], 0.5 * (0.0 - 0.5) / 2.0)     # weight × (x − centre) / scale
    np.testing.assert_allclose(base, 10.0 * fused)


def _envelope(**over) -> dict:
    m = len(FEATURE_NAMES)
    doc = {"format": "nucleus-ranker", "kind": "linear", "feature_version": FEATURE_VERSION,
           "feature_names": list(FEATURE_NAMES), "init_scale": 10.0, "calibration": [1.0, 0.0], "top_n": 30,
           "center": [0.0] * m, "scale": [1.0] * m, "weights": [0.5] + [0.0] * (m - 1)}
    doc.update(over)
    return doc


def _load(doc) -> object:
    return load_model(json.dumps(doc).encode(), FEATURE_NAMES, FEATURE_VERSION)


def test_a_linear_model_scores_as_a_residual_on_fusion_and_missing_sits_at_the_centre() -> None:
    model = _load(_envelope())
    x = np.zeros((2, len(FEATURE_NAMES)), dtype=np.float32)
    x[0, 0], x[1, 0] = 2.0, np.nan
    np.testing.assert_allclose(model.score(x, np.array([0.5, 0.5])), [6.0, 5.0])


def test_a_pickled_model_is_refused_before_parsing() -> None:
    with pytest.raises(InvalidArgument, match="pickle"):
        load_model(pickle.dumps(_envelope()), FEATURE_NAMES, FEATURE_VERSION)


def test_an_oversized_model_is_refused_before_parsing() -> None:
    raw = b"{" + b" " * MAX_MODEL_BYTES + b"}"
    with pytest.raises(InvalidArgument, match="bytes"):
        load_model(raw, FEATURE_NAMES, FEATURE_VERSION)


def test_deep_nesting_is_refused_before_parsing() -> None:
    with pytest.raises(InvalidArgument, match="nested"):
        load_model(b'{"a":' + b"[" * 100 + b"]" * 100 + b"}", FEATURE_NAMES, FEATURE_VERSION)


@pytest.mark.parametrize("change,why", [
    (dict(feature_version=FEATURE_VERSION + 1), "feature_version"),
    (dict(feature_names=list(reversed(FEATURE_NAMES))), "feature_names"),
    (dict(calibration=[-1.0, 0.0]), "slope"),
    (dict(top_n=1000), "top_n"),
    (dict(kind="neural"), "kind"),
    (dict(format="other"), "format"),
])
def test_a_tampered_envelope_is_refused_naming_what(change, why) -> None:
    with pytest.raises(InvalidArgument, match=why):
        _load(_envelope(**change))


def _tree(depth: int, feature: int = 0) -> dict:
    node: dict = {"leaf_value": 1.0}
    for _ in range(depth):
        node = {"split_feature": feature, "threshold": 0.0, "decision_type": "<=", "default_left": True,
                "missing_type": "None", "left_child": node, "right_child": {"leaf_value": 0.0}}
    return {"num_leaves": depth + 1, "tree_structure": node}


@pytest.mark.parametrize("dump,why", [
    ({"tree_info": [_tree(1)] * (MAX_TREES + 1)}, "trees"),
    ({"tree_info": [{"num_leaves": 500, "tree_structure": {"leaf_value": 0.0}}]}, "leaves"),
    ({"tree_info": [_tree(17)]}, "deeper"),
    ({"tree_info": [_tree(2, feature=999)]}, "split_feature"),
    ({"tree_info": [{"num_leaves": 2, "tree_structure": {**_tree(1)["tree_structure"], "decision_type": "=="}}]},
     "decision_type"),
])
def test_a_tampered_tree_dump_is_refused(dump, why) -> None:
    with pytest.raises(InvalidArgument, match=why):
        _load(_envelope(kind="trees", lightgbm=dump))


def test_learned_relevancy_keeps_the_order_within_the_confidence_scale() -> None:
    rel = learned_relevancy(np.array([3.0, -1.0, 1.0]), confidence=0.0, floor=0.5)
    np.testing.assert_allclose(rel, [0.5, 0.0, 0.25])
    assert learned_relevancy(np.array([2.0, 2.0]), 1.0, 0.5).tolist() == [1.0, 1.0]


def test_a_forest_knows_which_features_its_splits_read():
    booster, forest, _ = _booster(False, "regression")
    dump = booster.dump_model()

    def split_features(node):
        if "split_feature" not in node:
            return set()
        return {node["split_feature"]} | split_features(node["left_child"]) | split_features(node["right_child"])

    want = set().union(*(split_features(t["tree_structure"]) for t in dump["tree_info"]))
    assert forest.split_features == want and want          # the label reads features 0, 1 and 2
    unread = [f for f in range(6) if f not in want]
    assert RankerModel(kind="trees", feature_version=1, init_scale=1.0, calibration=(1.0, 0.0), top_n=10,
                       forest=forest).uses(sorted(want)[:1])
    if unread:
        assert not RankerModel(kind="trees", feature_version=1, init_scale=1.0, calibration=(1.0, 0.0), top_n=10,
                               forest=forest).uses(unread)


def test_a_linear_model_uses_the_features_it_weighs():
    model = RankerModel(kind="linear", feature_version=1, init_scale=1.0, calibration=(1.0, 0.0), top_n=10,
                        center=np.zeros(4), scale=np.ones(4), weights=np.array([0.0, 2.0, 0.0, 0.0]))
    assert model.uses([1, 3]) and not model.uses([0, 2, 3])
