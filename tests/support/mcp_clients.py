"""Official MCP SDK clients for tests: streamable HTTP (with headers) and stdio."""
from __future__ import annotations

from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def http_client(url: str, headers: dict[str, str] | None = None) -> Client:
    """An MCP client over streamable HTTP sending `headers` on every request."""
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers or {})))


def structured(result: Any) -> dict:
    """The structured content of a successful tool result (fails loudly on a tool error)."""
    if result.is_error:
        raise AssertionError(f"tool error: {[getattr(c, 'text', c) for c in result.content]}")
    assert result.structured_content is not None, "tool returned no structured content"
    return result.structured_content


def error_text(result: Any) -> str:
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return " ".join(getattr(c, "text", "") for c in result.content)
