"""The sentences an extractive answer is chosen from, and their BM25 scores against the query.

A passage is read line by line, as the markdown and plain text the KnowledgeStore keeps:

    # Heading                   not quoted; the section context of what follows
    | a | b |   (table)         every body row is a unit, shown "a | b"; scored with the
                                header ("Zone: Mixed zone; Maximum speed: 1.2 m/s")
    - item / 1. item            a list item; split into sentences like a paragraph
    ```code```                  joined to the sentence before it when that ends with ":"
                                ("Run a soft reset: pallasctl bms reset --soft"), else
                                every code line is a unit
    [09:12] name: … / **Reply (x):** …   a chat line / a forum reply starts a new paragraph
    paragraph lines             joined (wrapped text) and split into sentences

Each unit keeps its passage id (the citation), its place in reading order, what is shown
(`text`, markdown emphasis removed, at most `UNIT_MAX_CHARS`) and what is scored (`context`:
the passage title and section heading before the text, so "Before you start: The robot must
run 4.2 or later" carries the section's meaning).

`bm25_scores` scores the units against the query as documents of their own (Okapi BM25,
k1 1.2, b 0.75; IDF over the units), with the KnowledgeStore's term analysis
(`shared.analysis`: stopwords out, Snowball English stems).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shared.analysis import analyse as terms      # the BM25 terms of a text (shared with the store)

ELLIPSIS = "…"
UNIT_MAX_CHARS = 300          # a longer sentence is shown cut (truncate_text)
UNIT_MIN_CHARS = 12           # shorter units ("3.", "Thanks,") only when nothing else is left
CONTEXT_MAX_CHARS = 1_000     # scored text per unit
MAX_UNITS = 512               # units considered per request, in passage order
BM25_K1 = 1.2
BM25_B = 0.75

_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*$")
_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+(.*)$")
_TABLE_RULE = re.compile(r"^\|?[\s:|-]+\|?$")
_FENCE = re.compile(r"^(```|~~~)")
_NEW_SPEAKER = re.compile(r"^(?:\[\d{1,2}:\d{2}(?::\d{2})?\]|\*\*[^*\n]{1,80}:?\*\*:?|[A-Z][\w .-]{0,40}:\s)")
_EMPHASIS = re.compile(r"\*\*(.+?)\*\*|__(.+?)__")


@dataclass(frozen=True, slots=True)
class Unit:
    passage_id: str
    passage: int          # index of the passage in the request (reading order)
    position: int         # index of the unit within its passage
    text: str             # what the answer quotes
    context: str          # what is embedded: title, section heading, the text (a table row with its header)
    terms_text: str       # what BM25 scores: the text (a table row with its header)
    kind: str             # "sentence" | "item" | "row" | "code" | "qa" (a question and its answer)


def split_sentences(text: str) -> list[str]:
    parts = (" ".join(part.split()) for part in _SENTENCE_END.split(text))
    return [part for part in parts if part]


def _plain(text: str) -> str:
    """Markdown emphasis markers removed (`**4.2 or later**` → `4.2 or later`), whitespace collapsed."""
    return " ".join(_EMPHASIS.sub(lambda m: m.group(1) or m.group(2), text).split())


def _cells(line: str) -> list[str]:
    return [_plain(cell) for cell in line.strip().strip("|").split("|")]


class _Reader:
    """Turns one passage's lines into units (see the module docstring)."""

    def __init__(self, title: str) -> None:
        self.title = title.strip()
        self.heading = ""
        self.units: list[list[str]] = []              # [text, context prefix, scored text, kind]
        self.paragraph: list[str] = []
        self.paragraph_kind = "sentence"
        self.header: list[str] | None = None          # the current table's header cells
        self.code: list[str] | None = None            # lines of an open code fence

    def _prefix(self) -> str:
        parts = [p for p in (self.title, self.heading) if p]
        return ": ".join(parts) + (": " if parts else "")

    def add(self, text: str, kind: str, scored: str = "") -> None:
        text = text.strip()
        if not text:
            return
        last = self.units[-1] if self.units else None
        if last is not None and last[0].endswith("?") and not text.endswith("?") and kind != "row":
            # A question followed by its answer (FAQ, forum): one unit, so the answer is
            # scored with the question it answers and never shown without it.
            last[0], last[2], last[3] = f"{last[0]} {text}", f"{last[2]} {scored or text}", "qa"
            return
        self.units.append([text, self._prefix(), scored or text, kind])

    def flush(self) -> None:
        if self.paragraph:
            for sentence in split_sentences(_plain(" ".join(self.paragraph))):
                self.add(sentence, self.paragraph_kind)
        self.paragraph, self.paragraph_kind = [], "sentence"

    def close_code(self) -> None:
        lines = [" ".join(line.split()) for line in self.code or () if line.strip()]
        self.code = None
        if not lines:
            return
        if self.units and self.units[-1][0].endswith(":"):
            joined = "; ".join(lines)
            self.units[-1][0] += f" {joined}"
            self.units[-1][2] += f" {joined}"
            return
        for line in lines:
            self.add(line, "code")

    def line(self, raw: str, next_line: str = "") -> None:
        stripped = raw.strip()
        if self.code is not None:
            if _FENCE.match(stripped):
                self.close_code()
            else:
                self.code.append(stripped)
            return
        if _FENCE.match(stripped):
            self.flush()
            self.code = []
            return
        if not stripped:
            self.flush()
            self.header = None
            return
        if stripped.startswith("|"):
            self.flush()
            if _TABLE_RULE.match(stripped):
                return
            cells = _cells(stripped)
            if _TABLE_RULE.match(next_line.strip()) and next_line.strip().startswith("|"):
                self.header = cells           # a header row: the rule line follows it
                return
            header = self.header or []
            scored = ("; ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells))
                      if len(header) == len(cells) else " ".join(cells))
            self.add(" | ".join(cells), "row", scored)
            return
        self.header = None
        heading = _HEADING.match(stripped)
        if heading:
            self.flush()
            self.heading = _plain(heading.group(1))
            return
        item = _LIST_ITEM.match(stripped)
        if item:
            self.flush()
            self.paragraph, self.paragraph_kind = [item.group(1)], "item"
            return
        if self.paragraph and _NEW_SPEAKER.match(stripped):
            self.flush()
        self.paragraph.append(stripped)

    def finish(self) -> list[list[str]]:
        if self.code is not None:
            self.close_code()
        self.flush()
        return self.units


