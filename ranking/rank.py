"""The 4R factors, and their blend into one overall score that keeps the best k, with explanations.

    overall = sum_i w_i * factor_i,   w = config weights / their sum

where factor = (relevancy, recency, richness, reputation), below. When the
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

The factors, vectorised over candidates. Every factor is float32 in [0, 1], NaN-free.

Relevancy
---------
Two steps: a *within-query* fusion that orders the candidates, then a *calibration* that
scales the whole query by how good its best match is, so relevancies are comparable across
queries. A third, reported beside the factors, turns the same two numbers into the
probability that a result is relevant.

The inputs are complete: the pipeline asks the store for both signals of every candidate
(score completion, services/rag_pipeline/merge.py), so a candidate only one leg retrieved
still has its real cosine and BM25. NaN ("absent") is left only where a signal could not be
computed — a leg that failed — and then counts as 0.

1. Fusion (`RankingConfig.fusion`) — gives `fused` in [0, 1] per candidate.

   convex  Theoretical-min-max (TMM, Bruch et al. 2023, "An Analysis of Fusion Functions
           for Hybrid Retrieval") per leg: norm = max(x, 0) / max over the leg's hits, i.e.
           min-max with the leg's theoretical floor 0 (BM25 >= 0; cosines below 0 carry no
           relevance) instead of the observed minimum. The observed minimum is just the
           weakest candidate that happened to be fetched, so plain min-max turns a
           near-tie into 0 vs 1; TMM keeps the ratio. Candidates the leg did not retrieve
           get 0. fused = alpha * dense_norm + (1 - alpha) * bm25_norm, alpha = dense_weight.
   adaptive  convex, with alpha set per query from what the query is (ranking/
           query_features.py): a bare identifier, a rare term in a short query or a quoted
           phrase moves it down to dense_weight - ADAPTIVE_SPAN (within [0, 1]); a long
           statement keeps dense_weight.
   convex_minmax  The same with observed min-max: norm = (x - min) / (max - min); a leg
           whose hits spread by less than MINMAX_FLAT_RTOL gives those hits 1.0.
   rrf     Per leg, the reciprocal-rank term 1 / (rrf_k + rank) (0 when absent), summed over
           the legs and divided by the maximum attainable, legs_present / (rrf_k + 1), where
           legs_present counts the legs that retrieved anything for this query. A candidate
           ranked first by every present leg gets 1.0. The trace reports each leg's term
           already scaled by (rrf_k + 1), i.e. in (0, 1], so fused = mean of them over the
           present legs. `dense_weight` does not weigh rrf (plain RRF), only the confidence.

   If one leg retrieved nothing at all (e.g. degraded keyword-only search), the other leg
   is used alone: alpha is taken as 0 (no dense hits) or 1 (no BM25 hits) — for the
   convex fusion and for the confidence alike. With neither leg, fused and confidence are 0.

2. Calibration — `confidence` in [0, 1] is a property of the query, not of a candidate:
   the best *absolute* score over the candidates, where

       absolute = alpha * cal_dense + (1 - alpha) * cal_bm25
       cal_dense = clip((cosine - lo) / (hi - lo), 0, 1)   (lo, hi) = dense_calibration
       cal_bm25  = bm25 / (bm25 + c)                         c = bm25_calibration
       (an absent leg contributes 0)

   and relevancy = fused * g(confidence) with

       g(confidence) = CONFIDENCE_FLOOR + (1 - CONFIDENCE_FLOOR) * confidence,  floor = 0.5

   Why this mapping:
   (a) g is one positive number per query, so multiplying by it keeps the within-query
       order of `fused` exactly: equal fused stay equal and a strictly larger fused is never
       ranked lower (float32 rounding is monotone; two fused values less than one float32
       step apart may at worst become equal, and then the row tie-break applies);
   (b) g is strictly increasing in confidence, so a query whose best match is weak
       (confidence 0: top candidate relevancy 0.5) yields lower relevancies than one whose
       best match is strong (confidence 1: top candidate relevancy 1.0);
   (c) the floor keeps at least half of the within-query spread: with confidence 0 the
       relevancy still separates candidates by up to 0.5, more than richness and
       reputation can swing the default overall score, so a weak query is still ranked by
       how well each candidate matches rather than by popularity. Whether to answer at all
       on a weak query is for the caller to decide from `confidence`, which is reported.

   Finally, where a re-ranker score is present (not NaN):
       relevancy = (1 - rerank_weight) * relevancy + rerank_weight * rerank.

3. Probability — P(relevant) of a result, `relevance_probability`:

       probability = 1 / (1 + exp(-(slope * fused + weight * confidence + intercept)))

   with (slope, weight, intercept) = `RankingConfig.probability_calibration`, fitted by
   logistic regression on judged top-10 results (benchmarks/fusion_lab.py) and measured by
   `nucleus bench` (reliability table, expected calibration error on held-out queries). It is
   reported, not blended: relevancy stays the ordinal score the 4R blend needs (near-ties stay
   near, so recency, richness and reputation can decide them), while a calibrated probability
   is steep at the top and flat below, which would hand the order of everything below the
   first results to the side factors. The probability is increasing in fused, so it orders a
   query's results exactly as fusion does.

Recency, reputation, richness: see their functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
import numbers

import numpy as np
from numpy.typing import NDArray

from ranking.inputs import Candidates
from ranking.inputs import RankingConfig
from ranking.query_features import adaptive_dense_weight, dense_weight_bounds
from shared.errors import InvalidArgument

CONFIDENCE_FLOOR = 0.5

#: Neutral recency of a candidate whose timestamp is unknown (0).
NEUTRAL_RECENCY = 0.5

SECONDS_PER_DAY = 86_400.0

_F32 = np.float32


@dataclass(frozen=True, slots=True)
class FusionTrace:
    """How relevancy was reached, per candidate, for explanations."""

    dense_norm: NDArray[np.float32]   # dense leg after normalisation (absent -> 0)
    bm25_norm: NDArray[np.float32]    # keyword leg after normalisation (absent -> 0)
    fused: NDArray[np.float32]        # within-query fusion in [0, 1], before calibration
    confidence: float                 # best absolute calibrated score of the query, [0, 1]
    dense_weight: float = 0.0         # alpha used for this query (after adaptation / absent legs)


def relevancy(c: Candidates, cfg: RankingConfig) -> tuple[NDArray[np.float32], FusionTrace]:
    """Relevancy of every candidate in [0, 1] and its trace (module docstring: semantics)."""
    n = len(c)
    if cfg.fusion in ("convex", "adaptive"):
        dense_norm, has_dense = _theoretical_minmax(c.dense)
        bm25_norm, has_bm25 = _theoretical_minmax(c.bm25)
    elif cfg.fusion == "convex_minmax":
        dense_norm, has_dense = _minmax(c.dense)
        bm25_norm, has_bm25 = _minmax(c.bm25)
    else:
        dense_norm, has_dense = _rrf_share(c.dense_rank, cfg.rrf_k)
        bm25_norm, has_bm25 = _rrf_share(c.bm25_rank, cfg.rrf_k)

    if has_dense and has_bm25:
        alpha = query_dense_weight(cfg)
    else:
        alpha = 1.0 if has_dense else 0.0

    if cfg.fusion != "rrf":
        if alpha == 1.0:
            fused = dense_norm.copy()
        elif alpha == 0.0:
            fused = bm25_norm.copy()
        else:
            fused = np.multiply(dense_norm, alpha)
            fused += np.multiply(bm25_norm, 1.0 - alpha)
    else:
        legs = int(has_dense) + int(has_bm25)
        fused = np.add(dense_norm, bm25_norm)
        if legs > 1:
            fused *= 1.0 / legs
    np.minimum(fused, 1.0, out=fused)  # alpha*1 + (1-alpha)*1 may round a hair above 1

    confidence = _confidence(c, cfg, alpha, has_dense, has_bm25) if n else 0.0
    scale = CONFIDENCE_FLOOR + (1.0 - CONFIDENCE_FLOOR) * confidence
    rel = np.multiply(fused, scale)

    rerank = c.rerank
    reranked = ~np.isnan(rerank)
    if reranked.any():
        w = cfg.rerank_weight
        blended = np.multiply(rel, 1.0 - w)
        blended += np.multiply(rerank, w)
        np.minimum(blended, 1.0, out=blended)
        rel = np.where(reranked, blended, rel)

    return rel, FusionTrace(dense_norm=dense_norm, bm25_norm=bm25_norm, fused=fused,
                            confidence=confidence, dense_weight=alpha)


def relevance_probability(fused: NDArray[np.float32], confidence: float,
                          calibration: tuple[float, float, float]) -> NDArray[np.float32]:
    """P(relevant) = 1 / (1 + exp(-(slope * fused + weight * confidence + intercept))), float32
    (module docstring, step 3)."""
    slope, weight, intercept = calibration
    z = np.multiply(fused, -slope, dtype=np.float32)
    z -= np.float32(weight * confidence + intercept)
    np.exp(z, out=z)
    z += 1.0
    np.reciprocal(z, out=z)
    return z


def query_dense_weight(cfg: RankingConfig) -> float:
    """The dense weight of this query with both legs present: `cfg.dense_weight`, or for the
    adaptive fusion the weight its query features give within the profile's bounds."""
    if cfg.fusion != "adaptive" or cfg.query is None:
        return cfg.dense_weight
    return adaptive_dense_weight(cfg.query, cfg.dense_weight, dense_weight_bounds(cfg.dense_weight))


