"""What a query is, and how much the dense leg should count for it (query-adaptive fusion).

A lexical lookup — an error code, a part number, a ticket id, a name, a quoted phrase — is
answered by the keyword leg: the embedding model has never seen "XK-4471" and maps it near any
other code, while BM25 finds the one entry that holds it. The features below say how much a
query looks like such a lookup, from its text and from how rare its keyword terms are in the
tenant (document frequencies reported by the keyword index); the dense weight of the `adaptive`
fusion follows from them.

Features (`QueryFeatures`):

    words        whitespace-separated tokens of the query
    quoted       a quoted phrase of two or more words ("…", “…”)
    identifiers  tokens shaped like identifiers: letters and digits mixed (E4471, IL-17A, v2),
                 inner `_` / `.` / `/` / `#` / `:` between word characters, or camelCase
    rarity       how rare the query's rarest matching term is: idf / idf of a term held by a
                 single entry, in [0, 1]; idf = ln(1 + (N - df + 0.5) / (df + 0.5)), the keyword
                 index's own. Terms no entry holds are left out (they match nothing). 0 when
                 no statistics are known.

Dense weight (`adaptive_dense_weight`), from the profile's dense weight `base` and its bounds
[lo, hi] = [base - ADAPTIVE_SPAN, base] within [0, 1] (`dense_weight_bounds`):

    lexical = max(short, quoted, brevity * identifier * rarity)
        short      = 1 for one or two words (any single word is a lookup), 0.5 for three, else 0
        quoted     = 1 with a quoted phrase, else 0
        identifier = 1 with an identifier-shaped token, else 0
        brevity    = 1 up to SHORT_WORDS words, falling linearly to 0 at LONG_WORDS
        (a rare identifier decides a short query; in a long statement it is one term among
        many, and the statement keeps `base`)
    alpha = base - lexical * (base - lo)

so a bare identifier, a single word or a quoted phrase gets the lower bound and a long
statement keeps `base`. Two rules were measured and left out (docs/BENCHMARKS.md): pushing long
questions toward the dense leg (up to base + 0.1 or + 0.3) cost the demo corpus its firmware-5.2
question, and SciFact has no questions to show a gain; letting a rare ordinary word pull a
short query (rarity ** 2 or ** 4) moved a natural query of the demo corpus, where in a small
tenant most words are held by one entry. Pure Python on a handful of numbers: deterministic,
microseconds.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.errors import InvalidArgument

#: How far below the profile's dense weight the adaptive fusion goes for a pure lookup.
ADAPTIVE_SPAN = 0.3
#: Queries up to this many words count as short (a lookup); from LONG_WORDS on as long.
SHORT_WORDS = 3
LONG_WORDS = 10

_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”')
_IDENT_MIXED = re.compile(r"(?=\w*[A-Za-z])(?=\w*\d)\w{2,}")            # letters and digits mixed
_IDENT_JOINED = re.compile(r"\w[_./#:]\w|\w-\w*\d|\d\w*-\w")              # inner joiners (X_Y, a.b, X-12)
_CAMEL = re.compile(r"[a-z][A-Z]")


@dataclass(frozen=True, slots=True)
class QueryFeatures:
    """See the module docstring."""

    words: int = 0
    quoted: bool = False
    identifiers: int = 0
    rarity: float = 0.0

    def describe(self) -> str:
        """One line for explanations, e.g. `words=2 quoted=0 identifiers=1 rarity=0.93`."""
        return f"words={self.words} quoted={int(self.quoted)} identifiers={self.identifiers} rarity={self.rarity:.2f}"


def quoted_phrases(text: str) -> list[str]:
    """The quoted phrases of `text` ("…" or “…”) of two or more words, in order."""
    return [phrase for a, b in _QUOTED.findall(text) if len((phrase := (a or b).strip()).split()) >= 2]


def bm25_idf(df: int, n: int) -> float:
    """The keyword index's idf: ln(1 + (n - df + 0.5) / (df + 0.5)), never negative."""
    return math.log1p((n - df + 0.5) / (df + 0.5))


def query_features(text: str, document_frequency: Sequence[int] = (), entries: int = 0) -> QueryFeatures:
    """Features of `text`, with the document frequencies of its analysed keyword terms among
    `entries` live entries (both from the keyword index; leave them out when unknown)."""
    tokens = text.split()
    quoted = bool(quoted_phrases(text))
    identifiers = sum(1 for t in tokens if _is_identifier(t))
    rarity = 0.0
    if entries > 1:
        top = bm25_idf(1, entries)
        held = [df for df in document_frequency if df > 0]
        if held and top > 0.0:
            rarity = min(1.0, bm25_idf(min(held), entries) / top)
    return QueryFeatures(words=len(tokens), quoted=quoted, identifiers=identifiers, rarity=rarity)


def _is_identifier(token: str) -> bool:
    token = token.strip("\"'“”‘’()[]{}<>,;!?")
    if token.endswith(".") and "." not in token[:-1]:
        token = token[:-1]                      # a sentence's full stop
    if len(token) < 2:
        return False
    return bool(_IDENT_MIXED.fullmatch(token) or _IDENT_JOINED.search(token) or _CAMEL.search(token))


def dense_weight_bounds(base: float, span: float = ADAPTIVE_SPAN) -> tuple[float, float]:
    """[lo, hi] of the adaptive dense weight for the profile's `base`: [base - span, base], within [0, 1]."""
    return max(0.0, base - span), base


def lexical_pressure(f: QueryFeatures) -> float:
    """How much `f` looks like a lexical lookup, in [0, 1] (module docstring)."""
    short = 1.0 if f.words <= 2 else 0.5 if f.words == 3 else 0.0
    brevity = min(1.0, max(0.0, (LONG_WORDS - max(f.words, SHORT_WORDS)) / (LONG_WORDS - SHORT_WORDS)))
    identifier = 1.0 if f.identifiers else 0.0
    return max(short if f.words else 0.0, 1.0 if f.quoted else 0.0, brevity * identifier * f.rarity)


def adaptive_dense_weight(f: QueryFeatures, base: float, bounds: tuple[float, float]) -> float:
    """The dense weight for a query with features `f` (module docstring), within `bounds`."""
    lo, hi = bounds
    if not 0.0 <= lo <= base <= hi <= 1.0:
        raise InvalidArgument("dense_weight", f"expected 0 <= lo <= base <= hi <= 1, got lo={lo}, base={base}, "
                                              f"hi={hi}")
    alpha = base - lexical_pressure(f) * (base - lo)
    return min(hi, max(lo, alpha))
