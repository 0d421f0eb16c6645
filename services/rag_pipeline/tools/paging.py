"""`cursor` / `next_cursor` of the search tools (search_and_rank, rag_search, rag_get_raw_results):
the argument's type, the output field, and the budget's fit with the cursor following the results
it keeps (services/rag_pipeline/pages.py holds the rankings and signs the cursors).

    out._page = page                                  # the tool's answer, and the page it shows
    return fit_page(out, max_tokens, SEGMENTS, render)

With `max_tokens`, results the budget leaves out of a page are not lost: `next_cursor` then
starts at the first of them.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from services.rag_pipeline.pages import MAX_CURSOR_CHARS
from services.rag_pipeline.tools.budget import Fit, as_result, fit

Cursor = Annotated[str | None, Field(min_length=1, max_length=MAX_CURSOR_CHARS, description=(
    "Optional: the next_cursor of an earlier answer to the same request, for the page after it"))]


def cursor_field() -> Any:
    """The `next_cursor` field of a tool's output: absent when there is no further page."""
    return Field(default=None, exclude_if=lambda v: v is None)


def _settle(out: BaseModel, spec: Fit) -> None:
    page = getattr(out, "_page", None)
    if page is not None:
        out.next_cursor = page.cursor_after(len(spec.items(out)))


def fit_page(out: BaseModel, max_tokens: int | None, spec: Fit,
             render: Callable[[BaseModel], CallToolResult] = as_result) -> BaseModel | CallToolResult:
    """budget.fit, `out.next_cursor` set for the results shown each time it is rendered."""
    def rendered(o: BaseModel) -> CallToolResult:
        _settle(o, spec)
        return render(o)
    _settle(out, spec)
    return fit(out, max_tokens, spec, rendered)
