"""An MCP client to one remote source, with the federation's safety rules.

    pool = RemotePool(audit=audit)
    remote = pool.get(source)                      # one pooled session per source (reconnects on failure)
    tools = await remote.list_tools()
    contract = detect_contract(tools)              # seed-000 trio and/or seed-002 rag_search
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
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import socket
import time
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import trace
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.rag_pipeline.federation.sources import Source, check_url_syntax
from shared.audit import AuditEvent, AuditLog
from shared.identity import on_behalf_of
from shared.redaction import redact, register_secret

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.federation")

SEED000_TOOLS = ("rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results")
SEED002_TOOL = "rag_search"
CONNECT_TIMEOUT_S = 10.0
TOOLS_TTL_S = 60.0                      # a tool list is reused this long (the probe refreshes it)
ERROR_KINDS = ("timeout", "connection", "oversize", "bad_json", "tool_error", "refused", "credential",
               "protocol")

#: Host names of cloud metadata services (refused unless `allow_private_network`).
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.com"})
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "169.254.169.123"))
LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))

#: Headers of the request being sent (the caller's identity for this one call, identity.py).
#: The MCP client sends each message in the context of the task that sent it, so a value set
#: around `call_tool` reaches exactly that call's HTTP request and no other.
_REQUEST_HEADERS: ContextVar[dict[str, str] | None] = ContextVar("nucleus_remote_request_headers", default=None)


class RemoteError(Exception):
    """A remote call that failed: which source, what kind of failure, a redacted message."""

    def __init__(self, source_id: str, kind: str, message: str) -> None:
        self.source_id, self.kind, self.message = source_id, kind, redact(message)
        super().__init__(f"source {source_id}: {kind}: {self.message}")


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    title: str = ""

    def takes(self, argument: str) -> bool:
        """Whether the tool's input schema declares `argument`."""
        props = self.input_schema.get("properties") if isinstance(self.input_schema, dict) else None
        return isinstance(props, dict) and argument in props


@dataclass(frozen=True)
class RemoteResult:
    source_id: str
    tool: str
    data: Any                           # structured content, else the text parsed as JSON, else None
    text: str = ""                      # the text content joined
    latency_ms: float = 0.0
    size_bytes: int = 0


@dataclass(frozen=True)
class RagContract:
    """Which RAG contracts a remote speaks, from its tool list."""

    seed000: bool = False               # rag_discover_resources + rag_get_raw_results + rag_get_synthesized_results
    seed002: bool = False               # rag_search
    partial000: tuple[str, ...] = ()    # seed-000 tools present when the trio is incomplete

    @property
    def is_rag(self) -> bool:
        return self.seed000 or self.seed002

    @property
    def label(self) -> str:
        parts = [name for name, ok in (("seed000", self.seed000), ("seed002", self.seed002)) if ok]
        return "+".join(parts) if parts else "tools"


def detect_contract(tools: Sequence[ToolInfo | str]) -> RagContract:
    names = {t if isinstance(t, str) else t.name for t in tools}
    trio = [n for n in SEED000_TOOLS if n in names]
    return RagContract(seed000=len(trio) == len(SEED000_TOOLS), seed002=SEED002_TOOL in names,
                       partial000=tuple(trio) if 0 < len(trio) < len(SEED000_TOOLS) else ())


# ---------------------------------------------------------------------------- URL safety
def _forbidden_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if any(addr in net for net in LINK_LOCAL):
        return "a link-local address"
    if addr.is_unspecified or addr.is_multicast:
        return "an unspecified or multicast address"
    return None


