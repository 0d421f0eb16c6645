"""A learned ranking model, read safely and evaluated in numpy (no LightGBM, no OpenMP to serve).

The stored form is JSON, never pickle: an envelope written by the trainer
(services/rag_pipeline/learning/train.py) around LightGBM's own `Booster.dump_model()`:

    {"format": "nucleus-ranker", "kind": "trees" | "linear", "feature_version": 1,
     "feature_names": [...], "init_scale": s, "calibration": [a, b], "top_n": N,
     "lightgbm": {...dump_model()...}                       (kind "trees")
     "center": [...], "scale": [...], "weights": [...]}     (kind "linear")

    score        = init_scale · fused + model(features)   (the model is a residual on fusion)
    relevancy    = min-max of score over the re-ranked candidates × today's confidence scaling
                   (`learned_relevancy`: the within-query spread and cross-query calibration
                   of the untrained ranking, so the 4R blend weighs it as it weighs fusion)
    probability  = 1 / (1 + exp(−(a · score + b)))        (P(relevant), a > 0, reported)

Bounds are checked before anything is parsed: the byte size (MAX_MODEL_BYTES), the first byte
(a pickle, or anything but a JSON object, is refused), the bracket nesting (MAX_NESTING); then,
before any array is built, the number of trees (MAX_TREES), leaves per tree (MAX_LEAVES) and
depth (MAX_DEPTH), and every split's feature index and decision type. Categorical splits and
linear trees are refused. A violation raises InvalidArgument("model", why).

Tree evaluation follows LightGBM's numerical decision exactly (tree.h, NumericalDecision):
a NaN value is taken as 0.0 unless the split's missing type is NaN; then, if the missing type
is Zero and |x| ≤ 1e-35, or NaN and x is NaN, the split's default direction is taken; else
x ≤ threshold goes left. All rows and all trees advance together, one level per step.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shared.errors import InvalidArgument

MODEL_FORMAT = "nucleus-ranker"
MAX_MODEL_BYTES = 2 * 1024 * 1024
MAX_NESTING = 64
MAX_TREES = 1000
MAX_LEAVES = 64
MAX_DEPTH = 16
_ZERO = 1e-35
_MISSING = {"None": 0, "Zero": 1, "NaN": 2}


def _refuse(why: str) -> InvalidArgument:
    return InvalidArgument("model", why)


def check_bytes(raw: bytes) -> None:
    """The checks made before parsing: size, JSON object (no pickle), nesting depth."""
    if not isinstance(raw, (bytes, bytearray)):
        raise _refuse(f"expected bytes, got {type(raw).__name__}")
    if len(raw) > MAX_MODEL_BYTES:
        raise _refuse(f"{len(raw)} bytes is more than the {MAX_MODEL_BYTES} accepted")
    head = bytes(raw[:1])
    if head == b"\x80":
        raise _refuse("a pickle is never accepted; expected the JSON model the ranking trainer writes")
    if head != b"{":
        raise _refuse("expected a JSON object (the model the ranking trainer writes)")
    b = np.frombuffer(bytes(raw), dtype=np.uint8)
    depth = np.cumsum((b == ord("{")).astype(np.int32) + (b == ord("[")) - (b == ord("}")) - (b == ord("]")))
    if depth.size and int(depth.max()) > MAX_NESTING:
        raise _refuse(f"nested deeper than {MAX_NESTING} levels")


@dataclass(frozen=True, slots=True)
class Forest:
    """All trees flattened: node arrays, children < 0 are leaves (~child = leaf index)."""

    feature: NDArray[np.intp]
    threshold: NDArray[np.float64]
    default_left: NDArray[np.bool_]
    missing: NDArray[np.int8]
    left: NDArray[np.intp]
    right: NDArray[np.intp]
    leaf_value: NDArray[np.float64]
    roots: NDArray[np.intp]          # per tree: node index, or ~leaf for a single-leaf tree
    depth: int
    # the walk's table: splits are nodes 0..S-1, leaves S..; next_node[node, went_left], a leaf
    # pointing at itself, so every row of every tree takes `depth` steps without a mask
    next_node: NDArray[np.intp]
    node_value: NDArray[np.float64]
    start: NDArray[np.intp]

    def predict(self, x: NDArray[np.floating]) -> NDArray[np.float64]:
        """Sum of the trees' leaf values for each row of x (n, features)."""
        x = np.asarray(x, dtype=np.float64)
        n, trees = x.shape[0], self.roots.shape[0]
        if trees == 0 or n == 0:
            return np.zeros(n)
        # every split's decision for every row at once: (n, splits)
        value = x[:, self.feature]
        isnan = np.isnan(value)
        value[isnan & (self.missing != 2)] = 0.0
        use_default = ((self.missing == 1) & (np.abs(value) <= _ZERO)) | ((self.missing == 2) & isnan)
        with np.errstate(invalid="ignore"):
            go_left = np.where(use_default, self.default_left, value <= self.threshold)
        # then walk all trees one level per step: the next node is a lookup
        splits = self.feature.shape[0]
        went = np.zeros((n, splits + self.leaf_value.shape[0]), dtype=np.intp)
        went[:, :splits] = go_left
        went = went.ravel()
        offset = (np.arange(n, dtype=np.intp) * (splits + self.leaf_value.shape[0]))[:, None]
        node = np.broadcast_to(self.start, (n, trees))
        for _ in range(self.depth):
            node = self.next_node.take(2 * node + went.take(offset + node))
        return self.node_value.take(node).sum(axis=1)


