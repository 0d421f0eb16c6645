"""Blend the 4R factors into one overall score and keep the best k, with explanations.

    overall = sum_i w_i * factor_i,   w = config weights / their sum

where factor = (relevancy, recency, richness, reputation) from `ranking.factors`. When the
config does not apply recency, the recency weight is set to 0 before normalising and the
recency factor is reported as the neutral 0.5. The top k are picked with `argpartition` and
only they are sorted: overall descending, ties to the lower row index (also at the k-th
place: of several candidates tied there, the lower rows are kept). k > n returns all n;
k <= 0 raises InvalidArgument("k", ...); no candidates give an empty `Ranked`.

A factor whose weight is 0 does not change the order, so it is only evaluated for the k
rows that are returned (it is still reported there).

`rank` is `blend` (every candidate's overall score, and what explains it) then `top_k` then
`explain` (the `Ranked` of the chosen rows); the learned re-ranker (ranking/learned.py) uses the
steps apart, to blend once and re-blend only the rows its model re-scores (`reblend`).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from ranking.candidates import Candidates
from ranking.config import RankingConfig
from ranking.factors import (
    NEUTRAL_RECENCY,
    FusionTrace,
    recency,
    relevance_probability,
    relevancy,
    reputation,
    richness,
)
from shared.errors import InvalidArgument

_F32 = np.float32


@dataclass(frozen=True, slots=True)
class Ranked:
    """The best k candidates, best first, and why they rank there."""

    rows: NDArray[np.intp]              # indices into the candidates, best first
    overall: NDArray[np.float32]        # (k,) overall scores of rows, non-increasing
    factors: NDArray[np.float32]        # (k, 4) relevancy, recency, richness, reputation
    contributions: NDArray[np.float32]  # (k, 4) weights * factors; a row sums to ~overall
    weights: NDArray[np.float32]        # (4,) normalised weights used (recency 0 if not applied)
    dense_norm: NDArray[np.float32]     # (k,) dense leg after normalisation (absent -> 0)
    bm25_norm: NDArray[np.float32]      # (k,) keyword leg after normalisation (absent -> 0)
    confidence: float                   # best absolute calibrated match of the query, [0, 1]
    dense_weight: float = 0.0           # the fusion's dense weight for this query
    probability: NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))
    """(k,) calibrated probability that each row is relevant (ranking/factors.py, step 3)."""

    def take(self, positions: NDArray[np.intp]) -> "Ranked":
        """These places of the ranking only (indices into `rows`, in the order given)."""
        n = len(self.rows)
        return replace(self, **{name: getattr(self, name)[positions] for name in _PER_ROW
                                if len(getattr(self, name)) == n})


_PER_ROW = ("rows", "overall", "factors", "contributions", "dense_norm", "bm25_norm", "probability")


def effective_weights(cfg: RankingConfig) -> NDArray[np.float32]:
    """The (4,) weights `rank` uses: recency zeroed unless applied, then summing to 1."""
    w = list(cfg.weights)
    if not cfg.apply_recency:
        w[1] = 0.0
    total = sum(w)  # > 0: RankingConfig guarantees it
    return np.array([x / total for x in w], dtype=_F32)


def top_k(scores: NDArray[np.float32], k: int) -> NDArray[np.intp]:
    """Rows of the k highest scores, highest first; ties (also at the cut) → lower row first."""
    n = scores.shape[0]
    if k >= n:
        return np.argsort(-scores, kind="stable").astype(np.intp, copy=False)
    part = np.argpartition(scores, n - k)[n - k:]
    part_scores = scores[part]
    cut = part_scores.min()
    tied_inside = k - int(np.count_nonzero(part_scores > cut))
    tied_rows = np.flatnonzero(scores == cut)
    if tied_rows.shape[0] > tied_inside:
        # argpartition kept an arbitrary subset of the rows tied at the cut: keep the lowest.
        part = np.concatenate((part[part_scores > cut], tied_rows[:tied_inside]))
        part_scores = scores[part]
    return part[np.lexsort((part, -part_scores))].astype(np.intp, copy=False)


@dataclass(frozen=True, slots=True)
class Blend:
    """Every candidate's overall score and what `explain` reports its rows with (one pass)."""

    overall: NDArray[np.float32]        # (n,) the weighted blend, capped at 1
    relevancy: NDArray[np.float32]      # (n,)
    trace: FusionTrace                  # the fusion behind relevancy
    weights: NDArray[np.float32]        # (4,) normalised
    recency: NDArray[np.float32] | None     # (n,) when its weight is > 0, else None (computed per row)
    richness: NDArray[np.float32] | None
    reputation: NDArray[np.float32] | None


