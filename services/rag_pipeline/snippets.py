"""Snippets: the window of an entry's text that best shows why it matched the query."""
from __future__ import annotations

import functools
import re

from shared.analysis import analyse, term_spans

SNIPPET_CHARS = 320
_WORD = re.compile(r"\w+", re.UNICODE)


@functools.lru_cache(maxsize=256)
def _snippet_terms(query: str) -> tuple[str, ...]:
    """The query's distinct lower-cased words of more than 2 chars."""
    return tuple({w.lower() for w in _WORD.findall(query) if len(w) > 2})


def _term_hits(text: str, terms: tuple[str, ...]) -> list[tuple[int, str]]:
    """(position, term) of every occurrence of the terms, case-insensitive, by position.
    str.find on the lower-cased text (C speed); a text whose lower-casing changes its length
    (rare Unicode) falls back to a case-insensitive regex so positions stay exact."""
    lower = text.lower()
    hits: list[tuple[int, str]] = []
    if len(lower) == len(text):
        for term in terms:
            pos = lower.find(term)
            while pos >= 0:
                hits.append((pos, term))
                pos = lower.find(term, pos + len(term))
    else:
        pattern = re.compile("|".join(map(re.escape, sorted(terms, key=len, reverse=True))), re.IGNORECASE)
        hits = [(m.start(), m.group().lower()) for m in pattern.finditer(text)]
    hits.sort()
    return hits


def make_snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """A window of at most `limit` chars around the densest cluster of distinct query words,
    starting at the beginning of its sentence when that is near; the text's opening when no
    query word occurs. Substring search, no tokenising (this runs for every returned result)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    start = 0
    terms = _snippet_terms(query)
    if terms:
        hits = _term_hits(text, terms)
        best_distinct = 0
        reach = limit * 3 // 4                   # the cluster must fit well inside the window
        for i, (pos, _) in enumerate(hits):
            seen = set()
            for j in range(i, len(hits)):
                if hits[j][0] - pos > reach:
                    break
                seen.add(hits[j][1])
            if len(seen) > best_distinct:
                best_distinct, start = len(seen), pos
        if start:
            sentence = max(text.rfind(". ", 0, start), text.rfind("? ", 0, start), text.rfind("! ", 0, start),
                           text.rfind("\n", 0, start))
            if sentence >= 0 and start - sentence <= limit // 3:
                start = sentence + 1
            else:                                # mid-sentence: begin at a word boundary
                space = text.rfind(" ", 0, start)
                start = space + 1 if space >= 0 and start - space <= 30 else start
    window = text[start:start + limit + 1].strip()
    if len(window) <= limit:
        return window
    end = max(window.rfind(". ", 0, limit), window.rfind("? ", 0, limit), window.rfind("! ", 0, limit))
    if end >= limit // 2:
        return window[:end + 1]
    return window[:limit].rsplit(" ", 1)[0] + "…"



def highlights(text: str, query: str) -> tuple[tuple[int, int], ...]:
    """Where the query's analysed terms (shared/analysis.py: the BM25 leg's lower-casing,
    stopwords and Snowball stems) match in `text`: the [start, end) ranges of the words whose
    analysed term is one of the query's, in Unicode code points (Python str indices), ascending:
    `text[start:end]` is a matched word ("batteries" for the query "battery")."""
    terms = _query_terms(query)
    if not terms or not text:
        return ()
    return tuple(dict.fromkeys((start, end) for start, end, term in term_spans(text, terms)))


@functools.lru_cache(maxsize=256)
def _query_terms(query: str) -> frozenset[str]:
    return frozenset(analyse(query))
