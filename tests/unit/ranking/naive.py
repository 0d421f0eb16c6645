"""Naive pure-Python references for the vectorised ranking core, written from the spec.

One loop per candidate, Python floats (float64), no numpy arithmetic: if the vectorised
code and these disagree beyond float32 rounding, one of them misreads the spec.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ranking.inputs import Candidates
from ranking.inputs import RankingConfig
from ranking.rank import MINMAX_FLAT_RTOL

TOL = 1e-5  # float32 vs float64 over a dozen operations on values in [0, 1]


@dataclass
class Row:
    dense: float | None
    bm25: float | None
    dense_rank: int
    bm25_rank: int
    timestamp: float
    richness: float
    reputation_prior: float
    helpful: int
    unhelpful: int
    rerank: float | None


def rows_of(c: Candidates) -> list[Row]:
    def opt(x: float) -> float | None:
        return None if math.isnan(x) else float(x)

    return [
        Row(dense=opt(c.dense[i]), bm25=opt(c.bm25[i]), dense_rank=int(c.dense_rank[i]),
            bm25_rank=int(c.bm25_rank[i]), timestamp=float(c.timestamp[i]),
            richness=float(c.richness[i]), reputation_prior=float(c.reputation_prior[i]),
            helpful=int(c.helpful[i]), unhelpful=int(c.unhelpful[i]),
            rerank=opt(c.rerank[i]))
        for i in range(len(c))
    ]


def minmax(values: list[float | None]) -> list[float]:
    hits = [v for v in values if v is not None]
    out = []
    for v in values:
        if v is None:
            out.append(0.0)
        elif max(hits) - min(hits) <= MINMAX_FLAT_RTOL * max(abs(max(hits)), abs(min(hits))):
            out.append(1.0)
        else:
            out.append((v - min(hits)) / (max(hits) - min(hits)))
    return out


def theoretical_minmax(values: list[float | None]) -> list[float]:
    hi = max(v for v in values if v is not None)
    out = []
    for v in values:
        if v is None:
            out.append(0.0)
        elif hi <= 0:
            out.append(1.0)
        else:
            out.append(max(v, 0.0) / hi)
    return out


def adaptive_alpha(cfg: RankingConfig) -> float:
    """The adaptive fusion's dense weight, written out from ranking/query_features.py's docstring."""
    f, base = cfg.query, cfg.dense_weight
    if cfg.fusion != "adaptive" or f is None:
        return base
    lo = max(0.0, base - 0.3)
    if f.words == 0:
        short = 0.0
    elif f.words <= 2:
        short = 1.0
    elif f.words == 3:
        short = 0.5
    else:
        short = 0.0
    if f.words <= 3:
        brevity = 1.0
    elif f.words >= 10:
        brevity = 0.0
    else:
        brevity = (10 - f.words) / 7
    identifier = 1.0 if f.identifiers > 0 else 0.0
    lexical = max(short, 1.0 if f.quoted else 0.0, brevity * identifier * f.rarity)
    return base - lexical * (base - lo)


def probability(fused: float, confidence: float, cfg: RankingConfig) -> float:
    slope, weight, intercept = cfg.probability_calibration
    return 1.0 / (1.0 + math.exp(-(slope * fused + weight * confidence + intercept)))


def relevancy(rows: list[Row], cfg: RankingConfig) -> dict[str, object]:
    """{'relevancy', 'fused', 'dense_norm', 'bm25_norm', 'probability': lists, 'confidence', 'alpha'}."""
    has_dense = any(r.dense is not None for r in rows)
    has_bm25 = any(r.bm25 is not None for r in rows)
    if has_dense and has_bm25:
        alpha = adaptive_alpha(cfg)
    elif has_dense:
        alpha = 1.0
    else:
        alpha = 0.0

    if cfg.fusion in ("convex", "convex_minmax", "adaptive"):
        norm = minmax if cfg.fusion == "convex_minmax" else theoretical_minmax
        dense_norm = norm([r.dense for r in rows]) if has_dense else [0.0] * len(rows)
        bm25_norm = norm([r.bm25 for r in rows]) if has_bm25 else [0.0] * len(rows)
        fused = [alpha * d + (1 - alpha) * b for d, b in zip(dense_norm, bm25_norm)]
    else:
        k = cfg.rrf_k
        legs = int(any(r.dense_rank > 0 for r in rows)) + int(any(r.bm25_rank > 0 for r in rows))
        dense_norm, bm25_norm, fused = [], [], []
        for r in rows:
            total = 0.0
            dn = bn = 0.0
            if r.dense_rank > 0:
                total += 1 / (k + r.dense_rank)
                dn = (k + 1) / (k + r.dense_rank)
            if r.bm25_rank > 0:
                total += 1 / (k + r.bm25_rank)
                bn = (k + 1) / (k + r.bm25_rank)
            dense_norm.append(dn)
            bm25_norm.append(bn)
            fused.append(total / (legs / (k + 1)) if legs else 0.0)

    lo, hi = cfg.dense_calibration
    confidence = 0.0
    for r in rows:
        cal_dense = 0.0 if r.dense is None else min(max((r.dense - lo) / (hi - lo), 0.0), 1.0)
        cal_bm25 = 0.0 if r.bm25 is None else r.bm25 / (r.bm25 + cfg.bm25_calibration)
        confidence = max(confidence, alpha * cal_dense + (1 - alpha) * cal_bm25)

    relevancy = []
    for r, f in zip(rows, fused):
        value = f * (0.5 + 0.5 * confidence)
        if r.rerank is not None:
            value = (1 - cfg.rerank_weight) * value + cfg.rerank_weight * r.rerank
        relevancy.append(value)
    return {"relevancy": relevancy, "fused": fused, "dense_norm": dense_norm,
            "bm25_norm": bm25_norm, "confidence": confidence, "alpha": alpha,
            "probability": [probability(f, confidence, cfg) for f in fused]}


def recency(timestamps: list[float], now: float, half_life_days: float) -> list[float]:
    out = []
    for t in timestamps:
        if t == 0:
            out.append(0.5)
        else:
            age_days = max(now - t, 0.0) / 86400.0
            out.append(2.0 ** (-age_days / half_life_days))
    return out


def reputation(priors: list[float], helpful: list[int], unhelpful: list[int],
               default: float, strength: float) -> list[float]:
    out = []
    for p, h, u in zip(priors, helpful, unhelpful):
        p = p if p > 0 else default
        out.append((strength * p + h) / (strength + h + u))
    return out


def rank(c: Candidates, cfg: RankingConfig, k: int) -> dict[str, object]:
    """{'rows': full order, 'overall', 'factors' (per candidate), 'weights', ...}."""
    rows = rows_of(c)
    rel = relevancy(rows, cfg)
    weights = list(cfg.weights)
    if not cfg.apply_recency:
        weights[1] = 0.0
    total = sum(weights)
    weights = [w / total for w in weights]
    if cfg.apply_recency:
        rec = recency([r.timestamp for r in rows], cfg.now_unix, cfg.half_life_days)
    else:
        rec = [0.5] * len(rows)
    rich = [min(max(r.richness, 0.0), 1.0) for r in rows]
    rep = reputation([r.reputation_prior for r in rows], [r.helpful for r in rows],
                     [r.unhelpful for r in rows], cfg.default_reputation, cfg.prior_strength)
    factors = [list(f) for f in zip(rel["relevancy"], rec, rich, rep)]
    overall = [sum(w * f for w, f in zip(weights, fs)) for fs in factors]
    order = sorted(range(len(rows)), key=lambda i: (-overall[i], i))
    return {"order": order, "top": order[:k], "overall": overall, "factors": factors,
            "weights": weights, **rel}
