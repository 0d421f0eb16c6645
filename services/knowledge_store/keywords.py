"""The keyword leg's rules, the same for every backend: how a keyword query is read and the
BM25 constants it is scored with.

    keyword_phrases   the call's QueryPhrases (shared/records.py), checked (InvalidArgument names
                      the phrase's field)
    KeywordQuery      the analysed terms of the phrases (analysis.query_terms), and each quoted
                      phrase ("…") as (analysed term run, lower-cased word run): a quoted
                      phrase counts as one more BM25 term, held by the entries that have its
                      words in a row (`holds_phrase`); or weighted terms instead of the
                      phrases' own (feedback_expansion.py): each term's BM25 contribution ×
                      its weight (its idf × weight), a quoted phrase still weighing 1
    K1, B             Okapi BM25 (k1 = 1.2, b = 0.75), DEFAULT_BM25_WEIGHTS the title/body
                      weights of tf; `phrase_score` the contribution of a held phrase (tf 1)

Where the entries holding a phrase are found is the backend's: the embedded search asks FTS5
(embedded/search.py), the qdrant backend a full-text match (qdrant/search.py); both check the
candidates with `holds_phrase` and stop checking past PHRASE_EXACT_MAX candidates.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ranking.query_features import quoted_phrases
from services.knowledge_store import validation
from shared.analysis import analyse, query_terms, words
from shared.errors import InvalidArgument
from shared.records import QueryPhrases, query_phrases

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