def answer_units(passages: Sequence[tuple[str, str, str]]) -> list[Unit]:
    """The units of (id, title, text) passages in reading order, at most `MAX_UNITS`; units
    shorter than `UNIT_MIN_CHARS` only if there is nothing longer."""

    kept: list[Unit] = []
    short: list[Unit] = []
    for index, (pid, title, text) in enumerate(passages):
        reader = _Reader(title)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            reader.line(line, lines[i + 1] if i + 1 < len(lines) else "")
        for position, (shown, prefix, scored, kind) in enumerate(reader.finish()):
            shown, _ = truncate_text(shown, UNIT_MAX_CHARS)
            unit = Unit(pid, index, position, shown, (prefix + scored)[:CONTEXT_MAX_CHARS],
                        scored[:CONTEXT_MAX_CHARS], kind)
            (kept if len(shown) >= UNIT_MIN_CHARS else short).append(unit)
        if len(kept) >= MAX_UNITS:
            break
    return (kept or short)[:MAX_UNITS]


def bm25_scores(query: str, documents: Sequence[str]) -> NDArray[np.float32]:
    """Okapi BM25 of `query` against each of `documents`, IDF and length norm over `documents`."""
    n = len(documents)
    out = np.zeros(n, dtype=np.float32)
    query_terms = list(dict.fromkeys(terms(query)))
    if not n or not query_terms:
        return out
    counts = [Counter(terms(doc)) for doc in documents]
    lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
    average = float(lengths.mean()) or 1.0
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / average)
    for term in query_terms:
        tf = np.array([c.get(term, 0) for c in counts], dtype=np.float64)
        df = int(np.count_nonzero(tf))
        if not df:
            continue
        idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
        out += (idf * tf * (BM25_K1 + 1.0) / (tf + norm)).astype(np.float32)
    return out


def truncate_text(text: str, max_chars: int) -> tuple[str, bool]:
    """`text` cut to at most `max_chars`: at a sentence end if one is in the back half of the
    window, else at a word boundary with "…". Returns (text, was_truncated)."""
    text = text.strip()
    if len(text) <= max_chars:
        return text, False
    window = text[:max_chars]
    if window[-1] in ".!?" and text[max_chars].isspace():
        return window, True
    ends = [window.rfind(mark) for mark in (". ", "! ", "? ", ".\n", "!\n", "?\n")]
    cut = max(ends)
    if cut + 1 >= max_chars // 2:
        return window[: cut + 1].rstrip(), True
    window = text[: max(0, max_chars - len(ELLIPSIS))]
    space = window.rfind(" ")
    if space >= max_chars // 2:
        window = window[:space]
    return window.rstrip() + ELLIPSIS, True