def forest_from_dump(dump: dict, n_features: int) -> Forest:
    """Flatten LightGBM's dump_model() dict, checking its bounds first."""
    if not isinstance(dump, dict) or not isinstance(dump.get("tree_info"), list):
        raise _refuse("lightgbm: expected dump_model() output with a tree_info list")
    infos = dump["tree_info"]
    if len(infos) > MAX_TREES:
        raise _refuse(f"{len(infos)} trees; at most {MAX_TREES} accepted")
    if int(dump.get("num_class", 1)) != 1 or int(dump.get("num_tree_per_iteration", 1)) != 1:
        raise _refuse("only single-output models are accepted")
    for info in infos:
        if not isinstance(info, dict) or not isinstance(info.get("tree_structure"), dict):
            raise _refuse("lightgbm: a tree without tree_structure")
        if int(info.get("num_leaves", 0)) > MAX_LEAVES:
            raise _refuse(f"a tree has {info.get('num_leaves')} leaves; at most {MAX_LEAVES} accepted")
        if info.get("num_cat", 0):
            raise _refuse("categorical splits are not accepted")
    feature, threshold, default_left, missing, left, right, leaves, roots = [], [], [], [], [], [], [], []
    max_depth = 0
    for info in infos:
        stack = [(info["tree_structure"], 0, None, False)]   # (node, depth, parent index, is left)
        root = None
        leaf_count = 0
        while stack:
            node, depth, parent, is_left = stack.pop()
            if depth > MAX_DEPTH:
                raise _refuse(f"a tree is deeper than {MAX_DEPTH}")
            max_depth = max(max_depth, depth)
            if not isinstance(node, dict):
                raise _refuse("lightgbm: a tree node is not an object")
            if "leaf_value" in node:
                leaf_count += 1
                if leaf_count > MAX_LEAVES:
                    raise _refuse(f"a tree has more than {MAX_LEAVES} leaves")
                if "leaf_coeff" in node or "leaf_features" in node:
                    raise _refuse("linear trees are not accepted")
                ref = ~len(leaves)
                leaves.append(_number(node["leaf_value"]))
            else:
                f = node.get("split_feature")
                if not isinstance(f, int) or not 0 <= f < n_features:
                    raise _refuse(f"split_feature {f!r} is not a feature index below {n_features}")
                if node.get("decision_type") != "<=":
                    raise _refuse(f"decision_type {node.get('decision_type')!r}: only numerical '<=' splits")
                if node.get("missing_type") not in _MISSING:
                    raise _refuse(f"missing_type {node.get('missing_type')!r} is not None, Zero or NaN")
                ref = len(feature)
                feature.append(f)
                threshold.append(_number(node.get("threshold")))
                default_left.append(bool(node.get("default_left")))
                missing.append(_MISSING[node["missing_type"]])
                left.append(0)
                right.append(0)
                for key, child_is_left in (("right_child", False), ("left_child", True)):
                    stack.append((node.get(key), depth + 1, ref, child_is_left))
            if parent is None:
                root = ref
            elif is_left:
                left[parent] = ref
            else:
                right[parent] = ref
        roots.append(root)
    splits = len(feature)

    def node_of(ref: int) -> int:
        return ref if ref >= 0 else splits + ~ref

    next_node = np.empty((splits + len(leaves), 2), dtype=np.intp)
    for i in range(splits):
        next_node[i] = (node_of(right[i]), node_of(left[i]))
    next_node[splits:] = np.arange(splits, splits + len(leaves))[:, None]
    node_value = np.concatenate([np.zeros(splits), np.asarray(leaves, dtype=np.float64)])
    return Forest(feature=np.asarray(feature, dtype=np.intp), threshold=np.asarray(threshold, dtype=np.float64),
                  default_left=np.asarray(default_left, dtype=bool), missing=np.asarray(missing, dtype=np.int8),
                  left=np.asarray(left, dtype=np.intp), right=np.asarray(right, dtype=np.intp),
                  leaf_value=np.asarray(leaves, dtype=np.float64), roots=np.asarray(roots, dtype=np.intp),
                  depth=max_depth, next_node=next_node.ravel(), node_value=node_value,
                  start=np.asarray([node_of(r) for r in roots], dtype=np.intp))


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse(f"expected a number, got {value!r}")
    if value != value:
        raise _refuse("NaN in the model")
    return float(value)


