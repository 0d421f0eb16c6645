"""Text analysis for the keyword (BM25) leg: one analyser for documents and queries.

    text ─▶ lowercase ─▶ drop possessive 's ─▶ words (unicode letters/digits) ─▶ drop
    stopwords ─▶ Snowball English stem (PyStemmer) ─▶ terms

The KnowledgeStore stores the analysed terms space-separated in an FTS5 table (the durable
keyword store; its tokenizer `unicode61` only splits on the spaces again, never stems) and
scores them with the in-memory BM25 index built from those rows
(services/knowledge_store/embedded/keyword_index.py), so documents and queries meet in exactly
the same term space, and `query_terms` reported to callers are the terms searched.
LlmOrchestration's extractive answer scores sentences in the same term space
(services/llm_orchestration/sentences.py).

The stopword list is Lucene's English default (the list behind the published BEIR BM25
baselines) plus a few function words that carry no topical signal.
"""
from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections.abc import Iterable

import Stemmer

# Letters and digits only: `_` and punctuation separate words, as in FTS5's unicode61.
_WORD = re.compile(r"[^\W_]+")
_POSSESSIVE = re.compile(r"['’]s\b")

STOPWORDS: frozenset[str] = frozenset(
    # Lucene EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with "
    # a few more function words
    "s t been being do does did has have had were which who whom whose what when where why "
    "how its our your his her him she he we i you me my from than so can could would should "
    "may might also".split()
)

_MAX_TERM_CHARS = 64          # longer "words" are noise (base64, hashes)

# Names this analyser: its steps, stopwords and limits. Terms analysed elsewhere (a peer stack's
# stored terms) are used only when they name the same analyser; a change to any step must change it.
_STEPS = " ".join(sorted(STOPWORDS)) + f"|{_MAX_TERM_CHARS}|{_WORD.pattern}|{_POSSESSIVE.pattern}"
ANALYSER_ID = "snowball-english-1:" + hashlib.sha256(_STEPS.encode()).hexdigest()[:12]

_local = threading.local()   # Stemmer objects are not thread-safe; one per thread


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _local.stemmer = stemmer
    return stemmer


def words(text: str) -> list[str]:
    """Lower-cased words of `text` (letters and digits), before stopping and stemming."""
    return _WORD.findall(_POSSESSIVE.sub("", text.lower()))


def analyse(text: str) -> list[str]:
    """The BM25 terms of `text`, in order, duplicates kept (term frequency matters)."""
    return analyse_words(words(text))


def analyse_words(text_words: list[str]) -> list[str]:
    """`analyse` of a text whose `words` are at hand (a caller that needs both reads them once)."""
    kept = [w for w in text_words if w not in STOPWORDS and len(w) <= _MAX_TERM_CHARS]
    return _stemmer().stemWords(kept) if kept else []


def term_spans(text: str, only: frozenset[str] | None = None) -> list[tuple[int, int, str]]:
    """The analysed terms of each word of `text` with the word's place, as (start, end, term):
    `text[start:end]` is the word in Unicode code points (Python str indices). A word is
    analysed on its own, so its terms are `analyse(word)` (a rare letter whose lower case is
    two code points may make one word two terms). `only`: just the spans of these terms, found
    by the distinct words that have one (a word is a maximal run of `str.isalnum` characters,
    as `_WORD` matches), each located by `str.find`: C speed on texts most of whose words are
    not wanted."""
    if only is None:
        return [(*m.span(), t) for m in _WORD.finditer(text) for t in _word_terms(m.group())]
    spans = []
    for word in set(_WORD.findall(text)):
        terms = _word_terms(word)
        if only.isdisjoint(terms):
            continue
        size, pos = len(word), text.find(word)
        while pos >= 0:
            end = pos + size
            if (pos == 0 or not text[pos - 1].isalnum()) and (end == len(text) or not text[end].isalnum()):
                spans.extend((pos, end, t) for t in terms if t in only)
            pos = text.find(word, end)
    spans.sort(key=lambda span: span[0])         # stable: a word's terms stay in their order
    return spans


@functools.lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> tuple[str, ...]:
    """`analyse(word)`, cached: the words of snippets repeat across results and queries."""
    return tuple(analyse(word))


def query_terms(phrases: Iterable[str]) -> list[str]:
    """Unique analysed terms of all `phrases`, first occurrence first."""
    seen: dict[str, None] = {}
    for phrase in phrases:
        for term in analyse(phrase):
            seen.setdefault(term, None)
    return list(seen)
