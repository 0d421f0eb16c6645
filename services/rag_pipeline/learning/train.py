"""Training a ranking model as a residual on today's fused score, and writing it as JSON.

    trees   LightGBM LambdaMART (objective lambdarank, nDCG@10), init_score = INIT_SCALE · fused,
            small trees (TREE_PARAMS: ≤ 7 leaves, ≥ 50 rows a leaf, shrinkage 0.05, L2 1),
            monotone constraints where the direction is known (ranking/features.MONOTONE),
            early stopping on a validation fold (patience PATIENCE, at most MAX_ROUNDS) or a
            fixed number of rounds; deterministic=True, one thread and a fixed seed, so the
            same data gives the same model byte for byte
    linear  pairwise logistic (RankNet) loss over (relevant, not relevant) pairs of a query,
            features centred and scaled on the training rows (a missing value sits at the
            centre), L2 LINEAR_L2, L-BFGS; the same residual form

Both train over a `FeatureSet` (names, monotone constraints, version): PRODUCTION, the
ranking's own (ranking/features.py), unless an experiment passes a wider one (lab/). Both are
then calibrated: relevancy = sigmoid(a · score + b), (a, b) by logistic regression of
"judged relevant" on the score over the training rows, a > 0 (the order is kept). The result is
the JSON envelope ranking/trees.py reads — never a pickle.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ranking.features import FEATURE_NAMES, FEATURE_VERSION, MONOTONE
from ranking.trees import MODEL_FORMAT, RankerModel, load_model

INIT_SCALE = 10.0
MAX_ROUNDS = 300
PATIENCE = 30
SEED = 7
THREADS = 1
LINEAR_L2 = 1.0
TREE_PARAMS: dict = {
    "objective": "lambdarank", "metric": "ndcg", "eval_at": [10], "num_leaves": 7, "min_data_in_leaf": 50,
    "learning_rate": 0.05, "lambda_l2": 1.0, "max_bin": 63, "deterministic": True, "force_row_wise": True,
    "num_threads": THREADS, "seed": SEED, "monotone_constraints": list(MONOTONE), "verbose": -1,
}


@dataclass(frozen=True, slots=True)
class FeatureSet:
    """The columns a model is trained on: names, LightGBM monotone constraints, feature version."""

    names: tuple[str, ...]
    monotone: tuple[int, ...]
    version: int

    def __post_init__(self) -> None:
        if len(self.monotone) != len(self.names):
            raise ValueError(f"{len(self.monotone)} monotone constraints for {len(self.names)} features")


PRODUCTION = FeatureSet(FEATURE_NAMES, MONOTONE, FEATURE_VERSION)


@dataclass(frozen=True, slots=True)
class TrainRows:
    """Candidate rows of several queries, each query's rows contiguous (`groups` = their counts)."""

    x: NDArray[np.float32]        # (rows, F)
    fused: NDArray[np.float32]    # (rows,)
    labels: NDArray[np.int32]     # (rows,) judged relevance, 0 = not judged relevant
    groups: NDArray[np.int32]     # (queries,)

    @classmethod
    def concat(cls, parts: list[tuple[NDArray, NDArray, NDArray]]) -> TrainRows:
        """From per-query (x, fused, labels)."""
        return cls(x=np.concatenate([p[0] for p in parts]).astype(np.float32),
                   fused=np.concatenate([p[1] for p in parts]).astype(np.float32),
                   labels=np.concatenate([p[2] for p in parts]).astype(np.int32),
                   groups=np.asarray([len(p[2]) for p in parts], dtype=np.int32))


def train_trees(train: TrainRows, valid: TrainRows | None = None, rounds: int | None = None,
                feature_set: FeatureSet = PRODUCTION) -> tuple[dict, int]:
    """(LightGBM dump_model() dict, rounds used): early stopping on `valid`, else `rounds`."""
    import lightgbm as lgb

    def dataset(rows: TrainRows, reference=None):
        return lgb.Dataset(rows.x, label=rows.labels, group=rows.groups, init_score=INIT_SCALE * rows.fused,
                           feature_name=list(feature_set.names), reference=reference, free_raw_data=False,
                           params={"max_bin": TREE_PARAMS["max_bin"], "verbose": -1})

    train_set = dataset(train)
    kwargs: dict = {"num_boost_round": rounds or MAX_ROUNDS}
    if valid is not None and rounds is None:
        kwargs["valid_sets"] = [dataset(valid, reference=train_set)]
        kwargs["callbacks"] = [lgb.early_stopping(PATIENCE, first_metric_only=True, verbose=False)]
    booster = lgb.train({**TREE_PARAMS, "monotone_constraints": list(feature_set.monotone)}, train_set, **kwargs)
    used = booster.best_iteration if booster.best_iteration > 0 else booster.current_iteration()
    return booster.dump_model(num_iteration=used), int(used)


