"""The learned re-ranker applied: its calibrated output becomes the Relevancy of the top N.

    1. rank all candidates as today (fusion, 4R) and take the best N = model.top_n
    2. score = init_scale · fused + model(features)    (ranking/trees.py)
    3. relevancy = min-max of score over the N × today's confidence scaling (ranking/trees.py)
    4. the 4R blend, unchanged, over those N with that relevancy (the Candidates `rerank` column
       with rerank_weight 1), then the rest in today's order below them

A candidate outside the top N keeps its place below. No model (None) = today's ranking.
`learned_rerank` gives the order and the rerank column (what the RAGPipeline serves, explained
by `ranked_in_order`); `learned_order` the order alone (what the training scores) — one path.

`served_features` are the features computed from what the stack serves today: the legs'
scores and ranks, the fused score and the 4R side factors. The per-field signals (title and
body term statistics, title vectors, positions, chunk position, length: SERVED_MISSING) are not
served by the store yet: they are NaN = missing, in training through the stack and in serving alike.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ranking.candidates import Candidates
from ranking.config import RankingConfig
from ranking.factors import CONFIDENCE_FLOOR, NEUTRAL_RECENCY, recency, relevancy, reputation, richness
from ranking.features import FEATURE_NAMES, FeatureInputs, FieldTerms, features
from ranking.rank import Ranked, rank
from ranking.trees import RankerModel, learned_relevancy

_F32 = np.float32

#: Features the store does not serve yet (NaN = missing wherever the stack computes features).
SERVED_MISSING: tuple[str, ...] = (
    *(f"{kind}_{field}" for field in ("title", "body", "doc") for kind in ("bm25", "cover", "idf_cover")),
    "dense_title", "min_window", "phrase_body", "phrase_title", "chunk_position", "length",
)
_MISSING = [FEATURE_NAMES.index(name) for name in SERVED_MISSING]


def fused_scores(c: Candidates, cfg: RankingConfig) -> NDArray[np.float32]:
    """Today's within-query fused score of every candidate (the residual's base)."""
    return relevancy(c, cfg)[1].fused


def subset(c: Candidates, rows: NDArray[np.intp], rerank: NDArray[np.float32] | None = None) -> Candidates:
    columns = {name: getattr(c, name)[rows] for name in Candidates.__dataclass_fields__}
    if rerank is not None:
        columns["rerank"] = rerank.astype(np.float32)
    return Candidates(**columns)


def learned_rerank(c: Candidates, cfg: RankingConfig, model: RankerModel | None, k: int,
                   features_of) -> tuple[NDArray[np.intp], NDArray[np.float32]]:
    """(rows of `c` best first, at most k; the rerank column: the learned Relevancy of the top N,
    NaN elsewhere). `features_of(rows, fused)` gives the (len(rows), F) feature matrix of those rows."""
    column = np.full(len(c), np.nan, dtype=_F32)
    base = rank(c, cfg, max(k, model.top_n if model else k)).rows
    if model is None or base.size == 0:
        return base[:k], column
    top = base[:model.top_n]
    trace = relevancy(c, cfg)[1]
    x = features_of(top, trace.fused)
    rel = learned_relevancy(model.score(x, trace.fused[top]), trace.confidence, CONFIDENCE_FLOOR)
    again = rank(subset(c, top, rel), replace(cfg, rerank_weight=1.0), top.size).rows
    column[top] = rel
    return np.concatenate([top[again], base[model.top_n:]])[:k], column


def learned_order(c: Candidates, cfg: RankingConfig, model: RankerModel | None, k: int,
                  features_of) -> NDArray[np.intp]:
    """Rows of `c`, best first (at most k): today's ranking, its top N re-scored by `model`."""
    return learned_rerank(c, cfg, model, k, features_of)[0]


def ranked_in_order(c: Candidates, cfg: RankingConfig, rows: NDArray[np.intp]) -> Ranked:
    """The `Ranked` of `rows` in that order (the 4R factors and contributions of each), for
    candidates whose `rerank` column holds the learned Relevancy (rerank_weight 1)."""
    everything = rank(c, replace(cfg, rerank_weight=1.0), len(c))
    at = np.empty(len(c), dtype=np.intp)
    at[everything.rows] = np.arange(everything.rows.size)
    pick = at[rows]
    return replace(everything, rows=everything.rows[pick], overall=everything.overall[pick],
                   factors=everything.factors[pick], contributions=everything.contributions[pick],
                   dense_norm=everything.dense_norm[pick], bm25_norm=everything.bm25_norm[pick],
                   probability=everything.probability[pick] if everything.probability.size else everything.probability)


def served_features(c: Candidates, cfg: RankingConfig, query_terms: int, rows: NDArray[np.intp],
                    fused: NDArray[np.float32]) -> NDArray[np.float32]:
    """The features of candidates `rows` from what the stack serves (module docstring)."""
    n, t = rows.shape[0], max(int(query_terms), 0)
    nan = np.full(n, np.nan, dtype=_F32)
    unknown = FieldTerms(tf=np.full((n, t), np.nan, dtype=_F32), length=nan, avg_length=1.0)
    no_positions = np.full((n, 0), -1, dtype=np.int32)
    rec = (recency(c.timestamp[rows], cfg.now_unix, cfg.half_life_days) if cfg.apply_recency
           else np.full(n, NEUTRAL_RECENCY, dtype=_F32))
    rep = reputation(c.reputation_prior[rows], c.helpful[rows], c.unhelpful[rows], cfg.default_reputation,
                     cfg.prior_strength)
    x = features(FeatureInputs(
        idf=np.ones(t, dtype=_F32), title=unknown, body=unknown, doc=unknown, body_positions=no_positions,
        title_positions=no_positions, dense_title=nan, dense=c.dense[rows], bm25=c.bm25[rows],
        dense_rank=c.dense_rank[rows], bm25_rank=c.bm25_rank[rows], fused=fused[rows].astype(_F32),
        chunk_position=nan, richness=richness(c.richness[rows]), recency=rec.astype(_F32), reputation=rep.astype(_F32)))
    x[:, _MISSING] = np.nan
    return x
