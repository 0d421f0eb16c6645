"""What a query is: how much the dense leg should count for it (query-adaptive fusion), and whether
it asks for fresh information (temporal intent).

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

Temporal intent (`detect_temporal_intent`): does a query ask for fresh information? Regex rules, no model, no I/O.

The pipeline applies the recency factor when `detect_temporal_intent(query, now_year).has_intent`
(recency mode "auto"). A false positive quietly favours new documents on a timeless
question, so the rules prefer to miss a vague query over firing on generic scientific or
technical prose ("current density", "ocean currents", "weights are updated", "2000 patients",
"the last month of gestation", "over the past 50 years", "Q1 and Q3 quartiles").

Matching is case-insensitive, on whole words, with any run of spaces between words. A query
shows temporal intent when any of these cues occurs (each is reported, lower-cased and with
single spaces, in `TemporalIntent.cues`, in order of appearance):

 1. Recency words, always: latest, newest, recent, recently, most recent, currently,
    nowadays, today, today's, yesterday, right now, as of now, at the moment, at present,
    these days, up to date / up-to-date, what's new / whats new / what is new.
 2. "current" only in a phrase about time, never alone ("currents" never matches):
    most current, still current, and "current" followed by one of (`_CURRENT_NOUNS`):
    version(s), release(s), status, best practice(s), guidance, guideline(s),
    recommendation(s), policy/policies, price(s), pricing, events, affairs, news,
    situation, trend(s), landscape, leader(s), leadership, president, ceo, edition,
    standard(s), year, month, week, quarter, season, api, docs, documentation, roadmap,
    outlook, stable, lts. ("current density", "electric current", "current state of the
    system", "current models of convection" do not fire.)
 3. "new in" (what is new in a release), but not new in vitro / in vivo / in situ /
    in silico / in vacuo.
 4. "updated" only about a newer edition: recently / newly / just / last / latest updated,
    or "updated" followed by one of (`_UPDATED_NOUNS`): version(s), release(s), guidance,
    guideline(s), recommendation(s), docs, documentation, policy/policies, list, rules,
    edition, standard(s), requirements, pricing, prices, figures, numbers, statistics.
    ("the weights are updated by SGD" does not fire.)
 5. Relative periods, not followed by "of" ("the last year of the study" is not relative to
    now): this / last / past / previous / next + week, weekend, month, quarter, year;
    last / past / previous + a count (digits, few, several, couple (of), two … twelve) +
    days, weeks, months. Counts of years or decades are left out: "over the past 50 years"
    is ordinary scientific prose.
 6. Releases: newly / just + released, announced, launched, published; new release, new
    version, new features.
 7. Calendar references:
      - a 4-digit year Y with 1990 <= Y <= now_year + 1 that does not read as a quantity:
        not glued to a letter, digit, "." or "," before it ("v2024", "3.2000", "1,2000"),
        nor a ratio ("1/2000", "1:2000"; write dates as 2024-10 or October 2024);
        not preceded by = < > ~ ≈ ± × $ € £ ¥ # (spaces allowed, so "n = 2000" is out);
        not followed by a decimal or thousands separator and a digit ("2000.5", "2,000"),
        nor by a unit or count noun (`_QUANTITY_WORDS`: %, mg, nm, rpm, hz, s, years,
        patients, samples, cells, …);
      - halves and quarters next to a year: 2024-Q3, 2024 Q3, 2024Q3, Q3 2024, Q3-2024,
        Q3/2024, Q3'24, H1 2025, 2025-H2; fiscal years FY2024, FY 2024, FY24;
      - a bare Q1–Q4 only after this / last / next / previous / past, or before one of
        (`_QUARTER_CONTEXT`): earnings, results, report, revenue, sales, guidance, numbers,
        figures, update, roadmap, release, plan, planning, goals, okrs, targets, forecast;
      - first / second / third / fourth quarter of <year>; this / last / next + first /
        second / third / fourth quarter.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import math
import re

from shared.errors import InvalidArgument

YEAR_MIN = 1990

_CURRENT_NOUNS = (
    r"versions?|releases?|status|best\s+practices?|guidance|guidelines?"
    r"|recommendations?|polic(?:y|ies)|prices?|pricing|events|affairs|news|situation"
    r"|trends?|landscape|leaders?|leadership|president|ceo|edition|standards?|year|month"
    r"|week|quarter|season|api|docs|documentation|roadmap|outlook|stable|lts"
)

_UPDATED_NOUNS = (
    r"versions?|releases?|guidance|guidelines?|recommendations?|docs|documentation"
    r"|polic(?:y|ies)|list|rules|edition|standards?|requirements|pricing|prices|figures"
    r"|numbers|statistics"
)

_COUNT = (r"\d+|few|several|couple(?:\s+of)?|two|three|four|five|six|seven|eight|nine|ten"
          r"|eleven|twelve")

_QUARTER_CONTEXT = (
    r"earnings|results|report|revenue|sales|guidance|numbers|figures|update|roadmap"
    r"|release|plan|planning|goals|okrs|targets|forecast"
)

#: Words after a number that make it a quantity rather than a year.
_QUANTITY_WORDS = (
    r"%|percent|mg|g|kg|µg|ug|ml|l|nm|µm|um|mm|cm|m|km|k|rpm|hz|khz|mhz|ghz|w|kw|mw|v|mv"
    r"|j|kj|kcal|cal|ms|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?"
    r"|months?|years?|decades?|centuries|bp|kb|mb|gb|tb|x|times|fold|ppm|ppb|°c|°f|c|f"
    r"|patients|participants|subjects|samples|cells|people|persons|individuals|cases"
    r"|users|words|tokens|images|iterations|epochs|steps|genes|proteins|sequences|rows"
    r"|records|documents|items|points|trials|runs|species|sites|respondents|students"
    r"|children|adults|women|men|mice|rats|animals|households|units|meters|metres"
    r"|miles|feet|pages|dollars|euros|usd|eur|calories|molecules|atoms|particles"
    r"|deaths|births|infections|admissions|visits|doses|procedures|hospitali[sz]ations"
    r"|copies|reads|bases|nucleotides|residues"
)

_RULES: tuple[re.Pattern[str], ...] = tuple(re.compile(p, re.IGNORECASE) for p in (
    # 1. recency words
    r"\b(?:most\s+recent|recently|recent|latest|newest|currently|nowadays|today(?:'s|’s)?"
    r"|yesterday|right\s+now|as\s+of\s+now|at\s+the\s+moment|at\s+present|these\s+days"
    r"|up[\s-]to[\s-]date|what(?:'s|’s|s|\s+is)\s+new)\b",
    # 2. "current" about time
    r"\b(?:most|still)\s+current\b",
    rf"\bcurrent\s+(?:{_CURRENT_NOUNS})\b",
    # 3. new in (a release), not in vitro & co
    r"\bnew\s+in\b(?!\s+(?:vitro|vivo|situ|silico|vacuo)\b)",
    # 4. updated, about an edition
    r"\b(?:recently|newly|just|last|latest)\s+updated\b",
    rf"\bupdated\s+(?:{_UPDATED_NOUNS})\b",
    # 5. relative periods
    r"\b(?:this|last|past|previous|next)\s+(?:week|weekend|month|quarter|year)\b(?!\s+of\b)",
    rf"\b(?:last|past|previous)\s+(?:{_COUNT})\s+(?:days|weeks|months)\b(?!\s+of\b)",
    # 6. releases
    r"\b(?:newly|just)\s+(?:released|announced|launched|published)\b",
    r"\bnew\s+(?:release|version|features)\b",
    # 7. quarters and fiscal periods (years are checked in code: they need a range)
    r"\b(?:19|20)\d\d\s*[-/ ]?\s*[qh][1-4]\b",
    r"\b[qh][1-4]\s*[-/ ]?\s*(?:19|20)\d\d\b|\b[qh][1-4]['’]\d\d\b",
    r"\bfy\s?(?:(?:19|20)\d\d|\d\d)\b",
    rf"\b(?:this|last|next|previous|past)\s+q[1-4]\b|\bq[1-4]\s+(?:{_QUARTER_CONTEXT})\b",
    r"\b(?:first|second|third|fourth)\s+quarter\s+of\s+(?:19|20)\d\d\b",
    r"\b(?:this|last|next)\s+(?:first|second|third|fourth)\s+quarter\b",
))

_YEAR = re.compile(
    r"(?<![\w.,])(?<!\d[/:])"             # not glued to a word, a digit group or a ratio
    r"((?:19|20)\d\d)\b"
    r"(?![.,]\d)"                        # not 2000.5 or 2,000,000
    rf"(?!\s*(?:{_QUANTITY_WORDS})(?![\w]))",
    re.IGNORECASE,
)
_QUANTITY_BEFORE = re.compile(r"[=<>~≈±×$€£¥#]\s*$")


@dataclass(frozen=True, slots=True)
class TemporalIntent:
    """Whether a query asks for fresh information, and the cues that say so."""

    has_intent: bool
    cues: tuple[str, ...]   # matched text, lower-cased, in order of appearance, no repeats


def detect_temporal_intent(query: str, now_year: int) -> TemporalIntent:
    """Apply the rules of the module docstring to `query`.

    `now_year` (the caller's current year; the core reads no clock) bounds the years that count,
    up to now_year + 1.
    """
    if not isinstance(query, str):
        raise InvalidArgument("query", f"expected a string, got {type(query).__name__}")
    found: list[tuple[int, str]] = []
    for rule in _RULES:
        found.extend((m.start(), m.group(0)) for m in rule.finditer(query))
    for m in _YEAR.finditer(query):
        year = int(m.group(1))
        if YEAR_MIN <= year <= now_year + 1 and not _QUANTITY_BEFORE.search(query, 0, m.start()):
            found.append((m.start(), m.group(1)))
    cues: list[str] = []
    for _, text in sorted(found):
        cue = " ".join(text.lower().split())
        if cue not in cues:
            cues.append(cue)
    return TemporalIntent(has_intent=bool(cues), cues=tuple(cues))


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
