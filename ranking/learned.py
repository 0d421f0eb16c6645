"""The learned re-ranker applied: its calibrated output becomes the Relevancy of the top N.

    1. rank all candidates as today (fusion, 4R) and take the best N = model.top_n
    2. score = init_scale · fused + model(features)    (ranking/trees.py)
    3. relevancy = min-max of score over the N × today's confidence scaling (ranking/trees.py)
    4. the 4R blend, unchanged, over those N with that relevancy (the Candidates `rerank` column
       with rerank_weight 1), then the rest in today's order below them

A candidate outside the top N keeps its place below. No model (None) = today's ranking.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ranking.candidates import Candidates
from ranking.config import RankingConfig
from ranking.factors import CONFIDENCE_FLOOR, relevancy
from ranking.rank import rank
from ranking.trees import RankerModel, learned_relevancy


def fused_scores(c: Candidates, cfg: RankingConfig) -> NDArray[np.float32]:
    """Today's within-query fused score of every candidate (the residual's base)."""
    return relevancy(c, cfg)[1].fused


def subset(c: Candidates, rows: NDArray[np.intp], rerank: NDArray[np.float32] | None = None) -> Candidates:
    columns = {name: getattr(c, name)[rows] for name in Candidates.__dataclass_fields__}
    if rerank is not None:
        columns["rerank"] = rerank.astype(np.float32)
    return Candidates(**columns)


def learned_order(c: Candidates, cfg: RankingConfig, model: RankerModel | None, k: int,
                  features_of) -> NDArray[np.intp]:
    """Rows of `c`, best first (at most k): today's ranking, its top N re-scored by `model`.
    `features_of(rows, fused)` gives the (len(rows), F) feature matrix of those rows."""
    base = rank(c, cfg, max(k, model.top_n if model else k)).rows
    if model is None or base.size == 0:
        return base[:k]
    top = base[:model.top_n]
    trace = relevancy(c, cfg)[1]
    x = features_of(top, trace.fused)
    rel = learned_relevancy(model.score(x, trace.fused[top]), trace.confidence, CONFIDENCE_FLOOR)
    again = rank(subset(c, top, rel), replace(cfg, rerank_weight=1.0), top.size).rows
    return np.concatenate([top[again], base[model.top_n:]])[:k]