def recency(timestamp: NDArray[np.float64], now_unix: float,
            half_life_days: float) -> NDArray[np.float32]:
    """2 ** (-age_days / half_life_days); future dates (age < 0) give 1.0, unknown (0) 0.5.

    `now_unix` is the reference time itself (unlike RankingConfig.now_unix, 0 is not "now").
    """
    if not half_life_days > 0.0:
        raise InvalidArgument("half_life_days", f"must be > 0, got {half_life_days}")
    timestamp = np.asarray(timestamp, dtype=np.float64)
    # -age in half-lives, (t - now) / (86400 * half_life), in float64 (float32 would round
    # unix seconds of today to 128 s steps); float32 from the exponent on.
    x = np.subtract(timestamp, float(now_unix))
    x *= 1.0 / (SECONDS_PER_DAY * float(half_life_days))
    np.minimum(x, 0.0, out=x)  # future dates count as now
    out = x.astype(_F32)
    np.exp2(out, out=out)
    if not timestamp.all():  # some unknown (0) timestamps
        out[timestamp == 0.0] = NEUTRAL_RECENCY
    return out


def reputation(prior: NDArray[np.float32], helpful: NDArray[np.int32],
               unhelpful: NDArray[np.int32], default: float,
               prior_strength: float) -> NDArray[np.float32]:
    """Beta-smoothed feedback: (s*p + helpful) / (s + helpful + unhelpful).

    p is the ingest prior, or `default` where the prior is unknown (0); s = prior_strength
    pseudo-votes. No votes gives p; many votes approach the helpful share.
    """
    if not prior_strength > 0.0:
        raise InvalidArgument("prior_strength", f"must be > 0, got {prior_strength}")
    if not 0.0 <= default <= 1.0:
        raise InvalidArgument("default_reputation", f"must be in [0, 1], got {default}")
    s = float(prior_strength)
    prior = np.asarray(prior, dtype=_F32)
    num = np.multiply(prior, s)
    num += (prior == 0.0) * _F32(s * default)  # unknown prior -> default
    votes_for = np.asarray(helpful).astype(_F32)  # cast once: mixed-dtype ufuncs are slow
    num += votes_for
    den = np.asarray(unhelpful).astype(_F32)
    den += votes_for
    den += s
    num /= den
    np.minimum(num, 1.0, out=num)
    return num


