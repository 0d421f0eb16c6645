"""An MCP client to one remote source, with the federation's safety rules.

    pool = RemotePool(audit=audit)
    remote = pool.get(source)                      # one pooled session per source (reconnects on failure)
    tools = await remote.list_tools()
    contract = detect_contract(tools)              # seed 000 (its two required tools) and/or seed-002 rag_search
    result = await remote.call_tool("rag_search", {"search_phrases": ["q"]}, deadline_s=3.0)
    result.data                                    # structured content, or the JSON text parsed

Rules applied on every call:
  * only http(s) URLs (or a stdio command); the host is resolved and every address checked:
    link-local (169.254.0.0/16, fe80::/10) and cloud metadata endpoints (169.254.169.254,
    fd00:ec2::254, metadata.google.internal, ...) are refused unless the source sets
    `allow_private_network`. Loopback and private networks are allowed (sidecars, tests).
  * the address that passed the check is the one connected to: the host is resolved once per
    session and pinned (the URL's host stays in `Host` and in TLS SNI / certificate checks), so
    a DNS answer that changes between the check and the connection (rebinding) is never used;
  * the call carries the source's own credential (`Authorization: Bearer`, or the source's
    `credential_header`, over HTTP; the environment of a stdio server), never the caller's
    token; what travels of the caller (identity.py) is set per request, never on the session;
  * a call cut at its deadline returns at the deadline: the broken session is closed in the
    background, never awaited by the caller;
  * a deadline per call and a byte limit per response (`max_response_bytes`);
  * a CLIENT span per call whose W3C `traceparent` goes in the request's `_meta`;
  * one audit line per call: source, tool, status, latency (never arguments or results).
Failures raise `RemoteError(source_id, kind, message)`; the message is redacted.

The pieces, by concern: remote_transport.py (destination checks, the response byte limit,
one session), remote_contract.py (tools, contracts, results, errors); this module: the pooled
session per source (`RemoteSource`) and the pool (`RemotePool`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import anyio
from mcp import Client
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.rag_pipeline.federation.remote_contract import (
    ERROR_KINDS,
    SEED000_TOOLS,
    SEED002_TOOL,
    RagContract,
    RemoteError,
    RemoteResult,
    ToolInfo,
    detect_contract,
    parse_result,
    tool_info,
)
from services.rag_pipeline.federation.remote_transport import (
    _REQUEST_HEADERS,
    CONNECT_TIMEOUT_S,
    _classify,
    _Connection,
    check_destination,
)
from services.rag_pipeline.federation.sources import Source, check_url_syntax
from shared.audit import AuditEvent, AuditLog
from shared.identity import on_behalf_of

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.federation")

TOOLS_TTL_S = 60.0                      # a tool list is reused this long (the probe refreshes it)

__all__ = ["ERROR_KINDS", "SEED000_TOOLS", "SEED002_TOOL", "TOOLS_TTL_S", "RagContract", "RemoteError", "RemotePool",
           "RemoteResult", "RemoteSource", "ToolInfo", "check_destination", "check_url_syntax", "detect_contract"]


class RemoteSource:
    """A pooled, self-healing MCP session to one source."""

    def __init__(self, source: Source, *, audit: AuditLog | None = None) -> None:
        self.source = source
        self.audit = audit
        self._conn: _Connection | None = None
        self._lock = asyncio.Lock()
        self.connects = 0               # how many sessions were opened (pooling is observable)
        # The initialize handshake (protocol 2025-11-25) first: every current server speaks it,
        # and a call costs a few ms on it, against ~50 ms per call on a negotiated 2026-07-28
        # session with this SDK; a server refusing the handshake is asked with negotiation.
        self._mode = "legacy"
        self._tools: tuple[float, tuple[ToolInfo, ...]] | None = None
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def _enter(self) -> None:
        self._inflight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._inflight -= 1
        if self._inflight <= 0:
            self._inflight = 0
            self._idle.set()

    async def retire(self, grace_s: float | None = None) -> None:
        """Close once the calls in flight are done (a reload never cuts a running call),
        or after `grace_s` (default: the source's timeout)."""
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s if grace_s is not None else self.source.timeout_s + 1)
        except asyncio.TimeoutError:
            pass
        await self.close()

    async def _session(self, deadline: float) -> tuple[_Connection, Client]:
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.dead and conn.client is not None:
                return conn, conn.client
            if conn is not None:
                await conn.close()
                self._conn = None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RemoteError(self.source.id, "timeout", "no time left to connect")
            addresses = await check_destination(self.source)
            pinned = addresses[0] if addresses else None
            conn = _Connection(self.source, self._mode, pinned)
            try:
                client = await conn.open(min(remaining, CONNECT_TIMEOUT_S))
            except BaseException as err:
                error = _classify(self.source.id, err, conn)
                if error.kind != "protocol" or self._mode != "legacy":
                    raise error from None
                # A server that only speaks the 2026-07-28 protocol: negotiate instead, and remember.
                self._mode = "auto"
                conn = _Connection(self.source, self._mode, pinned)
                try:
                    client = await conn.open(max(0.001, min(deadline - time.monotonic(), CONNECT_TIMEOUT_S)))
                except BaseException as err2:
                    raise _classify(self.source.id, err2, conn) from None
            self.connects += 1
            self._conn = conn
            return conn, client

    def _drop(self, conn: _Connection) -> None:
        """Forget a broken session now and close it in the background: a caller cut at its
        deadline returns at the deadline, not after the connection has wound down."""
        if self._conn is conn:
            self._conn = None
        conn.dead = True
        _close_later(conn.close)

    async def list_tools(self, *, deadline_s: float | None = None, refresh: bool = False) -> list[ToolInfo]:
        """The source's tools (every page). Answered from the last listing when it is younger
        than TOOLS_TTL_S, unless `refresh` (the probe always refreshes)."""
        cached = self._tools
        if not refresh and cached is not None and time.monotonic() - cached[0] < TOOLS_TTL_S:
            return list(cached[1])
        budget = deadline_s if deadline_s is not None else max(self.source.timeout_s, 5.0)
        deadline = time.monotonic() + budget
        async with self._exchange("tools/list", "", deadline) as (client, _):
            tools: list[ToolInfo] = []
            cursor: str | None = None
            for _ in range(50):
                with anyio.fail_after(max(0.001, deadline - time.monotonic())):
                    page = await client.list_tools(cursor=cursor, meta=_trace_meta(), cache_mode="refresh")
                tools.extend(tool_info(t) for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            self._tools = (time.monotonic(), tuple(tools))
            return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], *, deadline_s: float,
                        headers: dict[str, str] | None = None, meta: dict[str, Any] | None = None) -> RemoteResult:
        """Call `name` on the source within `deadline_s` seconds (also capped by the source's
        `timeout_s`). `headers`: this call's own (the caller's identity, identity.py), never the
        session's; `meta`: added to the request's `_meta` beside the trace context. Raises
        RemoteError on any failure."""
        budget = max(0.001, min(deadline_s, self.source.timeout_s))
        deadline = time.monotonic() + budget
        started = time.perf_counter()
        async with self._exchange("tools/call", name, deadline) as (client, span):
            token = _REQUEST_HEADERS.set(dict(headers)) if headers else None
            try:
                with anyio.fail_after(max(0.001, deadline - time.monotonic())):
                    result = await client.call_tool(name, arguments, meta=_trace_meta(meta))
            finally:
                if token is not None:
                    _REQUEST_HEADERS.reset(token)
            parsed = parse_result(self.source, name, result, (time.perf_counter() - started) * 1000)
            span.set_attribute("nucleus.remote.response_bytes", parsed.size_bytes)
            return parsed

    @contextlib.asynccontextmanager
    async def _exchange(self, method: str, tool: str, deadline: float) -> AsyncIterator[tuple[Any, Any]]:
        """One request to the source (`method`, and the tool of a tools/call): counted in flight,
        in a client span, over the pooled session opened by `deadline`; yields (session client,
        span). A failure is classified and raised as a RemoteError (`_failed`); either way the
        request is audited under the tool's name, else the method's, with its latency."""
        conn: _Connection | None = None
        started = time.perf_counter()
        status = "ok"
        self._enter()
        with _Leave(self), tracer.start_as_current_span(
                f"{method} {self.source.id}" + (f"__{tool}" if tool else ""), kind=SpanKind.CLIENT,
                attributes=self._attributes(method, tool)) as span:
            try:
                conn, client = await self._session(deadline)
                yield client, span
            except BaseException as err:
                status, error = self._failed(err, conn, span)
                raise error from None
            finally:
                self._audit(tool or method, status, (time.perf_counter() - started) * 1000)

    def _failed(self, err: BaseException, conn: _Connection | None, span: Any) -> tuple[str, BaseException]:
        """A call's failure: classified, on its span, its connection dropped when it may be broken
        (the next call reconnects); (its kind, what to raise: a cancellation stays one)."""
        error = _classify(self.source.id, err, conn)
        span.set_status(Status(StatusCode.ERROR, error.kind))
        span.set_attribute("error.type", error.kind)
        if conn is not None and error.kind in ("timeout", "connection", "protocol", "oversize"):
            self._drop(conn)
        return error.kind, err if isinstance(err, asyncio.CancelledError) else error

    def _attributes(self, method: str, tool: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {"mcp.method.name": method, "nucleus.source.id": self.source.id,
                                 "network.transport": "tcp" if self.source.url else "pipe"}
        if tool:
            attrs["gen_ai.tool.name"] = tool
        if self.source.url:
            parts = urlsplit(self.source.url)
            attrs["server.address"] = parts.hostname or ""
            if parts.port:
                attrs["server.port"] = parts.port
        return attrs

    def _audit(self, tool: str, status: str, latency_ms: float) -> None:
        if self.audit is None:
            return
        self.audit.record(AuditEvent.for_principal(
            on_behalf_of(), event="remote", decision="allow" if status == "ok" else "deny", tool=tool,
            reason="" if status == "ok" else status, resources=(self.source.id,),
            notes=(f"status={status}", f"latency_ms={latency_ms:.1f}")))

    async def close(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class _Leave:
    def __init__(self, remote: RemoteSource) -> None:
        self._remote = remote

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        self._remote._leave()


#: The fields that decide the session; a change of any other field (timeout, reputation,
#: groups...) keeps the pooled session.
CONNECTION_FIELDS = ("url", "command", "credential_env", "credential_file", "allow_private_network",
                     "max_response_bytes", "base_dir")


def _same_connection(a: Source, b: Source) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in CONNECTION_FIELDS)


def _trace_meta(extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The W3C trace context of the current span (plus `extra`), for the request's `_meta`."""
    carrier: dict[str, Any] = {}
    inject(carrier)
    if extra:
        carrier.update(extra)
    return carrier or None


class RemotePool:
    """One `RemoteSource` per source definition (id + the fields that decide the connection):
    a change of only limits or metadata keeps the pooled session; a changed connection gets a
    fresh one, while a query still holding the previous configuration keeps using the previous
    session until `retain` closes it (after its calls in flight)."""

    def __init__(self, *, audit: AuditLog | None = None) -> None:
        self.audit = audit
        self._remotes: dict[tuple, RemoteSource] = {}

    @staticmethod
    def _key(source: Source) -> tuple:
        return (source.id, *(getattr(source, f) for f in CONNECTION_FIELDS))

    def get(self, source: Source) -> RemoteSource:
        key = self._key(source)
        remote = self._remotes.get(key)
        if remote is None:
            remote = RemoteSource(source, audit=self.audit)
            self._remotes[key] = remote
        elif remote.source != source:
            remote.source = source              # new limits / metadata, same session
        return remote

    def retain(self, sources: "set[str] | list[Source] | tuple[Source, ...]") -> None:
        """Close (after their calls in flight) the sessions of definitions no longer configured:
        `sources` are the current sources (or, coarser, their ids)."""
        keep_ids = {s for s in sources if isinstance(s, str)}
        keep_keys = {self._key(s) for s in sources if isinstance(s, Source)}
        for key in list(self._remotes):
            if key[0] in keep_ids or key in keep_keys:
                continue
            _close_later(self._remotes.pop(key).retire)

    async def close(self) -> None:
        remotes, self._remotes = list(self._remotes.values()), {}
        for remote in remotes:
            await remote.close()


_closing: set[asyncio.Task] = set()


def _close_later(close: Callable[[], Awaitable[None]]) -> None:
    """Run `close()` in the background of the running loop (nothing to do without one), holding its
    task until it ends."""
    try:
        task = asyncio.get_running_loop().create_task(close())
    except RuntimeError:
        return
    _closing.add(task)
    task.add_done_callback(_closing.discard)
