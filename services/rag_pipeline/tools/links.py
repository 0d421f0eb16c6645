"""Tool results that cite documents: the structured answer, its text fallback, then one
`resource_link` content block per cited document, pointing at its signed link (docs/MCP.md).

    return cited_result(out, [(segment.source_url, segment.headline) for segment in out.segments])

`content[0]` is the structured answer as text, exactly as the MCP SDK writes it for a tool
without links (so clients reading only the text see the same JSON as before); the links follow
in the order of the documents. With `max_tokens` (rag_search's budget) the answer keeps its
documents best first while the text and the links together fit the budget, estimated at four
characters a token: a link costs its tokens like the text does.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pydantic_core
from mcp_types import CallToolResult, ResourceLink, TextContent
from pydantic import BaseModel

CHARS_PER_TOKEN = 4


def tokens(text: str) -> int:
    """The estimate of `text`'s tokens the budgets use."""
    return -(-len(text) // CHARS_PER_TOKEN)


def resource_links(links: Sequence[tuple[str | None, str]]) -> list[ResourceLink]:
    """One link block per (uri, name) that has a uri."""
    return [ResourceLink(type="resource_link", uri=uri, name=name or uri) for uri, name in links if uri]


def _text(out: BaseModel) -> str:
    return pydantic_core.to_json(out, fallback=str, indent=2).decode()


def cited_result(out: BaseModel, links: Sequence[tuple[str | None, str]], *, meta: dict[str, Any] | None = None
                 ) -> CallToolResult:
    """`out` as structured content and as text, then its links."""
    return CallToolResult(content=[TextContent(type="text", text=_text(out)), *resource_links(links)],
                          structured_content=out.model_dump(mode="json", by_alias=True),
                          **({"_meta": meta} if meta else {}))


def within_budget(out: BaseModel, field: str, link_of: Callable[[Any], tuple[str | None, str]],
                  max_tokens: int | None) -> BaseModel:
    """`out` with only as many of its `field` items (best first) as fit `max_tokens` with their
    links (None: no budget)."""
    if not max_tokens:
        return out
    items = list(getattr(out, field))
    while items:
        kept = out.model_copy(update={field: items})
        links = resource_links([link_of(i) for i in items])
        if tokens(_text(kept)) + sum(tokens(link.model_dump_json(by_alias=True, exclude_none=True))
                                     for link in links) <= max_tokens:
            return kept
        items.pop()
    return out.model_copy(update={field: []})
