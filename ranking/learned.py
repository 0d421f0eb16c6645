"""The learned re-ranker applied: its calibrated output becomes the Relevancy of the top N.

    1. rank all candidates as today (fusion, 4R: one `blend`) and take the best N = model.top_n
    2. score = init_scale · fused + model(features)    (ranking/trees.py)
    3. relevancy = min-max of score over the N × today's confidence scaling (ranking/trees.py)
    4. the 4R blend, unchanged, over those N with that relevancy (`reblend`: the same float32
       operations as the blend, so the order is what ranking them again with the `rerank` column
       and rerank_weight 1 gives), then the rest in today's order below them

A candidate outside the top N keeps its place below. No model (None) = today's ranking.
`learned_ranking` is one pass of the ranking core (the fusion trace and the side factors of step
1 are reused in 4), and explains only the rows it returns; `learned_order` is its order alone
(what the training scores) — one path.

`served_features` are the features computed from what the stack serves today: the legs'
scores and ranks, the fused score and the 4R side factors. The per-field signals (title and
body term statistics, title vectors, positions, chunk position, length: SERVED_MISSING) are not
served by the store yet: they are NaN = missing, in training through the stack and in serving alike.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ranking.candidates import Candidates
from ranking.config import RankingConfig
from ranking.factors import CONFIDENCE_FLOOR, NEUTRAL_RECENCY, recency, relevancy, reputation, richness
from ranking.features import FEATURE_NAMES, leg_features
from ranking.rank import Ranked, blend, check_k, empty_ranked, explain, rank, reblend, top_k
from ranking.trees import RankerModel, learned_relevancy

_F32 = np.float32

#: Features the store does not serve yet (NaN = missing wherever the stack computes features).
SERVED_MISSING: tuple[str, ...] = (
    *(f"{kind}_{field}" for field in ("title", "body", "doc") for kind in ("bm25", "cover", "idf_cover")),
    "dense_title", "min_window", "phrase_body", "phrase_title", "chunk_position", "length",
)
_MISSING = [FEATURE_NAMES.index(name) for name in SERVED_MISSING]
_AT = {name: i for i, name in enumerate(FEATURE_NAMES)}

FeaturesOf = Callable[[NDArray[np.intp], NDArray[np.float32]], NDArray[np.float32]]
"""`features_of(rows, fused)`: the (len(rows), F) feature matrix of those rows (fused: every row's)."""


def fused_scores(c: Candidates, cfg: RankingConfig) -> NDArray[np.float32]:
    """Today's within-query fused score of every candidate (the residual's base)."""
    return relevancy(c, cfg)[1].fused


@dataclass(frozen=True, slots=True)
class Learned:
    """A query's learned ranking: the returned rows explained, and what the model saw."""

    ranked: Ranked                  # the rows returned, best first (Relevancy: the learned one in the top N)
    column: NDArray[np.float32]     # (n,) the `rerank` column: the learned Relevancy of the top N, NaN elsewhere
    top: NDArray[np.intp]           # (N,) the rows the model scored (today's top N)
    x: NDArray[np.float32]          # (N, F) their features
    fused: NDArray[np.float32]      # (N,) their fused scores (the residual's base)


def learned_ranking(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int,
                    features_of: FeaturesOf) -> Learned:
    """The best k rows of `c` with the top N re-scored by `model` (module docstring), explained."""
    check_k(k)
    n = len(c)
    column = np.full(n, np.nan, dtype=_F32)
    if n == 0:
        return Learned(empty_ranked(cfg), column, np.zeros(0, np.intp), np.zeros((0, len(FEATURE_NAMES)), _F32),
                       np.zeros(0, _F32))
    b = blend(c, cfg)
    base = top_k(b.overall, max(k, model.top_n))
    top = base[:model.top_n]
    fused = b.trace.fused
    x = features_of(top, fused)
    rel = learned_relevancy(model.score(x, fused[top]), b.trace.confidence, CONFIDENCE_FLOOR)
    overall = reblend(b, top, rel)
    again = top_k(overall, top.size)
    column[top] = rel
    keep = min(k, base.size)
    rows = np.concatenate([top[again], base[model.top_n:]])[:keep]
    m = min(keep, top.size)                           # the returned rows that were re-scored come first
    ranked = explain(c, cfg, b, rows, rel=np.concatenate([rel[again[:m]], b.relevancy[rows[m:]]]),
                     overall=np.concatenate([overall[again[:m]], b.overall[rows[m:]]]))
    return Learned(ranked=ranked, column=column, top=top, x=x, fused=fused[top])


def learned_order(c: Candidates, cfg: RankingConfig, model: RankerModel | None, k: int,
                  features_of: FeaturesOf) -> NDArray[np.intp]:
    """Rows of `c`, best first (at most k): today's ranking, its top N re-scored by `model`."""
    if model is None:
        return rank(c, cfg, k).rows
    return learned_ranking(c, cfg, model, k, features_of).ranked.rows


def served_features(c: Candidates, cfg: RankingConfig, query_terms: int, rows: NDArray[np.intp],
                    fused: NDArray[np.float32]) -> NDArray[np.float32]:
    """The features of candidates `rows` from what the stack serves (module docstring): the
    served columns filled, every other one NaN — what `features` gives with those fields unknown."""
    n, t = rows.shape[0], max(int(query_terms), 0)
    x = np.full((n, len(FEATURE_NAMES)), np.nan, dtype=_F32)
    dense, bm25 = c.dense[rows], c.bm25[rows]
    dense_rank, dense_gap = leg_features(dense, c.dense_rank[rows], relative=False)
    bm25_rank, bm25_gap = leg_features(bm25, c.bm25_rank[rows], relative=True)
    rec = (recency(c.timestamp[rows], cfg.now_unix, cfg.half_life_days) if cfg.apply_recency
           else np.full(n, NEUTRAL_RECENCY, dtype=_F32))
    rep = reputation(c.reputation_prior[rows], c.helpful[rows], c.unhelpful[rows], cfg.default_reputation,
                     cfg.prior_strength)
    for name, column in (("dense_doc", dense), ("fused", fused[rows]), ("dense_rank", dense_rank),
                         ("bm25_rank", bm25_rank), ("dense_gap", dense_gap), ("bm25_gap", bm25_gap),
                         ("richness", richness(c.richness[rows])), ("recency", rec), ("reputation", rep),
                         ("dense_absent", np.isnan(dense)), ("bm25_absent", np.isnan(bm25)),
                         ("query_terms", np.log2(1.0 + t))):
        x[:, _AT[name]] = column
    return x