def richness(r: NDArray[np.float32]) -> NDArray[np.float32]:
    """The ingest richness clipped to [0, 1], as a float32 copy."""
    out = np.maximum(np.asarray(r, dtype=_F32), 0.0)  # a new array (ufuncs beat np.clip here)
    np.minimum(out, 1.0, out=out)
    return out


#: A leg whose hits spread by less than this share of their largest magnitude carries no
#: ordering information (e.g. BM25 in a tiny tenant, where FTS5 floors every IDF near zero):
#: min-max would blow that noise up to the full [0, 1] range, so all its hits get 1.0 instead.
MINMAX_FLAT_RTOL = 0.02


def _minmax(x: NDArray[np.float32]) -> tuple[NDArray[np.float32], bool]:
    """Min-max over the non-NaN entries; NaN -> 0; a flat leg (see MINMAX_FLAT_RTOL) -> 1.0."""
    if x.shape[0] == 0:
        return np.zeros(0, dtype=_F32), False
    lo = np.fmin.reduce(x)  # NaN-skipping; NaN only when every entry is NaN
    if np.isnan(lo):
        return np.zeros(x.shape[0], dtype=_F32), False
    hi = np.fmax.reduce(x)
    if hi - lo <= MINMAX_FLAT_RTOL * max(abs(float(hi)), abs(float(lo))):
        return (x == x).astype(_F32), True  # x == x is False exactly at NaN
    out = np.subtract(x, lo)
    out /= hi - lo  # division, not a reciprocal product: max maps to exactly 1.0
    np.fmax(out, 0.0, out=out)  # NaN (absent) -> 0
    return out, True


