"""Keyword feedback expansion (RM3, Lavrenko & Croft's relevance model, interpolated).

A candidate setting chosen per tenant by the learning cross-validation, never on for all: on
SciFact-like corpora it loses, on corpora with many relevant documents per query it gains.

Over the `FEEDBACK_DOCS` best keyword hits d with BM25 scores s_d (the original query):

    P(w | R)  = Σ_d (s_d / Σ s) · tf(w, d) / |d|          the relevance model
    keep the FEEDBACK_TERMS terms of highest P(w | R) (ties → lower term id), renormalise
    weight(w) = λ · P(w | Q) + (1 − λ) · P(w | R)          λ = ORIGINAL_WEIGHT, P(w | Q) = 1 / t

then the weights are scaled so that they sum to t (the original query's total weight, so BM25
magnitudes, and with them the confidence calibration, stay comparable). The keyword leg is
searched again with these weighted terms: BM25 = Σ_w weight(w) · bm25_w.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FEEDBACK_DOCS = 10
FEEDBACK_TERMS = 10
ORIGINAL_WEIGHT = 0.5


def rm3(query_ids: NDArray[np.intp], doc_tf: NDArray[np.floating], doc_len: NDArray[np.floating],
        doc_scores: NDArray[np.floating], term_ids: NDArray[np.intp], *, terms: int = FEEDBACK_TERMS,
        original_weight: float = ORIGINAL_WEIGHT) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """Expanded (term ids, weights) from k feedback documents given as a dense (k, v) term
    frequency block over `term_ids` (v distinct ids), their lengths and scores (module docstring)."""
    query_ids = np.asarray(query_ids, dtype=np.intp)
    t = query_ids.shape[0]
    if t == 0:
        return query_ids, np.zeros(0)
    weights: dict[int, float] = {int(q): original_weight / t for q in query_ids}
    scores = np.maximum(np.asarray(doc_scores, dtype=np.float64), 0.0)
    if scores.size and scores.sum() > 0 and term_ids.size:
        lengths = np.maximum(np.asarray(doc_len, dtype=np.float64), 1.0)
        p_rel = (scores / scores.sum()) @ (np.asarray(doc_tf, dtype=np.float64) / lengths[:, None])
        order = np.lexsort((term_ids, -p_rel))[:terms]
        kept = p_rel[order]
        if kept.sum() > 0:
            for term, p in zip(term_ids[order].tolist(), (kept / kept.sum()).tolist()):
                weights[term] = weights.get(term, 0.0) + (1.0 - original_weight) * p
    else:
        weights = {int(q): 1.0 / t for q in query_ids}
    ids = np.asarray(list(weights), dtype=np.intp)
    w = np.asarray(list(weights.values()), dtype=np.float64)
    return ids, w * (t / w.sum())