async def check_destination(source: Source) -> list[str]:
    """Resolve the source's host and refuse forbidden destinations; returns the addresses."""
    if source.url is None:
        return []
    problem = check_url_syntax(source.url)
    if problem:
        raise RemoteError(source.id, "refused", f"url {problem}")
    parts = urlsplit(source.url)
    host = (parts.hostname or "").rstrip(".").lower()
    if source.allow_private_network:
        return []
    if host in METADATA_HOSTS:
        raise RemoteError(source.id, "refused", f"host {host} is a cloud metadata service "
                          "(set allow_private_network to allow it)")
    try:
        literal = ipaddress.ip_address(host)
        addresses = [literal]
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
        except OSError as err:
            raise RemoteError(source.id, "connection", f"host {host} does not resolve: {err}") from None
        addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    for addr in addresses:
        why = _forbidden_address(addr)
        if why:
            raise RemoteError(source.id, "refused", f"host {host} resolves to {addr}, {why} "
                              "(set allow_private_network to allow it)")
    return [str(a) for a in addresses]


# ---------------------------------------------------------------------------- response size limit
class _Oversize(Exception):
    pass


class _CountingStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, limit: int, flag: "_Connection") -> None:
        self._inner, self._limit, self._flag, self._seen = inner, limit, flag, 0

    async def __aiter__(self):
        async for chunk in self._inner:
            self._seen += len(chunk)
            if self._seen > self._limit:
                self._flag.oversize = True
                raise _Oversize(f"response larger than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()


class _LimitedTransport(httpx2.AsyncBaseTransport):
    """Counts the bytes of each POST response (a tool result) and stops at the limit; sends
    the request to the pinned address (when there is one) and adds the per-request headers."""

    def __init__(self, limit: int, flag: "_Connection", pinned: str | None = None) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._limit, self._flag, self._pinned = limit, flag, pinned

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        extra = _REQUEST_HEADERS.get()
        if extra:
            for name, value in extra.items():
                request.headers[name] = value
        if self._pinned is not None:
            host = request.url.host
            if host != self._pinned:
                request.headers["Host"] = request.headers.get("Host") or host
                request.extensions = {**request.extensions, "sni_hostname": host}
                request.url = request.url.copy_with(host=self._pinned)
        response = await self._inner.handle_async_request(request)
        if response.status_code in (401, 403):
            self._flag.refused_status = response.status_code
        if request.method != "POST":
            return response
        length = response.headers.get("content-length")
        if length and length.isdigit() and int(length) > self._limit:
            self._flag.oversize = True
            await response.aclose()
            raise _Oversize(f"response of {length} bytes is larger than {self._limit}")
        response.stream = _CountingStream(response.stream, self._limit, self._flag)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


# ---------------------------------------------------------------------------- one session
class _Connection:
    """One MCP session, entered and exited in a task of its own (the SDK's task groups must be
    left by the task that entered them); calls from any task share it."""

    def __init__(self, source: Source, mode: str = "legacy", pinned: str | None = None) -> None:
        self.source = source
        self.mode = mode
        self.pinned = pinned            # the checked address every request of this session goes to
        self.client: Client | None = None
        self.oversize = False
        self.refused_status = 0         # 401/403 seen: the source refused our credential
        self.dead = False
        self._closing = asyncio.Event()
        self._http: httpx2.AsyncClient | None = None
        self._task: asyncio.Task | None = None

    def _transport(self) -> Any:
        s = self.source
        credential = s.credential()
        if s.needs_credential and credential is None:
            where = f"environment variable {s.credential_env}" if s.credential_env else f"file {s.credential_file}"
            raise RemoteError(s.id, "credential", f"the credential is missing ({where} is empty or unset)")
        if credential:
            register_secret(credential)
        if s.url is not None:
            headers = s.auth_headers(credential)
            for value in headers.values():
                register_secret(value)
            timeout = httpx2.Timeout(min(CONNECT_TIMEOUT_S, max(s.timeout_s, 1.0)), read=300.0)
            self._http = httpx2.AsyncClient(headers=headers, timeout=timeout,
                                            transport=_LimitedTransport(s.max_response_bytes, self, self.pinned))
            return streamable_http_client(s.url, http_client=self._http, max_sse_event_size=s.max_response_bytes)
        env = {"NUCLEUS_SOURCE_ID": s.id}
        if credential:
            env["NUCLEUS_SOURCE_CREDENTIAL"] = credential
            if s.credential_env:
                env[s.credential_env] = credential
        for name in ("PATH", "PYTHONPATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            if name in os.environ and name not in env:
                env[name] = os.environ[name]
        assert s.command is not None
        return StdioServerParameters(command=s.command[0], args=list(s.command[1:]), env=env)

    async def open(self, timeout_s: float) -> Client:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        server = self._transport()

        async def run() -> None:
            try:
                async with Client(server, cache=None, mode=self.mode) as client:
                    if not ready.done():
                        ready.set_result(client)
                    await self._closing.wait()
            except BaseException as err:      # noqa: BLE001  (reported to the opener)
                if not ready.done():
                    ready.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            finally:
                self.dead = True
                if self._http is not None:
                    await self._http.aclose()

        self._task = loop.create_task(run(), name=f"mcp-source-{self.source.id}")
        try:
            self.client = await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        except BaseException:
            await self.close()
            raise
        return self.client

    async def close(self) -> None:
        self._closing.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(task, 3.0)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                task.cancel()
        self.dead = True


def _classify(source_id: str, err: BaseException, conn: _Connection | None) -> RemoteError:
    if isinstance(err, RemoteError):
        return err
    if conn is not None and conn.oversize:
        return RemoteError(source_id, "oversize", f"response larger than {conn.source.max_response_bytes} bytes")
    if conn is not None and conn.refused_status:
        return RemoteError(source_id, "credential", f"the source answered HTTP {conn.refused_status} to our "
                           "credential (check the source's credential_env / credential_file)")
    text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    if isinstance(err, (TimeoutError, asyncio.TimeoutError)):
        return RemoteError(source_id, "timeout", "no answer before the deadline")
    lowered = text.lower()
    if "401" in lowered or "403" in lowered or "unauthorized" in lowered or "forbidden" in lowered:
        return RemoteError(source_id, "credential", f"the source refused our credential ({text[:300]})")
    if isinstance(err, (OSError, httpx2.TransportError, ConnectionError, anyio.ClosedResourceError,
                        anyio.BrokenResourceError, anyio.EndOfStream)) or "connect" in lowered:
        return RemoteError(source_id, "connection", text[:500])
    if isinstance(err, ExceptionGroup):
        inner = err.exceptions[0] if err.exceptions else err
        if inner is not err:
            return _classify(source_id, inner, conn)
    return RemoteError(source_id, "protocol", text[:500])


def _text_of(content: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in (content or ()) if getattr(c, "type", "") == "text")


def _parse_result(source: Source, name: str, result: Any, latency_ms: float) -> RemoteResult:
    text = _text_of(result.content)
    structured = result.structured_content
    size = len(text.encode("utf-8"))
    if structured is not None:
        size += len(json.dumps(structured, ensure_ascii=False, default=str).encode("utf-8"))
    if size > source.max_response_bytes:
        raise RemoteError(source.id, "oversize", f"response of {size} bytes is larger than "
                          f"{source.max_response_bytes}")
    if result.is_error:
        raise RemoteError(source.id, "tool_error", f"{name}: {text[:500] or 'the tool reported an error'}")
    data: Any = structured
    if data is None and text.strip():
        stripped = text.strip()
        if stripped[:1] in "[{":
            try:
                data = json.loads(stripped)
            except json.JSONDecodeError as err:
                raise RemoteError(source.id, "bad_json", f"{name}: the result is not valid JSON ({err.msg})") \
                    from None
    return RemoteResult(source_id=source.id, tool=name, data=data, text=text, latency_ms=latency_ms,
                        size_bytes=size)


def _tool_info(tool: Any) -> ToolInfo:
    return ToolInfo(name=tool.name, description=tool.description or "", input_schema=dict(tool.input_schema or {}),
                    output_schema=dict(tool.output_schema) if tool.output_schema else None,
                    title=tool.title or "")


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
        try:
            task = asyncio.get_running_loop().create_task(conn.close())
        except RuntimeError:
            return
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    async def list_tools(self, *, deadline_s: float | None = None, refresh: bool = False) -> list[ToolInfo]:
        """The source's tools (every page). Answered from the last listing when it is younger
        than TOOLS_TTL_S, unless `refresh` (the probe always refreshes)."""
        cached = self._tools
        if not refresh and cached is not None and time.monotonic() - cached[0] < TOOLS_TTL_S:
            return list(cached[1])
        budget = deadline_s if deadline_s is not None else max(self.source.timeout_s, 5.0)
        deadline = time.monotonic() + budget
        conn: _Connection | None = None
        started = time.perf_counter()
        status = "ok"
        self._enter()
        with _Leave(self), tracer.start_as_current_span(f"tools/list {self.source.id}", kind=SpanKind.CLIENT,
                                          attributes=self._attributes("tools/list", "")) as span:
            try:
                conn, client = await self._session(deadline)
                tools: list[ToolInfo] = []
                cursor: str | None = None
                for _ in range(50):
                    with anyio.fail_after(max(0.001, deadline - time.monotonic())):
                        page = await client.list_tools(cursor=cursor, meta=_trace_meta(), cache_mode="refresh")
                    tools.extend(_tool_info(t) for t in page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._tools = (time.monotonic(), tuple(tools))
                return tools
            except BaseException as err:
                error = _classify(self.source.id, err, conn)
                status = error.kind
                span.set_status(Status(StatusCode.ERROR, error.kind))
                span.set_attribute("error.type", error.kind)
                if conn is not None and error.kind in ("timeout", "connection", "protocol", "oversize"):
                    self._drop(conn)
                if isinstance(err, asyncio.CancelledError):
                    raise
                raise error from None
            finally:
                self._audit("tools/list", status, (time.perf_counter() - started) * 1000)

    async def call_tool(self, name: str, arguments: dict[str, Any], *, deadline_s: float,
                        headers: dict[str, str] | None = None, meta: dict[str, Any] | None = None) -> RemoteResult:
        """Call `name` on the source within `deadline_s` seconds (also capped by the source's
        `timeout_s`). `headers`: this call's own (the caller's identity, identity.py), never the
        session's; `meta`: added to the request's `_meta` beside the trace context. Raises
        RemoteError on any failure."""
        budget = max(0.001, min(deadline_s, self.source.timeout_s))
        deadline = time.monotonic() + budget
        conn: _Connection | None = None
        started = time.perf_counter()
        status = "ok"
        self._enter()
        with _Leave(self), tracer.start_as_current_span(f"tools/call {self.source.id}__{name}", kind=SpanKind.CLIENT,
                                          attributes=self._attributes("tools/call", name)) as span:
            try:
                conn, client = await self._session(deadline)
                token = _REQUEST_HEADERS.set(dict(headers)) if headers else None
                try:
                    with anyio.fail_after(max(0.001, deadline - time.monotonic())):
                        result = await client.call_tool(name, arguments, meta=_trace_meta(meta))
                finally:
                    if token is not None:
                        _REQUEST_HEADERS.reset(token)
                latency = (time.perf_counter() - started) * 1000
                parsed = _parse_result(self.source, name, result, latency)
                span.set_attribute("nucleus.remote.response_bytes", parsed.size_bytes)
                return parsed
            except BaseException as err:
                error = _classify(self.source.id, err, conn)
                status = error.kind
                span.set_status(Status(StatusCode.ERROR, error.kind))
                span.set_attribute("error.type", error.kind)
                if conn is not None and error.kind in ("timeout", "connection", "protocol", "oversize"):
                    self._drop(conn)            # the next call reconnects
                if isinstance(err, asyncio.CancelledError):
                    raise
                raise error from None
            finally:
                self._audit(name, status, (time.perf_counter() - started) * 1000)

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
            _close_later(self._remotes.pop(key))

    async def close(self) -> None:
        remotes, self._remotes = list(self._remotes.values()), {}
        for remote in remotes:
            await remote.close()


_closing: set[asyncio.Task] = set()


def _close_later(remote: RemoteSource) -> None:
    try:
        task = asyncio.get_running_loop().create_task(remote.retire())
    except RuntimeError:
        return
    _closing.add(task)
    task.add_done_callback(_closing.discard)
