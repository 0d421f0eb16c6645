"""Raw JSON-RPC to an MCP streamable-HTTP app in this process (httpx over ASGI): for requests the
SDK client will not send (malformed `tools/call` params) and for reading JSON-RPC error
objects (code, message, data) exactly as they are on the wire."""
from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

PROTOCOL = "2025-06-18"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def message(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response (plain JSON or the first SSE `data:` line)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    for line in response.text.splitlines():
        if line.startswith("data: "):
            return json.loads(line[len("data: "):])
    raise AssertionError(f"no JSON-RPC message in HTTP {response.status_code}: {response.text[:200]!r}")


class RawMcp:
    """An initialized MCP session spoken as plain HTTP requests."""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, str]) -> None:
        self.client = client
        self.headers = {**HEADERS, **headers}
        self._id = 0

    async def initialize(self) -> None:
        init = await self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                                 "clientInfo": {"name": "raw", "version": "0"}})
        assert "result" in init, init
        await self.client.post("/mcp", headers=self.headers,
                               json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        self._id += 1
        response = await self.client.post("/mcp", headers=self.headers,
                                          json={"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        session = response.headers.get("mcp-session-id")
        if session:
            self.headers.update({"mcp-session-id": session, "mcp-protocol-version": PROTOCOL})
        return message(response)


def _lifespan(app: Any) -> Any:
    inner = getattr(app, "app", app)            # through our HostOriginGuard to the Starlette app
    return inner.router.lifespan_context(inner)


async def session(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> RawMcp:
    """An initialized raw session over `client` (from `http_to`), sending `headers`."""
    raw = RawMcp(client, headers or {})
    await raw.initialize()
    return raw


@contextlib.asynccontextmanager
async def raw_mcp(app: Any, headers: dict[str, str] | None = None,
                  base_url: str = "http://127.0.0.1:8063") -> AsyncIterator[RawMcp]:
    """An initialized raw session with `app` (its lifespan running)."""
    async with http_to(app, base_url) as client:
        yield await session(client, headers)


@contextlib.asynccontextmanager
async def http_to(app: Any, base_url: str = "http://127.0.0.1:8063") -> AsyncIterator[httpx.AsyncClient]:
    """A plain httpx client for `app` (its lifespan running)."""
    async with _lifespan(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=base_url) as client:
            yield client
