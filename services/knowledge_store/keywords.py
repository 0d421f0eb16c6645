"""The keyword leg's rules, the same for every backend: how a keyword query is read and the
BM25 constants it is scored with.

    keyword_phrases   the call's QueryPhrases (shared/records.py), checked (InvalidArgument names
                      the phrase's field)
    KeywordQuery      the analysed terms of the phrases (analysis.query_terms), and each quoted
                      phrase ("…") as (analysed term run, lower-cased word run): a quoted
                      phrase counts as one more BM25 term, held by the entries that have its
                      words in a row (`holds_phrase`); or weighted terms instead of the
                      phrases' own (feedback expansion, below): each term's BM25 contribution ×
                      its weight (its idf × weight), a quoted phrase still weighing 1
    K1, B             Okapi BM25 (k1 = 1.2, b = 0.75), DEFAULT_BM25_WEIGHTS the title/body
                      weights of tf; `phrase_score` the contribution of a held phrase (tf 1)

Where the entries holding a phrase are found is the backend's: the embedded search asks FTS5
(embedded/search.py), the qdrant backend a full-text match (qdrant/search.py); both check the
candidates with `holds_phrase` and stop checking past PHRASE_EXACT_MAX candidates.

Keyword feedback expansion:

Keyword feedback expansion (RM3) served by the store's keyword leg, on any backend.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ranking.feedback import FEEDBACK_DOCS, rm3
from ranking.query_features import quoted_phrases
from services.knowledge_store import validation
from shared.analysis import analyse, query_terms, words
from shared.errors import InvalidArgument
from shared.records import Keywords, query_phrases, QueryPhrases, SearchFilters

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


K1 = 1.2
B = 0.75

# Title/heading column vs body column weights of the keyword BM25 (embedded/keyword_index.py,
# qdrant/bm25.py); tuned on SciFact (benchmarks/bm25_scifact.py).
DEFAULT_BM25_WEIGHTS = (1.0, 1.0)

PHRASE_EXACT_MAX = 1_000         # entries whose text a quoted phrase is checked against, at most


def keyword_phrases(keywords: str | QueryPhrases, extra_keywords: Sequence[str] = ()) -> QueryPhrases:
    """The phrases of a keyword call (`QueryPhrases`, or the wire's keywords + extra_keywords),
    checked (InvalidArgument names the phrase's field)."""
    phrases = query_phrases(keywords, extra_keywords)
    if len(phrases.extra) > validation.MAX_EXTRA_KEYWORDS:
        raise InvalidArgument("extra_keywords", f"{len(phrases.extra)} phrases, at most "
                                                f"{validation.MAX_EXTRA_KEYWORDS} accepted")
    for i, phrase in enumerate(phrases):
        if len(phrase) > validation.MAX_KEYWORD_CHARS:
            raise InvalidArgument(QueryPhrases.field_name(i), f"has {len(phrase)} characters, at most "
                                                              f"{validation.MAX_KEYWORD_CHARS} accepted")
    return phrases


def is_listing(phrases: Sequence[str]) -> bool:
    """No keywords at all: the keyword leg answers a metadata-only listing, newest first."""
    return not any(p.strip() for p in phrases)


@dataclass(frozen=True, slots=True)
class KeywordQuery:
    """A keyword query as the index scores it: analysed terms (with their weights, None = each
    1), and its quoted phrases as (analysed term run, lower-cased word run)."""
    terms: list[str]
    phrases: list[tuple[tuple[str, ...], str]]
    weights: tuple[float, ...] | None = None

    @classmethod
    def of(cls, phrases: Sequence[str], term_weights: Mapping[str, float] | None = None) -> KeywordQuery:
        """The phrases' query; with `term_weights` (analysed term -> weight: an expanded query),
        those terms are searched instead of the phrases' own, the quoted phrases kept."""
        runs = {tuple(analyse(q)): " ".join(words(q)) for p in phrases for q in quoted_phrases(p)}
        held = [(run, text) for run, text in runs.items() if len(run) >= 2]
        if term_weights is None:
            return cls(query_terms(list(phrases)), held)
        return cls(list(term_weights), held, tuple(float(w) for w in term_weights.values()))


def holds_phrase(body: str, phrase_words: str) -> bool:
    """Whether `body` has the phrase's words (its lower-cased word run) in a row."""
    return f" {phrase_words} " in " " + " ".join(words(body)) + " "


def has_run(terms: Sequence[str], run: tuple[str, ...]) -> bool:
    """Whether the analysed `terms` hold `run` in a row."""
    k = len(run)
    return any(tuple(terms[i:i + k]) == run for i in range(len(terms) - k + 1))


def phrase_score(idf: float, dl: float, avgdl: float) -> float:
    """A held phrase's BM25 contribution to one entry: tf 1, the phrase's idf, the entry's
    length `dl` against the average `avgdl`."""
    norm = K1 * (1.0 - B + B * (dl / avgdl))
    return idf * (K1 + 1.0) / (1.0 + norm)


__all__ = ["expanded_terms", "relevance_model"]
