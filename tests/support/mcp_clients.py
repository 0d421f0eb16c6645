"""Official MCP SDK clients for tests: streamable HTTP (with headers) and stdio."""
from __future__ import annotations

import asyncio
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def http_client(url: str, headers: dict[str, str] | None = None, *, mode: str = "auto") -> Client:
    """An MCP client over streamable HTTP sending `headers` on every request; `mode` "legacy" speaks
    2025-11-25 (the initialize handshake), "auto" negotiates by `server/discover` (2026-07-28)."""
    return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers or {})), mode=mode)


#: stdio servers held open across tests, by key: (the task holding the client open, its stop event, the client).
_held: dict[Any, tuple[asyncio.Task, asyncio.Event, Client]] = {}


async def held_stdio_client(key: Any, params: StdioServerParameters) -> Client:
    """An MCP client of the stdio server `params`, started at the first call with `key` and held open
    (one server process) for the later ones, until `close_held_clients()`. A stdio server pays
    Python's and the service's imports at each start: tests that call its tools, not its start or
    its end, share one. The client is entered and left in a task of its own (an anyio task group
    must be left by the task that entered it); tests call it from theirs, on the same loop."""
    held = _held.get(key)
    if held is not None and not held[0].done():
        return held[2]
    ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def hold() -> None:
        try:
            async with Client(params) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as err:
            if not ready.done():
                ready.set_exception(err)
            raise

    task = asyncio.create_task(hold(), name=f"stdio client {key!r}")
    client = await ready
    _held[key] = (task, stop, client)
    return client


async def close_held_clients() -> None:
    """Stop every stdio server `held_stdio_client` started (at the session's end)."""
    while _held:
        _, (task, stop, _client) = _held.popitem()
        stop.set()
        try:
            await task
        except Exception:  # noqa: BLE001 - a server that already died has nothing left to close
            pass


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