@dataclass(frozen=True, slots=True)
class RankerModel:
    """A parsed model: `score(features, fused)` and `relevancy(score)`."""

    kind: str
    feature_version: int
    init_scale: float
    calibration: tuple[float, float]
    top_n: int
    forest: Forest | None = None
    center: NDArray[np.float64] | None = None
    scale: NDArray[np.float64] | None = None
    weights: NDArray[np.float64] | None = None

    def residual(self, x: NDArray[np.floating]) -> NDArray[np.float64]:
        if self.forest is not None:
            return self.forest.predict(x)
        z = (np.asarray(x, dtype=np.float64) - self.center) / self.scale
        return np.nan_to_num(z) @ self.weights          # a missing feature sits at the centre

    def score(self, x: NDArray[np.floating], fused: NDArray[np.floating]) -> NDArray[np.float64]:
        return self.init_scale * np.asarray(fused, dtype=np.float64) + self.residual(x)

    def probability(self, score: NDArray[np.floating]) -> NDArray[np.float32]:
        """P(relevant) = sigmoid(a · score + b), the calibration fitted on the training rows."""
        a, b = self.calibration
        return (1.0 / (1.0 + np.exp(-(a * np.asarray(score, dtype=np.float64) + b)))).astype(np.float32)


def learned_relevancy(score: NDArray[np.floating], confidence: float, floor: float) -> NDArray[np.float32]:
    """Relevancy in [0, 1] from the scores of one query's re-ranked candidates: min-max over them
    (all alike → 1), times today's confidence scaling floor + (1 − floor) · confidence, so the
    spread within a query and the scale across queries stay those of the untrained ranking."""
    s = np.asarray(score, dtype=np.float64)
    if s.size == 0:
        return np.zeros(0, dtype=np.float32)
    lo, hi = float(s.min()), float(s.max())
    norm = (s - lo) / (hi - lo) if hi - lo > 1e-12 else np.ones_like(s)
    return np.clip(norm * (floor + (1.0 - floor) * confidence), 0.0, 1.0).astype(np.float32)


def load_model(raw: bytes, feature_names: tuple[str, ...], feature_version: int) -> RankerModel:
    """Check and parse a stored model (module docstring); InvalidArgument("model", why) if refused."""
    check_bytes(raw)
    try:
        doc = json.loads(bytes(raw).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise _refuse(f"not valid JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
        raise _refuse(f"expected format {MODEL_FORMAT!r}")
    if doc.get("feature_version") != feature_version:
        raise _refuse(f"feature_version {doc.get('feature_version')!r}; this ranking computes {feature_version}")
    if list(doc.get("feature_names", ())) != list(feature_names):
        raise _refuse("feature_names differ from this ranking's feature definition")
    calibration = doc.get("calibration")
    if not isinstance(calibration, list) or len(calibration) != 2:
        raise _refuse("calibration must be [a, b]")
    a, b = _number(calibration[0]), _number(calibration[1])
    if a <= 0:
        raise _refuse("calibration slope must be > 0 (the calibration keeps the order)")
    top_n = doc.get("top_n")
    if not isinstance(top_n, int) or not 1 <= top_n <= 100:
        raise _refuse(f"top_n must be an integer in [1, 100], got {top_n!r}")
    common = dict(feature_version=feature_version, init_scale=_number(doc.get("init_scale")),
                  calibration=(a, b), top_n=top_n)
    m = len(feature_names)
    if doc.get("kind") == "trees":
        return RankerModel(kind="trees", forest=forest_from_dump(doc.get("lightgbm"), m), **common)
    if doc.get("kind") == "linear":
        arrays = []
        for key in ("center", "scale", "weights"):
            values = doc.get(key)
            if not isinstance(values, list) or len(values) != m:
                raise _refuse(f"{key} must list {m} numbers")
            arrays.append(np.asarray([_number(v) for v in values], dtype=np.float64))
        if np.any(arrays[1] <= 0):
            raise _refuse("scale must be > 0")
        return RankerModel(kind="linear", center=arrays[0], scale=arrays[1], weights=arrays[2], **common)
    raise _refuse(f"kind {doc.get('kind')!r} is not 'trees' or 'linear'")