def _theoretical_minmax(x: NDArray[np.float32]) -> tuple[NDArray[np.float32], bool]:
    """max(x, 0) / max over the non-NaN entries; NaN -> 0; max <= 0 -> hits get 1.0."""
    if x.shape[0] == 0:
        return np.zeros(0, dtype=_F32), False
    hi = np.fmax.reduce(x)
    if np.isnan(hi):
        return np.zeros(x.shape[0], dtype=_F32), False
    if hi <= 0.0:
        return (x == x).astype(_F32), True
    out = np.fmax(x, 0.0)              # NaN (absent) -> 0, negatives -> 0
    out /= hi
    return out.astype(_F32, copy=False), True


def _rrf_share(ranks: NDArray[np.int32], rrf_k: float) -> tuple[NDArray[np.float32], bool]:
    """(rrf_k + 1) / (rrf_k + rank) per candidate in (0, 1]; 0 where rank is 0. (out, any hit)."""
    if ranks.shape[0] == 0 or ranks.max() <= 0:
        return np.zeros(ranks.shape[0], dtype=_F32), False
    k = _F32(rrf_k)
    out = ranks.astype(_F32)
    out += k
    if rrf_k < 1.0:
        np.maximum(out, 1.0, out=out)  # absent rows (rank 0) with rrf_k = 0: avoid 1/0
    # numerator rounded exactly like the rank-1 denominator, so rank 1 gives exactly 1.0
    np.divide(k + _F32(1.0), out, out=out)
    out *= ranks > 0  # absent -> 0
    return out, True


def _confidence(c: Candidates, cfg: RankingConfig, alpha: float,
                has_dense: bool, has_bm25: bool) -> float:
    """max over candidates of alpha*cal_dense + (1 - alpha)*cal_bm25 (absent leg -> 0)."""
    lo, hi = cfg.dense_calibration
    bc = cfg.bm25_calibration
    use_dense = has_dense and alpha > 0.0
    use_bm25 = has_bm25 and alpha < 1.0
    if use_dense and not use_bm25:
        # Calibration is monotone, so the best candidate is the best raw cosine.
        return float(min(max((float(np.fmax.reduce(c.dense)) - lo) / (hi - lo), 0.0), 1.0))
    if use_bm25 and not use_dense:
        best = float(np.fmax.reduce(c.bm25))
        return best / (best + bc)
    if not (use_dense or use_bm25):
        return 0.0
    cal = np.subtract(c.dense, lo)
    cal *= alpha / (hi - lo)
    np.fmax(cal, 0.0, out=cal)           # NaN (absent) -> 0
    np.minimum(cal, alpha, out=cal)      # alpha * clip(., 0, 1)
    bm = np.add(c.bm25, bc)
    np.divide(c.bm25, bm, out=bm)
    np.fmax(bm, 0.0, out=bm)             # NaN (absent) -> 0
    bm *= 1.0 - alpha
    cal += bm
    return float(min(float(cal.max()), 1.0))


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
    """(k,) calibrated probability that each row is relevant (ranking/rank.py, step 3)."""

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
