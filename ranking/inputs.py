"""What `rank()` takes: the candidates (n merged retrieval candidates, one array per column) and
the validated tuning (`RankingConfig`).

The RAG pipeline merges the dense-vector leg and the BM25 leg into one row per candidate
and hands the columns over as a `Candidates`. Every instance is validated when it is made
(directly or through `Candidates.build`), so the ranking core can trust it:

    column            dtype    accepted values
    dense             float32  cosine in [-1, 1] (1e-3 slack for rounding); NaN = dense leg absent
    bm25              float32  raw BM25 >= 0; NaN = keyword leg absent
    dense_rank        int32    1-based rank in the dense leg; 0 exactly where dense is NaN
    bm25_rank         int32    1-based rank in the keyword leg; 0 exactly where bm25 is NaN
    timestamp         float64  unix seconds >= 0; 0 = unknown
    richness          float32  [0, 1]
    reputation_prior  float32  [0, 1]; 0 = unknown (RankingConfig.default_reputation is used)
    helpful           int32    >= 0 helpful votes for the artifact
    unhelpful         int32    >= 0 unhelpful votes
    rerank            float32  [0, 1]; NaN = not re-ranked

A violation raises `InvalidArgument(column, problem)`.

How the 4R ranking is tuned: one frozen, validated `RankingConfig`.

Every field is checked when the config is built; a bad value raises
`InvalidArgument(field, problem)` naming the field and what is accepted, so a ranking
profile with nonsense weights is rejected at the door rather than at query time.

Default weights (`DEFAULT_WEIGHTS`, order: relevancy, recency, richness, reputation):

    0.75  relevancy   the query decides; the other three only reorder comparable matches
    0.10  recency     counts only when the pipeline applies recency (temporal intent / profile);
                      otherwise its weight is dropped and the rest renormalised
    0.05  richness    an ingest-time heuristic about the chunk, weakest evidence of usefulness
    0.10  reputation  direct user feedback (smoothed), stronger evidence than richness

Relevance dominates by construction: all non-relevance weights together (0.25) are a third
of the relevancy weight, so a candidate with perfect recency, richness and reputation
overtakes one with worthless side factors only if its relevancy is at most 1/3 lower
(0.25 / 0.75); without recency the margin is 0.15 / 0.75 = 0.2. A clearly better match is
never buried by popularity or freshness.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ranking.query_features import QueryFeatures
from shared.errors import InvalidArgument

DEFAULT_WEIGHTS: tuple[float, float, float, float] = (0.75, 0.10, 0.05, 0.10)

#: Order of the 4R factors everywhere in this package (weights, factor columns).
FACTOR_NAMES: tuple[str, str, str, str] = ("relevancy", "recency", "richness", "reputation")

#: Fusion methods of the two relevance legs (see ranking/rank.py); `adaptive` is `convex`
#: with the dense weight set per query from the query's features (ranking/query_features.py).
FUSIONS: tuple[str, ...] = ("convex", "convex_minmax", "rrf", "adaptive")
Fusion = Literal["convex", "convex_minmax", "rrf", "adaptive"]
#: Adaptive: as good as convex on long statements, and the one that finds identifiers and
#: quoted phrases (needle set, docs/BENCHMARKS.md).
DEFAULT_FUSION: Fusion = "adaptive"

#: When recency counts: "auto" = only on temporal intent in the query, "always", "never".
RECENCY_MODES: tuple[str, ...] = ("auto", "always", "never")
RecencyMode = Literal["auto", "always", "never"]
DEFAULT_RECENCY_MODE: RecencyMode = "auto"

#: Convex fusion's share of the dense leg; the adaptive fusion's weight for a query with no
#: lookup features (the upper bound). Best of 0.4-0.6 on the tuning half of SciFact (docs/BENCHMARKS.md).
DEFAULT_DENSE_WEIGHT = 0.6
DEFAULT_HALF_LIFE_DAYS = 180.0
#: P(relevant) = sigmoid(slope * fused + weight * confidence + intercept) (ranking/rank.py):
#: logistic regression on the top-10 results of the tuning half of SciFact's test queries with
#: the default profile (`python -m lab.fusion_lab ... --fit-probability`); expected
#: calibration error on the held-out half in docs/BENCHMARKS.md.
DEFAULT_PROBABILITY_CALIBRATION: tuple[float, float, float] = (13.8, 1.9, -14.9)
#: Reputation of an artifact whose ingest prior is unknown (0).
DEFAULT_REPUTATION = 0.5
#: Pseudo-votes behind an artifact's reputation prior when feedback is smoothed.
DEFAULT_PRIOR_STRENGTH = 4.0


def _real(field: str, value: object) -> float:
    """`value` as a finite float, or InvalidArgument naming `field`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise InvalidArgument(field, f"expected a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise InvalidArgument(field, f"must be finite, got {result}")
    return result


def _in_unit(field: str, value: object) -> float:
    result = _real(field, value)
    if not 0.0 <= result <= 1.0:
        raise InvalidArgument(field, f"must be in [0, 1], got {result}")
    return result


def _positive(field: str, value: object) -> float:
    result = _real(field, value)
    if result <= 0.0:
        raise InvalidArgument(field, f"must be > 0, got {result}")
    return result


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """Tuning of `rank()`. Built once per query (from the profile and the request)."""

    weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS
    """relevancy, recency, richness, reputation; non-negative, finite, not all zero."""
    fusion: Fusion = DEFAULT_FUSION
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    """convex fusion: alpha of the dense leg, in [0, 1] (also weighs the confidence); adaptive
    fusion: the alpha of a query with no lookup features, the upper bound of its alpha."""
    query: QueryFeatures | None = None
    """adaptive fusion: the query's features (None = none known: alpha = dense_weight)."""
    rrf_k: float = 60.0
    """rrf fusion: the k in 1 / (k + rank); >= 0."""
    half_life_days: float = DEFAULT_HALF_LIFE_DAYS
    apply_recency: bool = False
    """When False the recency weight is dropped and recency is reported as neutral 0.5."""
    now_unix: float = 0.0
    """Reference time for recency (unix seconds), passed by the caller: the core reads no
    clock. Required (> 0) when `apply_recency` is True; ignored otherwise."""
    default_reputation: float = DEFAULT_REPUTATION
    """Prior reputation of an artifact whose ingest prior is unknown (0)."""
    prior_strength: float = DEFAULT_PRIOR_STRENGTH
    """Pseudo-votes behind the prior in the Beta smoothing of feedback; > 0."""
    rerank_weight: float = 0.5
    """Share of the re-ranker score in relevancy where a candidate was re-ranked."""
    dense_calibration: tuple[float, float] = (0.15, 0.75)
    """Cosines at or below [0] calibrate to 0, at or above [1] to 1 (MiniLM-like spread)."""
    bm25_calibration: float = 10.0
    """c in bm25 / (bm25 + c): the raw BM25 that calibrates to 0.5; > 0."""
    probability_calibration: tuple[float, float, float] = DEFAULT_PROBABILITY_CALIBRATION
    """(slope, confidence weight, intercept) of a result's relevance probability =
    sigmoid(slope * fused + weight * confidence + intercept); slope > 0, weight >= 0."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalise to plain floats/tuples on a frozen instance

        weights = self.weights
        if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__") \
                or len(weights) != 4:
            raise InvalidArgument(
                "weights",
                "expected 4 numbers (relevancy, recency, richness, reputation), "
                f"got {weights!r}")
        clean = tuple(_real("weights", w) for w in weights)
        for name, w in zip(FACTOR_NAMES, clean):
            if w < 0.0:
                raise InvalidArgument("weights", f"{name} weight must be >= 0, got {w}")
        if sum(clean) <= 0.0:
            raise InvalidArgument("weights", "at least one weight must be > 0, got all zero")

        if self.fusion not in FUSIONS:
            raise InvalidArgument("fusion", f"must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if not isinstance(self.apply_recency, bool):
            raise InvalidArgument("apply_recency", f"expected a bool, got {self.apply_recency!r}")
        if not self.apply_recency and clean[0] + clean[2] + clean[3] <= 0.0:
            raise InvalidArgument(
                "weights",
                "only recency is weighted but apply_recency is False; give relevancy, "
                "richness or reputation a weight > 0, or apply recency")
        set_(self, "weights", clean)

        set_(self, "dense_weight", _in_unit("dense_weight", self.dense_weight))
        if self.query is not None and not isinstance(self.query, QueryFeatures):
            raise InvalidArgument("query", f"expected QueryFeatures or None, got {type(self.query).__name__}")
        rrf_k = _real("rrf_k", self.rrf_k)
        if rrf_k < 0.0:
            raise InvalidArgument("rrf_k", f"must be >= 0, got {rrf_k}")
        set_(self, "rrf_k", rrf_k)
        set_(self, "half_life_days", _positive("half_life_days", self.half_life_days))
        now = _real("now_unix", self.now_unix)
        if now < 0.0:
            raise InvalidArgument("now_unix", f"must be >= 0, got {now}")
        if self.apply_recency and now <= 0.0:
            raise InvalidArgument(
                "now_unix", "is required when apply_recency is True: pass the reference time "
                            "(unix seconds, > 0); the ranking core reads no clock")
        set_(self, "now_unix", now)
        set_(self, "default_reputation", _in_unit("default_reputation", self.default_reputation))
        set_(self, "prior_strength", _positive("prior_strength", self.prior_strength))
        set_(self, "rerank_weight", _in_unit("rerank_weight", self.rerank_weight))

        cal = self.dense_calibration
        if isinstance(cal, (str, bytes)) or not hasattr(cal, "__len__") or len(cal) != 2:
            raise InvalidArgument("dense_calibration", f"expected (low, high) cosines, got {cal!r}")
        lo, hi = (_real("dense_calibration", v) for v in cal)
        if not -1.0 <= lo < hi <= 1.0:
            raise InvalidArgument(
                "dense_calibration", f"expected -1 <= low < high <= 1, got ({lo}, {hi})")
        set_(self, "dense_calibration", (lo, hi))
        set_(self, "bm25_calibration", _positive("bm25_calibration", self.bm25_calibration))
        pc = self.probability_calibration
        if isinstance(pc, (str, bytes)) or not hasattr(pc, "__len__") or len(pc) != 3:
            raise InvalidArgument("probability_calibration", f"expected (slope, weight, intercept), got {pc!r}")
        slope, weight, intercept = (_real("probability_calibration", v) for v in pc)
        if slope <= 0.0 or weight < 0.0:
            raise InvalidArgument("probability_calibration",
                                  f"expected slope > 0 and confidence weight >= 0, got ({slope}, {weight})")
        set_(self, "probability_calibration", (slope, weight, intercept))


COSINE_SLACK = 1e-3

_DTYPES: dict[str, type[np.generic]] = {
    "dense": np.float32,
    "bm25": np.float32,
    "dense_rank": np.int32,
    "bm25_rank": np.int32,
    "timestamp": np.float64,
    "richness": np.float32,
    "reputation_prior": np.float32,
    "helpful": np.int32,
    "unhelpful": np.int32,
    "rerank": np.float32,
}

#: Value of a column `Candidates.build` fills in when it is not given (ranks: see build).
_BUILD_DEFAULTS: dict[str, float] = {
    "dense": np.nan,
    "bm25": np.nan,
    "timestamp": 0.0,
    "richness": 0.5,
    "reputation_prior": 0.0,
    "helpful": 0,
    "unhelpful": 0,
    "rerank": np.nan,
}

_I32 = np.iinfo(np.int32)


@dataclass(frozen=True, slots=True)
class Candidates:
    """n retrieval candidates, columnar. See the module docstring for each column."""

    dense: NDArray[np.float32]
    bm25: NDArray[np.float32]
    dense_rank: NDArray[np.int32]
    bm25_rank: NDArray[np.int32]
    timestamp: NDArray[np.float64]
    richness: NDArray[np.float32]
    reputation_prior: NDArray[np.float32]
    helpful: NDArray[np.int32]
    unhelpful: NDArray[np.int32]
    rerank: NDArray[np.float32]

    def __post_init__(self) -> None:
        n: int | None = None
        for f in fields(self):
            column = getattr(self, f.name)
            dtype = np.dtype(_DTYPES[f.name])
            if not isinstance(column, np.ndarray) or column.dtype != dtype or column.ndim != 1:
                got = (f"{column.dtype} array of shape {column.shape}"
                       if isinstance(column, np.ndarray) else type(column).__name__)
                raise InvalidArgument(
                    f.name, f"expected a 1-D {dtype} array (use Candidates.build), got {got}")
            if n is None:
                n = column.shape[0]
            elif column.shape[0] != n:
                raise InvalidArgument(
                    f.name, f"expected {n} values like dense, got {column.shape[0]}")
        _check_values(self)

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    def with_rerank(self, rerank: NDArray[np.float32]) -> Candidates:
        """These candidates with another `rerank` column, only that column checked (the others
        were when these were made): a tenth of what `dataclasses.replace` costs at n = 150."""
        if not isinstance(rerank, np.ndarray) or rerank.dtype != np.float32 or rerank.shape != self.dense.shape:
            got = f"{rerank.dtype} array of shape {rerank.shape}" if isinstance(rerank, np.ndarray) else type(rerank)
            raise InvalidArgument("rerank", f"expected a 1-D float32 array of {len(self)} values, got {got}")
        with np.errstate(invalid="ignore"):
            if np.any(rerank < 0.0) or np.any(rerank > 1.0):
                raise InvalidArgument("rerank", "scores must be in [0, 1] or NaN (not re-ranked)")
        out = object.__new__(Candidates)
        for f in fields(Candidates):
            object.__setattr__(out, f.name, rerank if f.name == "rerank" else getattr(self, f.name))
        return out

    @classmethod
    def build(
        cls,
        *,
        dense: Sequence[float] | NDArray[Any] | None = None,
        bm25: Sequence[float] | NDArray[Any] | None = None,
        dense_rank: Sequence[int] | NDArray[Any] | None = None,
        bm25_rank: Sequence[int] | NDArray[Any] | None = None,
        timestamp: Sequence[float] | NDArray[Any] | None = None,
        richness: Sequence[float] | NDArray[Any] | None = None,
        reputation_prior: Sequence[float] | NDArray[Any] | None = None,
        helpful: Sequence[int] | NDArray[Any] | None = None,
        unhelpful: Sequence[int] | NDArray[Any] | None = None,
        rerank: Sequence[float] | NDArray[Any] | None = None,
    ) -> Candidates:
        """Convert sequences (lists, arrays of any numeric dtype) to validated columns.

        Omitted columns take neutral values: dense, bm25 and rerank NaN (absent), timestamp 0
        (unknown), richness 0.5, reputation_prior 0 (unknown), no votes. An omitted rank
        column is derived from its scores: 1-based by descending score, ties to the lower
        row, 0 where the score is NaN. At least one column must be given (it sets n); a
        column of another length raises InvalidArgument naming it. An array that already
        has its column's dtype is used as is, not copied (do not modify it afterwards).
        """
        given = {
            "dense": dense, "bm25": bm25, "dense_rank": dense_rank, "bm25_rank": bm25_rank,
            "timestamp": timestamp, "richness": richness,
            "reputation_prior": reputation_prior, "helpful": helpful, "unhelpful": unhelpful,
            "rerank": rerank,
        }
        columns: dict[str, NDArray[Any]] = {}
        n: int | None = None
        first = ""
        for name, values in given.items():
            if values is None:
                continue
            column = _convert(name, values)
            if n is None:
                n, first = column.shape[0], name
            elif column.shape[0] != n:
                raise InvalidArgument(
                    name, f"expected {n} values like {first}, got {column.shape[0]}")
            columns[name] = column
        if n is None:
            raise InvalidArgument("candidates", "give at least one column (e.g. dense or bm25)")
        for name, fill in _BUILD_DEFAULTS.items():
            if name not in columns:
                columns[name] = np.full(n, fill, dtype=_DTYPES[name])
        for rank_name, score_name in (("dense_rank", "dense"), ("bm25_rank", "bm25")):
            if rank_name not in columns:
                columns[rank_name] = ranks_from_scores(columns[score_name])
        return cls(**columns)


def ranks_from_scores(scores: NDArray[np.floating]) -> NDArray[np.int32]:
    """1-based ranks by descending score (ties → lower row first); 0 where score is NaN."""
    present = ~np.isnan(scores)
    rows = np.flatnonzero(present)
    order = rows[np.argsort(-scores[rows], kind="stable")]
    ranks = np.zeros(scores.shape[0], dtype=np.int32)
    ranks[order] = np.arange(1, order.shape[0] + 1, dtype=np.int32)
    return ranks


def _convert(name: str, values: object) -> NDArray[Any]:
    """`values` as a 1-D array of the column's dtype, or InvalidArgument naming the column."""
    dtype = np.dtype(_DTYPES[name])
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(name, f"expected a 1-D sequence of numbers ({err})") from None
    if raw.ndim != 1:
        raise InvalidArgument(name, f"expected a 1-D sequence, got shape {raw.shape}")
    if raw.shape[0] == 0:
        return np.empty(0, dtype=dtype)
    if raw.dtype.kind not in "biuf":
        raise InvalidArgument(name, f"expected numbers, got {raw.dtype} values")
    if dtype.kind == "i":
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
                raise InvalidArgument(name, "expected whole numbers")
        if raw.size and (raw.min() < _I32.min or raw.max() > _I32.max):
            raise InvalidArgument(name, "values out of int32 range")
    return raw.astype(dtype, copy=False)


def _check_values(c: Candidates) -> None:
    """The value rules of the module docstring; raise InvalidArgument on the first breach."""
    n = c.dense.shape[0]
    if n == 0:
        return

    with np.errstate(invalid="ignore"):
        if np.any(np.abs(c.dense) > 1.0 + COSINE_SLACK) or np.any(np.isinf(c.dense)):
            raise InvalidArgument("dense", "cosines must be in [-1, 1] or NaN (absent)")
        if np.any(c.bm25 < 0.0) or np.any(np.isinf(c.bm25)):
            raise InvalidArgument("bm25", "scores must be finite and >= 0, or NaN (absent)")
        if np.any(c.rerank < 0.0) or np.any(c.rerank > 1.0):
            raise InvalidArgument("rerank", "scores must be in [0, 1] or NaN (not re-ranked)")

    for rank_name, score_name, scores in (("dense_rank", "dense", c.dense),
                                          ("bm25_rank", "bm25", c.bm25)):
        ranks = getattr(c, rank_name)
        if np.any(ranks < 0):
            raise InvalidArgument(rank_name, "ranks must be >= 1, or 0 where the leg is absent")
        if np.any((ranks == 0) != np.isnan(scores)):
            raise InvalidArgument(
                rank_name, f"must be 0 exactly where {score_name} is NaN (leg absent)")

    if not np.all(np.isfinite(c.timestamp)) or np.any(c.timestamp < 0.0):
        raise InvalidArgument("timestamp", "must be finite unix seconds >= 0 (0 = unknown)")
    for name in ("richness", "reputation_prior"):
        column = getattr(c, name)
        if not np.all((column >= 0.0) & (column <= 1.0)):  # also rejects NaN
            raise InvalidArgument(name, "must be in [0, 1]")
    for name in ("helpful", "unhelpful"):
        if np.any(getattr(c, name) < 0):
            raise InvalidArgument(name, "vote counts must be >= 0")
