"""Token-aware chunking that keeps the Markdown heading path as context.

Token counts are an estimate of MiniLM word pieces (`estimate_tokens`): one per word or
punctuation mark, plus one per further 5 characters of a long word. On SciFact abstracts it
over-counts the real tokenizer by about 8 % (median), so chunks stay inside the model window
without loading a tokenizer (the production embedder is remote and may not be MiniLM).

A chunk's budget is `chunk_tokens` minus the two special tokens minus its context line
(title › heading path), which is prepended to the text that is embedded and indexed.

Packing, in order of preference:
    a document whose blocks fit one budget is one chunk;
    a block (paragraph, list, table, code fence) that fits the next chunk starts it rather
    than being split; a section change starts a new chunk once the current one is half full;
    an oversized block is split at sentences (lines for lists/tables/code), an oversized
    sentence at words;
    consecutive chunks of one section overlap by up to `overlap_tokens` (whole trailing
    sentences, else trailing words).
Headings of later sections merged into a chunk are kept inline (`## Setup`).
With `split_sections` (paged formats: a PDF's `# Page N`, a deck's slides, a workbook's sheets)
every top-level section starts its own chunk, so a chunk's heading path names its page.

Each chunk records its span, `[start, end)` in Unicode code points of the text it was cut from:
from the first character of its first sentence (or line, or word) to the last of its last. Its
body is that slice with whitespace runs made the chunker's (a space within a paragraph, a blank
line between blocks), with the heading of a section merged into it written as the chunker writes
it (`## Setup`, before each of the section's blocks), and without headings whose text went to the
heading path; the span of a chunk
that begins with a merged section's heading starts at that heading's line. Overlapping chunks
have overlapping spans. Units are found in the text by their non-blank characters, in order, so
the span is exact whatever whitespace the text had.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_TOKEN = re.compile(r"\w+|[^\w\s]")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\S")
_TABLE_ROW = re.compile(r"^\s*\|")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")

_BLANKS = np.array([c for c in range(0x3001) if chr(c).isspace()], np.uint32)   # what str.split() splits at
CONTEXT_SEPARATOR = " › "
PAGED_FILE_TYPES = frozenset({"pdf", "pptx", "xlsx"})    # top-level sections are pages / slides / sheets


def estimate_tokens(text: str) -> int:
    """Approximate word-piece count of `text` (see module docstring)."""
    return sum(1 + (len(t) - 2) // 5 if len(t) > 2 else 1 for t in _TOKEN.findall(text))


@dataclass(frozen=True, slots=True)
class Block:
    text: str
    path: tuple[str, ...]         # heading path the block sits under
    kind: str                     # "para" | "list" | "table" | "code"


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    text: str                     # the chunk body (what an entry shows)
    path: tuple[str, ...]         # heading path at the chunk's start
    start: int = 0                # its span in the document text (module docstring); end 0 = unknown
    end: int = 0


def parse_blocks(text: str, *, markdown: bool) -> list[Block]:
    """Split `text` into blocks, tracking the heading path when `markdown`."""
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    para: list[str] = []
    code: list[str] | None = None

    def path() -> tuple[str, ...]:
        return tuple(t for _, t in stack)

    def flush() -> None:
        if para:
            first = para[0]
            kind = "list" if _LIST_ITEM.match(first) else "table" if _TABLE_ROW.match(first) else "para"
            blocks.append(Block("\n".join(para).strip(), path(), kind))
            para.clear()

    def push_heading(level: int, title: str) -> None:
        while stack and stack[-1][0] >= level:
            stack.pop()
        if title:
            stack.append((level, title))

    for line in text.split("\n"):
        if code is not None:
            code.append(line)
            if _FENCE.match(line):
                blocks.append(Block("\n".join(code), path(), "code"))
                code = None
            continue
        if _FENCE.match(line):
            flush()
            code = [line]
            continue
        if not line.strip():
            flush()
            continue
        if markdown:
            heading = _HEADING.match(line)
            if heading:
                flush()
                push_heading(len(heading.group(1)), heading.group(2).strip())
                continue
            if len(para) == 1 and _SETEXT.match(line) and not _LIST_ITEM.match(para[0]):
                title = para.pop().strip()
                push_heading(1 if line.lstrip().startswith("=") else 2, title)
                continue
        para.append(line.rstrip())
    if code is not None:                       # unterminated fence: keep what is there
        blocks.append(Block("\n".join(code), path(), "code"))
    flush()
    return [b for b in blocks if b.text.strip()]


def context_line(title: str, path: tuple[str, ...]) -> str:
    """`title › h1 › h2`, without repeating a first heading equal to the title."""
    parts = [title.strip()] if title.strip() else []
    for heading in path:
        if not parts or heading.strip().lower() != parts[-1].lower():
            parts.append(heading.strip())
    return CONTEXT_SEPARATOR.join(parts)


@dataclass(slots=True)
class _Unit:
    text: str
    tokens: int
    block: int                    # index of the block it came from
    path: tuple[str, ...]         # heading path of that block
    sep: str                      # joins it to the previous unit of the same block
    start: int = -1               # its span in the document text; -1 = unknown (a blank line)
    end: int = -1


class _Spans:
    """Where texts lie in a document, found by their non-blank characters: `find` looks after
    the last text found, so texts taken from the document in order get their own places."""

    def __init__(self, text: str) -> None:
        points = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        self.text = text
        self.doc = np.flatnonzero(~np.isin(points, _BLANKS))             # per non-blank character: its index
        self.chars = points[self.doc].tobytes().decode("utf-32-le")     # the non-blank characters
        self.cursor = 0

    def _pos(self, i: int) -> int:
        """The text index of `chars[i]`."""
        return int(self.doc[i])

    def _index(self, pos: int) -> int:
        """The `chars` index of the first non-blank character at or after text index `pos`."""
        return int(np.searchsorted(self.doc, pos))

    def find(self, piece: str) -> tuple[int, int]:
        """The span of `piece` after the last one found; (-1, -1) when blank or not found."""
        key = "".join(piece.split())
        i = self.chars.find(key, self.cursor) if key else -1
        if i < 0:
            return -1, -1
        self.cursor = i + len(key)
        return self._pos(i), self._pos(i + len(key) - 1) + 1

    def tail(self, piece: str, end: int) -> int:
        """Where `piece`, the last words of a unit ending at `end`, starts."""
        return self._pos(self._index(end) - len("".join(piece.split())))

    def heading_line(self, title: str, before: int) -> int:
        """The start of the line of the last heading `title` above text index `before`; `before`
        when there is none."""
        key = "".join(title.split())
        i = self.chars.rfind(key, 0, self._index(before)) if key else -1
        return self.text.rfind("\n", 0, self._pos(i)) + 1 if i >= 0 else before


def _split_words(text: str, budget: int) -> list[str]:
    pieces, cur, cur_tokens = [], [], 0
    words: list[str] = []
    for word in text.split():           # a "word" longer than the budget is cut into slices
        step = 4 * budget
        words.extend(word[i:i + step] for i in range(0, len(word), step))
    for word in words:
        t = estimate_tokens(word)
        if cur and cur_tokens + t > budget:
            pieces.append(" ".join(cur))
            cur, cur_tokens = [], 0
        cur.append(word)
        cur_tokens += t
    if cur:
        pieces.append(" ".join(cur))
    return pieces


def _units(block: Block, index: int, budget: int, window: int, spans: _Spans) -> list[_Unit]:
    """Sentences (lines outside paragraphs) of `block`; longer than `budget` → `window` words."""
    if block.kind == "para":
        parts, sep = _SENTENCE_END.split(block.text), " "
    else:
        parts, sep = block.text.split("\n"), "\n"
    units: list[_Unit] = []
    for part in parts:
        tokens = estimate_tokens(part)
        if tokens <= budget:
            units.append(_Unit(part, tokens, index, block.path, sep, *spans.find(part)))
        else:
            units.extend(_Unit(p, estimate_tokens(p), index, block.path, " ", *spans.find(p))
                         for p in _split_words(part, window))
    return units


def _join(units: list[_Unit]) -> str:
    out: list[str] = []
    for i, unit in enumerate(units):
        if i:
            out.append(unit.sep if unit.block == units[i - 1].block else "\n\n")
        out.append(unit.text)
    return "".join(out).strip()


def _tail(units: list[_Unit], overlap: int, spans: _Spans) -> list[_Unit]:
    """Trailing whole units of at most `overlap` tokens, else the last words of the last one."""
    tail: list[_Unit] = []
    total = 0
    for unit in reversed(units):
        if total + unit.tokens > overlap:
            break
        tail.insert(0, unit)
        total += unit.tokens
    if tail or overlap <= 0 or not units:
        return tail
    last = units[-1]
    words = last.text.split()
    kept: list[str] = []
    for word in reversed(words):
        t = estimate_tokens(word)
        if total + t > overlap:
            break
        kept.insert(0, word)
        total += t
    if not kept:
        return []
    text = " ".join(kept)
    start = spans.tail(text, last.end) if last.end >= 0 else -1
    return [_Unit(text, total, last.block, last.path, last.sep, start, last.end if start >= 0 else -1)]


def _span(units: list[_Unit]) -> tuple[int, int]:
    """(start, end) of the text `units` were cut from; (0, 0) when unknown."""
    placed = [u for u in units if u.end >= 0]
    return (placed[0].start, placed[-1].end) if placed else (0, 0)


def is_one_chunk(text: str, *, title: str, chunk_tokens: int, tokens: int) -> bool:
    """True when `chunk_document(text, markdown=False, title=title, chunk_tokens=...)` surely
    gives at most one chunk, without parsing it: `tokens` is estimate_tokens(text). Exact as a
    sufficient test: without Markdown every block sits under no heading, a block is whole lines
    of `text` and no token spans a line break, so the blocks' tokens sum to `tokens`, and there
    are at most as many blocks as lines; the short-document rule then holds. False means "ask
    chunk_document", not "several chunks"."""
    floor = max(16, chunk_tokens // 4)
    budget = max(floor, chunk_tokens - 2 - estimate_tokens(context_line(title, ())))
    return tokens + 2 * text.count("\n") <= budget


def chunk_document(text: str, *, markdown: bool, title: str, chunk_tokens: int,
                   overlap_tokens: int, split_sections: bool = False) -> list[Chunk]:
    """Chunks of `text` (empty list when it holds no words)."""
    blocks = parse_blocks(text, markdown=markdown)
    if not blocks:
        return []
    spans = _Spans(text)
    floor = max(16, chunk_tokens // 4)

    def budget(path: tuple[str, ...]) -> int:
        return max(floor, chunk_tokens - 2 - estimate_tokens(context_line(title, path)))

    block_tokens = [estimate_tokens(b.text) for b in blocks]
    first_budget = budget(blocks[0].path)
    one_section = not split_sections or len({b.path[:1] for b in blocks}) == 1
    if one_section and sum(block_tokens) + 2 * (len(blocks) - 1) <= first_budget:      # short document
        path0 = blocks[0].path
        body = "\n\n".join(_inline_heading(b, path0) for b in blocks)
        placed = [at for at in map(spans.find, (b.text for b in blocks)) if at[1] >= 0]
        return [Chunk(0, body, path0, *((placed[0][0], placed[-1][1]) if placed else (0, 0)))]

    chunks: list[Chunk] = []
    cur: list[_Unit] = []
    cur_tokens = 0
    cur_path: tuple[str, ...] = blocks[0].path
    cur_budget = first_budget
    fresh = 0                       # units of `cur` that are not overlap carried over

    def flush(next_path: tuple[str, ...]) -> None:
        nonlocal cur, cur_tokens, cur_path, cur_budget, fresh
        if fresh:
            chunks.append(Chunk(len(chunks), _join(cur), cur_path, *_span(cur)))
        same_section = bool(cur) and cur[-1].path == next_path
        carry = _tail(cur, min(overlap_tokens, budget(next_path) // 2), spans) if same_section else []
        cur = carry
        cur_tokens = sum(u.tokens for u in carry)
        cur_path = next_path
        cur_budget = budget(next_path)
        fresh = 0

    for bi, block in enumerate(blocks):
        block_budget = budget(block.path)
        if fresh and (cur_tokens + block_tokens[bi] > cur_budget and block_tokens[bi] <= block_budget
                      or block.path != cur_path and cur_tokens >= cur_budget // 2
                      or split_sections and block.path[:1] != cur_path[:1]):
            flush(block.path)
        unit_budget = min(cur_budget, block_budget) - 8
        units = _units(block, bi, unit_budget, max(8, unit_budget - min(overlap_tokens, unit_budget // 2)), spans)
        if block.path != cur_path and block.path:       # merged section: keep its heading
            line = _heading_line(block.path)
            first = units[0]
            start = spans.heading_line(block.path[-1], first.start) if first.end >= 0 else -1
            units[0] = _Unit(f"{line}\n{first.text}", first.tokens + estimate_tokens(line), bi,
                             block.path, "", start, first.end)
        for unit in units:
            if fresh and cur_tokens + unit.tokens > cur_budget:
                flush(block.path)
                while cur and cur_tokens + unit.tokens > cur_budget:    # carried overlap too big
                    cur_tokens -= cur.pop(0).tokens
            cur.append(unit)
            cur_tokens += unit.tokens
            fresh += 1
    flush(cur_path)
    return chunks


def _heading_line(path: tuple[str, ...]) -> str:
    return f"{'#' * min(len(path), 6)} {path[-1]}"


def _inline_heading(block: Block, chunk_path: tuple[str, ...]) -> str:
    """`block.text`, preceded by its own heading when it sits in another section."""
    if block.path == chunk_path or not block.path:
        return block.text
    return f"{_heading_line(block.path)}\n{block.text}"