def blend(c: Candidates, cfg: RankingConfig) -> Blend:
    """The 4R blend of every candidate (module docstring); no selection."""
    weights = effective_weights(cfg)
    w_rel, w_rec, w_rich, w_rep = (float(w) for w in weights)
    rel, trace = relevancy(c, cfg)
    everything = slice(None)
    overall = np.multiply(rel, w_rel)
    rec = rich = rep = None
    if w_rec > 0.0:
        rec = _recency_of(c, cfg, everything)
        overall += np.multiply(rec, w_rec)
    if w_rich > 0.0:
        rich = richness(c.richness)
        overall += np.multiply(rich, w_rich)
    if w_rep > 0.0:
        rep = _reputation_of(c, cfg, everything)
        overall += np.multiply(rep, w_rep)
    np.minimum(overall, 1.0, out=overall)  # weights summing to 1 may round a hair above
    return Blend(overall=overall, relevancy=rel, trace=trace, weights=weights, recency=rec, richness=rich,
                 reputation=rep)


def reblend(b: Blend, rows: NDArray[np.intp], rel: NDArray[np.float32]) -> NDArray[np.float32]:
    """The overall score of `rows` with Relevancy `rel` instead (the same float32 operations as
    `blend`, so a row's score is bit for bit what `blend` gives it with that relevancy)."""
    w_rel, w_rec, w_rich, w_rep = (float(w) for w in b.weights)
    overall = np.multiply(rel, w_rel)
    for column, w in ((b.recency, w_rec), (b.richness, w_rich), (b.reputation, w_rep)):
        if w > 0.0:
            overall += np.multiply(column[rows], w)
    np.minimum(overall, 1.0, out=overall)
    return overall


def explain(c: Candidates, cfg: RankingConfig, b: Blend, rows: NDArray[np.intp],
            rel: NDArray[np.float32] | None = None, overall: NDArray[np.float32] | None = None) -> Ranked:
    """The `Ranked` of `rows` in that order; `rel` / `overall` (per row) replace the blend's."""
    factors = np.empty((rows.shape[0], 4), dtype=_F32)
    factors[:, 0] = b.relevancy[rows] if rel is None else rel
    factors[:, 1] = b.recency[rows] if b.recency is not None else _recency_of(c, cfg, rows)
    factors[:, 2] = b.richness[rows] if b.richness is not None else richness(c.richness[rows])
    factors[:, 3] = b.reputation[rows] if b.reputation is not None else _reputation_of(c, cfg, rows)
    trace = b.trace
    return Ranked(rows=rows, overall=b.overall[rows] if overall is None else overall, factors=factors,
                  contributions=factors * b.weights, weights=b.weights,
                  dense_norm=trace.dense_norm[rows], bm25_norm=trace.bm25_norm[rows],
                  confidence=trace.confidence, dense_weight=trace.dense_weight,
                  probability=relevance_probability(trace.fused[rows], trace.confidence, cfg.probability_calibration))


def _recency_of(c: Candidates, cfg: RankingConfig, rows: slice | NDArray[np.intp]) -> NDArray[np.float32]:
    if not cfg.apply_recency:
        return np.full(c.timestamp[rows].shape[0], NEUTRAL_RECENCY, dtype=_F32)
    return recency(c.timestamp[rows], cfg.now_unix, cfg.half_life_days)


def _reputation_of(c: Candidates, cfg: RankingConfig, rows: slice | NDArray[np.intp]) -> NDArray[np.float32]:
    return reputation(c.reputation_prior[rows], c.helpful[rows], c.unhelpful[rows], cfg.default_reputation,
                      cfg.prior_strength)


def check_k(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidArgument("k", f"expected a positive integer, got {k!r}")
    if k <= 0:
        raise InvalidArgument("k", f"must be a positive integer, got {k}")


def empty_ranked(cfg: RankingConfig) -> Ranked:
    empty = np.zeros(0, dtype=_F32)
    return Ranked(rows=np.zeros(0, dtype=np.intp), overall=empty, factors=np.zeros((0, 4), dtype=_F32),
                  contributions=np.zeros((0, 4), dtype=_F32), weights=effective_weights(cfg),
                  dense_norm=empty, bm25_norm=empty, confidence=0.0)


def rank(c: Candidates, cfg: RankingConfig, k: int) -> Ranked:
    """Score every candidate with the 4R factors and return the best `k`, explained."""
    check_k(k)
    if len(c) == 0:
        return empty_ranked(cfg)
    b = blend(c, cfg)
    return explain(c, cfg, b, top_k(b.overall, k))
