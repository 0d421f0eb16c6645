"""Tool results that cite documents: the structured answer, its text fallback, then one
`resource_link` content block per cited document, pointing at its signed link (docs/MCP.md).

    return cited_result(out, [(segment.source_url, segment.headline) for segment in out.segments])

`content[0]` is the structured answer as text, exactly as the MCP SDK writes it for a tool
without links (so clients reading only the text see the same JSON as before); the links follow
in the order of the documents. A `max_tokens` budget counts the links with the rest of the
answer (budget.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic_core
from mcp_types import CallToolResult, ResourceLink, TextContent
from pydantic import BaseModel

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