def train_linear(train: TrainRows) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(center, scale, weights) of the pairwise logistic residual (module docstring)."""
    from scipy.optimize import minimize

    x = train.x.astype(np.float64)
    center = np.nan_to_num(np.nanmean(np.where(np.isfinite(x), x, np.nan), axis=0))
    scale = np.nan_to_num(np.nanstd(np.where(np.isfinite(x), x, np.nan), axis=0))
    scale = np.where(scale > 1e-9, scale, 1.0)
    z = np.nan_to_num((x - center) / scale)
    base = INIT_SCALE * train.fused.astype(np.float64)
    pos, neg = [], []
    start = 0
    for size in train.groups.tolist():
        labels = train.labels[start:start + size]
        p = np.flatnonzero(labels > 0) + start
        q = np.flatnonzero(labels <= 0) + start
        if p.size and q.size:
            pp, qq = np.meshgrid(p, q, indexing="ij")
            pos.append(pp.ravel())
            neg.append(qq.ravel())
        start += size
    m = z.shape[1]
    if not pos:
        return center, scale, np.zeros(m)
    i, j = np.concatenate(pos), np.concatenate(neg)
    dz, db = z[i] - z[j], base[i] - base[j]

    def loss(w: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        margin = db + dz @ w
        value = np.logaddexp(0.0, -margin).mean() + 0.5 * LINEAR_L2 * (w @ w)
        grad = -(dz.T @ (1.0 / (1.0 + np.exp(margin)))) / len(i) + LINEAR_L2 * w
        return float(value), grad

    result = minimize(loss, np.zeros(m), jac=True, method="L-BFGS-B", options={"maxiter": 200})
    return center, scale, result.x


def calibrate(score: NDArray[np.floating], labels: NDArray[np.integer]) -> tuple[float, float]:
    """(a, b) of P(relevant) = sigmoid(a · score + b) by Newton steps, a kept > 0."""
    x = np.stack([np.asarray(score, dtype=np.float64), np.ones(len(score))], axis=1)
    x[:, 0] = np.clip(x[:, 0], -50.0, 50.0)
    y = (np.asarray(labels) > 0).astype(np.float64)
    w = newton_logistic(x, y, np.array([0.1, 0.0]))
    return float(max(w[0], 1e-3)), float(w[1])


def newton_logistic(x: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64],
                    steps: int = 50) -> NDArray[np.float64]:
    """Weights of P(y = 1) = sigmoid(x · w), L2 1e-3, by Newton steps from `w` (changed in place)."""
    ridge = 1e-3 * np.eye(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        step = np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x + ridge, x.T @ (p - y) + 1e-3 * w)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def fit(kind: str, train: TrainRows, top_n: int, *, valid: TrainRows | None = None,
        rounds: int | None = None, feature_set: FeatureSet = PRODUCTION) -> tuple[bytes, RankerModel, int]:
    """Train a `kind` ("trees" | "linear") model: (stored JSON bytes, parsed model, rounds)."""
    fs = feature_set
    doc: dict = {"format": MODEL_FORMAT, "kind": kind, "feature_version": fs.version,
                 "feature_names": list(fs.names), "init_scale": INIT_SCALE, "top_n": int(top_n),
                 "calibration": [1.0, 0.0]}
    used = 0
    if kind == "trees":
        doc["lightgbm"], used = train_trees(train, valid, rounds, fs)
    elif kind == "linear":
        center, scale, weights = train_linear(train)
        doc.update(center=center.tolist(), scale=scale.tolist(), weights=weights.tolist())
    else:
        raise ValueError(f"kind must be 'trees' or 'linear', got {kind!r}")
    uncalibrated = load_model(_dump(doc), fs.names, fs.version)
    doc["calibration"] = list(calibrate(uncalibrated.score(train.x, train.fused), train.labels))
    raw = _dump(doc)
    return raw, load_model(raw, fs.names, fs.version), used


def _dump(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
