"""How the 4R ranking is tuned: one frozen, validated `RankingConfig`.

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

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ranking.query_features import QueryFeatures
from shared.errors import InvalidArgument

#: relevancy, recency, richness, reputation — see the module docstring for the reasoning.
DEFAULT_WEIGHTS: tuple[float, float, float, float] = (0.75, 0.10, 0.05, 0.10)

#: Order of the 4R factors everywhere in this package (weights, factor columns).
FACTOR_NAMES: tuple[str, str, str, str] = ("relevancy", "recency", "richness", "reputation")

#: Fusion methods of the two relevance legs (see ranking/factors.py); `adaptive` is `convex`
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
#: P(relevant) = sigmoid(slope * fused + weight * confidence + intercept) (ranking/factors.py):
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
