"""How a remote source is reached safely (the rules: remote.py's docstring): the destination
checked (`check_destination`: link-local and cloud metadata addresses refused unless
`allow_private_network`) and pinned, each response held to its byte limit
(`_LimitedTransport`), and one MCP session per `_Connection` (HTTP with the source's own
credential, or a stdio command); `_classify` turns what went wrong into a `RemoteError`.
"""
from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from services.rag_pipeline.federation.remote_contract import RemoteError
from services.rag_pipeline.federation.sources import Source, check_url_syntax
from shared.redaction import register_secret

CONNECT_TIMEOUT_S = 10.0

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
