"""The single translation of `shared.errors` into MCP tool errors."""
from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from shared.errors import NucleusError, mcp_error_text

T = TypeVar("T")


async def guarded(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a tool body; our errors become MCP tool errors (is_error=True, kind-prefixed text)."""
    try:
        return await fn()
    except NucleusError as err:
        raise ToolError(mcp_error_text(err)) from None
