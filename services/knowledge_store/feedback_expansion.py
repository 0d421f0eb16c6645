"""Keyword feedback expansion (RM3) served by the store's keyword leg, on any backend.

A request's `feedback_expansion` ("" = off, or a value of ranking.profile.FEEDBACK_EXPANSIONS;
anything else is refused naming the field) asks the keyword leg to search an expanded query:

    1. the keyword leg runs once with the query's own terms: its FEEDBACK_DOCS best hits among
       those the call may see (the request's filters, already scoped to the caller, applied)
    2. their stored analysed terms (`StoreBackend.entry_terms`: title and body term streams;
       a document is title + body, its length their count) make the (k, v) tf block, and the
       query's own terms that a live entry holds (the keyword statistics) are the original query
    3. `ranking.feedback.rm3` over that block, the hits' lengths and first-pass BM25 scores gives
       the weighted expanded terms (the query's own first, then the added ones) — the lab's
       definition (benchmarks/field_index.py `expanded`); equal P(w|R) keep the alphabetically
       first term (the lab: the lower corpus term id, which a store has no notion of)
    4. the keyword leg runs again with those weighted terms (each term's BM25 contribution ×
       its weight; the quoted phrases still count once, unweighted), and a hybrid call's score
       completion of the vector leg's rows uses the same weighted terms, so both legs' BM25
       columns agree

No hit, or no held query term: the unexpanded leg stands (`weights` None). The keyword leg then
reports the expanded terms as its query terms (FilterSearchResponse.query_terms,
VectorSearchResponse.keyword_query_terms); the completion's keyword statistics stay those of the
query's own terms (they say how rare the query is, for the adaptive fusion, as in the lab).

Cost: one more keyword search (k = FEEDBACK_DOCS), one statistics read and one read of ten
entries' terms before the expanded search; a separate vector call with completion
(`complete_scores` without `include_keyword_leg`) computes the same expansion again
(deterministic over the same data), so a hybrid query is cheapest through the combined call.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ranking.feedback import FEEDBACK_DOCS, rm3
from services.knowledge_store import validation
from services.knowledge_store.keywords import is_listing, keyword_phrases
from shared.records import Keywords, SearchFilters

__all__ = ["expanded_terms", "relevance_model"]


def relevance_model(query: Sequence[str], docs: Sequence[tuple[str, str]],
                    scores: Sequence[float]) -> dict[str, float] | None:
    """The weighted expanded terms (original query terms first) from feedback documents
    `docs` ((title terms, body terms), space separated, as stored) with their first-pass BM25
    `scores`, for the query's own held terms `query`; None when there is nothing to expand."""
    query = list(dict.fromkeys(query))
    if not query or not docs:
        return None
    counts = [Counter(title.split() + body.split()) for title, body in docs]
    doc_terms = sorted(set().union(*counts))
    vocab = {t: i for i, t in enumerate(sorted(set(doc_terms).union(query)))}
    term_ids = np.asarray([vocab[t] for t in doc_terms], dtype=np.intp)
    column = {t: j for j, t in enumerate(doc_terms)}
    tf = np.zeros((len(docs), len(doc_terms)), dtype=np.float64)
    for i, c in enumerate(counts):
        for term, n in c.items():
            tf[i, column[term]] = n
    lengths = np.asarray([sum(c.values()) for c in counts], dtype=np.float64)
    ids, weights = rm3(np.asarray([vocab[t] for t in query], dtype=np.intp), tf, lengths,
                       np.asarray(scores, dtype=np.float64), term_ids)
    names = {i: t for t, i in vocab.items()}
    return {names[int(i)]: float(w) for i, w in zip(ids, weights)}


async def expanded_terms(store: Any, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                         filters: SearchFilters, feedback_expansion: str) -> dict[str, float] | None:
    """The weighted terms the keyword leg searches for `feedback_expansion` ("" → None: the
    query's own terms, unweighted), steps 1–3 of the module docstring. `store`: a
    backend.StoreBackend (which imports this module); `filters` are the call's, already scoped
    to the caller."""
    validation.feedback_expansion(feedback_expansion)
    if not feedback_expansion:
        return None
    phrases = keyword_phrases(keywords, extra_keywords)
    if is_listing(phrases):
        return None
    first, _ = await store.keyword(tenant_id, phrases, (), FEEDBACK_DOCS, filters)
    if not len(first):
        return None
    stats = (await store.score_texts(tenant_id, phrases, (), [])).keyword_stats
    held = [t for t, df in zip(stats.terms, stats.document_frequency) if df > 0]
    found = await store.entry_terms(tenant_id, list(first.entry_ids))
    kept = [i for i, e in enumerate(first.entry_ids) if e in found]
    return relevance_model(held, [found[first.entry_ids[i]] for i in kept], first.scores[kept].tolist())
