"""Official MCP SDK clients for tests: streamable HTTP (with headers) and stdio."""
from __future__ import annotations

from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def http_client(url: str, headers: dict[str, str] | None = None, *, mode: str = "auto") -> Client:
    """An MCP client over streamable HTTP sending `headers` on every request; `mode` "legacy" speaks
    2025-11-25 (the initialize handshake), "auto" negotiates by `server/discover` (2026-07-28)."""
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers or {})), mode=mode)


#: The protocol version each client mode ends up speaking with our servers.
PROTOCOLS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def check_annotations(tools: Any) -> dict[str, Any]:
    """Every tool listed carries the three hints; a read-only one is idempotent and not destructive.
    The annotations by tool name."""
    out = {}
    for t in tools:
        a = t.annotations
        assert a is not None, f"{t.name}: no annotations"
        hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint)
        assert None not in hints, f"{t.name}: {a}"
        if a.read_only_hint:
            assert a.idempotent_hint and not a.destructive_hint, f"{t.name}: {a}"
        out[t.name] = a
    return out


def structured(result: Any) -> dict:
    """The structured content of a successful tool result (fails loudly on a tool error)."""
    if result.is_error:
        raise AssertionError(f"tool error: {[getattr(c, 'text', c) for c in result.content]}")
    assert result.structured_content is not None, "tool returned no structured content"
    return result.structured_content


def error_text(result: Any) -> str:
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return " ".join(getattr(c, "text", "") for c in result.content)
