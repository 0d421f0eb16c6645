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
x ≤ threshold goes left. All rows and all trees are evaluated at once (`Forest`: QuickScorer's
leaf bitmasks, no walk).

Feature contributions (`RankerModel.contributions`, for explanations): a tree's are Saabas' —
each split on the row's path moves the prediction from the mean of the leaves below it to the
mean below the child taken (means weighted by the leaves' training rows, LightGBM's
`leaf_count`), and the move is the split feature's; the tree's base is its mean, so over all
trees base (LightGBM's `pred_contrib` bias column) + the contributions = the prediction. A
linear model's are weight × (x − centre) / scale. Both add init_scale · fused to the base.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
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
    """All trees, compiled for evaluating every tree on every row at once (QuickScorer).

    A tree's leaves are bits, numbered left to right; a split a row does not take left rules out
    its left subtree's leaves (`slot_mask` keeps the other bits); the leaf the row reaches is the
    lowest bit left. Each tree with a split has `slots` split slots (padding keeps every bit), so
    one reduction over the slots serves all trees. A slot reads column feature + F · v of
    [x with NaN → 0 | NaN → −inf | NaN → +inf]: v sends a NaN where its split sends it."""

    roots: NDArray[np.intp]              # per tree: its root split, or ~leaf for a one-leaf tree
    leaf_value: NDArray[np.float64]      # every leaf, tree by tree, left to right
    slots: int
    slot_column: NDArray[np.intp]        # (trees with a split · slots,)
    slot_threshold: NDArray[np.float64]  # (trees with a split · slots, 1)
    slot_mask: NDArray[np.unsignedinteger]   # (trees with a split · slots, 1), as wide as the widest tree
    zero_slots: NDArray[np.intp]         # the slots of missing type Zero (|x| <= 1e-35 → default)
    zero_left: NDArray[np.bool_]         # (len(zero_slots), 1) their default direction
    tree_leaf_start: NDArray[np.intp]    # (trees with a split, 1): each one's first leaf
    constant: float                      # the sum of the one-leaf trees
    n_features: int
    # Saabas: per leaf, the splits on its path — (leaves, depth) feature and the change of the
    # count-weighted mean of the leaves below, from the split's node to the next (0-padded)
    path_feature: NDArray[np.intp]
    path_delta: NDArray[np.float64]
    expected: float                      # Σ of each tree's count-weighted leaf mean (pred_contrib's bias)
    split_features: frozenset[int] = frozenset()     # the features some split reads

    def leaves(self, x: NDArray[np.floating]) -> NDArray[np.intp]:
        """(trees with a split, n): the leaf each row reaches in each tree (module docstring: the rule)."""
        n = x.shape[0]
        xt = np.asarray(x, dtype=np.float64).T
        nan = np.isnan(xt)
        sent = np.concatenate([np.where(nan, 0.0, xt), np.where(nan, -np.inf, xt), np.where(nan, np.inf, xt)])
        value = sent[self.slot_column]                                  # (trees · slots, n)
        left = value <= self.slot_threshold
        if self.zero_slots.size:
            z = self.zero_slots
            left[z] = np.where(np.abs(value[z]) <= _ZERO, self.zero_left, left[z])
        mask = self.slot_mask
        keep = mask | (left.view(np.uint8).astype(mask.dtype) * mask.dtype.type(np.iinfo(mask.dtype).max))
        bits = np.bitwise_and.reduce(keep.reshape(-1, self.slots, n), axis=1)    # (trees, n)
        lowest = bits & (~bits + mask.dtype.type(1))
        return self.tree_leaf_start + (np.frexp(lowest.astype(np.float64))[1] - 1)   # the bit's index, exactly

    def predict(self, x: NDArray[np.floating]) -> NDArray[np.float64]:
        """Sum of the trees' leaf values for each row of x (n, features)."""
        n = x.shape[0]
        if self.tree_leaf_start.shape[0] == 0 or n == 0:
            return np.full(n, self.constant)
        out = self.leaf_value.take(self.leaves(x)).sum(axis=0)
        return out + self.constant if self.constant else out

    def contributions(self, x: NDArray[np.floating]) -> NDArray[np.float64]:
        """(n, features): each split on a row's path moves the prediction from its node's mean to
        the child's (Saabas); the move is its feature's. `expected` + a row's sum = `predict`."""
        n = x.shape[0]
        if self.tree_leaf_start.shape[0] == 0 or n == 0 or self.path_feature.shape[1] == 0:
            return np.zeros((n, self.n_features))
        reached = self.leaves(x)                                        # (trees, n)
        row = np.broadcast_to(np.arange(n, dtype=np.intp)[None, :, None] * self.n_features,
                              reached.shape + (1,))
        index = row + self.path_feature[reached]                        # (trees, n, depth)
        return np.bincount(index.ravel(), weights=self.path_delta[reached].ravel(),
                           minlength=n * self.n_features).reshape(n, self.n_features)


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
    leaf_counts: list[float] = []
    max_depth = 0
    split_starts, leaf_starts = [], []
    for info in infos:
        split_starts.append(len(feature))
        leaf_starts.append(len(leaves))
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
                leaf_counts.append(_count(node.get("leaf_count", 1)))
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

    def node_of(ref: int) -> int:        # splits are nodes 0..S-1, leaves S..
        return ref if ref >= 0 else splits + ~ref

    node_mean = np.concatenate([np.zeros(splits), np.asarray(leaves, dtype=np.float64)])
    count = np.concatenate([np.zeros(splits), np.asarray(leaf_counts)])
    # a split's leaves are a run (left to right): [first, last]; children come after their parent
    # in the node order, so a reverse sweep sees them first; so does the count-weighted mean
    first = np.arange(splits + len(leaves)) - splits
    last = first.copy()
    for i in range(splits - 1, -1, -1):
        lo, hi = node_of(left[i]), node_of(right[i])
        first[i], last[i] = first[lo], last[hi]
        total = count[lo] + count[hi]
        node_mean[i] = ((count[lo] * node_mean[lo] + count[hi] * node_mean[hi]) / total if total > 0
                        else 0.5 * (node_mean[lo] + node_mean[hi]))
        count[i] = total
    # every leaf's path: (feature, change of the mean) per split on it, parents first
    paths: dict[int, list[tuple[int, float]]] = {node_of(r): [] for r in roots}
    for i in range(splits):
        for child in (node_of(left[i]), node_of(right[i])):
            paths[child] = paths[i] + [(feature[i], float(node_mean[child] - node_mean[i]))]
    path_feature = np.zeros((len(leaves), max_depth), dtype=np.intp)
    path_delta = np.zeros((len(leaves), max_depth))
    for leaf in range(len(leaves)):
        for d, (f, delta) in enumerate(paths[splits + leaf]):
            path_feature[leaf, d], path_delta[leaf, d] = f, delta

    threshold_ = np.asarray(threshold, dtype=np.float64)
    default_left_ = np.asarray(default_left, dtype=bool)
    missing_ = np.asarray(missing, dtype=np.int8)
    with_split = [t for t in range(len(infos)) if roots[t] >= 0]
    ends = split_starts[1:] + [splits]
    slots = max([ends[t] - split_starts[t] for t in with_split], default=1)
    widest = max([e - b for b, e in zip(leaf_starts, leaf_starts[1:] + [len(leaves)])], default=1)
    dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64) if np.iinfo(d).bits >= widest)
    ones = (1 << np.iinfo(dtype).bits) - 1
    slot_split = np.full((len(with_split), slots), -1, dtype=np.intp)
    for row, t in enumerate(with_split):
        slot_split[row, :ends[t] - split_starts[t]] = np.arange(split_starts[t], ends[t])
    slot_split = slot_split.ravel()
    slot_mask = np.full(slot_split.shape[0], ones, dtype=dtype)
    for at, i in enumerate(slot_split.tolist()):
        if i >= 0:
            lo, hi = int(first[node_of(left[i])]), int(last[node_of(left[i])])
            slot_mask[at] = ones ^ (((1 << (hi - lo + 1)) - 1) << (lo - leaf_starts[with_split[at // slots]]))
    real = np.maximum(slot_split, 0)
    variant = np.where(missing_ == 0, 0, np.where(default_left_, 1, 2))   # None: NaN is 0.0; else the default
    zero_slots = np.flatnonzero((slot_split >= 0) & (missing_[real] == 1))
    return Forest(
        roots=np.asarray(roots, dtype=np.intp), leaf_value=np.asarray(leaves, dtype=np.float64), slots=slots,
        slot_column=np.where(slot_split >= 0, np.asarray(feature, dtype=np.intp)[real] + n_features * variant[real], 0),
        slot_threshold=np.where(slot_split >= 0, threshold_[real], 0.0)[:, None], slot_mask=slot_mask[:, None],
        zero_slots=zero_slots, zero_left=default_left_[real[zero_slots]][:, None],
        tree_leaf_start=np.asarray([leaf_starts[t] for t in with_split], dtype=np.intp)[:, None],
        constant=float(sum(leaves[~roots[t]] for t in range(len(infos)) if roots[t] < 0)), n_features=n_features,
        path_feature=path_feature, path_delta=path_delta, split_features=frozenset(int(f) for f in feature),
        expected=float(sum(node_mean[node_of(r)] for r in roots)))


def _count(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise _refuse(f"a leaf_count must be a number >= 0, got {value!r}")
    return float(value)


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

    def uses(self, features: Sequence[int]) -> bool:
        """Whether the model reads any of these feature indices (a split on it, a non-zero
        weight): when not, their values cannot change a score or a contribution."""
        if self.forest is not None:
            return bool(self.forest.split_features.intersection(int(f) for f in features))
        return self.weights is not None and bool(np.any(self.weights[list(features)] != 0))

    def residual(self, x: NDArray[np.floating]) -> NDArray[np.float64]:
        if self.forest is not None:
            return self.forest.predict(x)
        z = (np.asarray(x, dtype=np.float64) - self.center) / self.scale
        return np.nan_to_num(z) @ self.weights          # a missing feature sits at the centre

    def score(self, x: NDArray[np.floating], fused: NDArray[np.floating]) -> NDArray[np.float64]:
        return self.init_scale * np.asarray(fused, dtype=np.float64) + self.residual(x)

    def contributions(self, x: NDArray[np.floating], fused: NDArray[np.floating]
                      ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(base (n,), contributions (n, features)) with base + a row's sum = `score`: the base is
        init_scale · fused + the model's expected residual; a tree's contributions are Saabas'
        (`Forest.contributions`), a linear model's weight × (x − centre) / scale (0 when missing)."""
        base = self.init_scale * np.asarray(fused, dtype=np.float64)
        if self.forest is not None:
            return base + self.forest.expected, self.forest.contributions(x)
        z = (np.asarray(x, dtype=np.float64) - self.center) / self.scale
        return base, np.nan_to_num(z) * self.weights

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
