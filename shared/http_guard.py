"""Host and Origin checks for every HTTP route of a service, and no redirect built from a Host.

The MCP SDK validates Host and Origin (DNS-rebinding protection) inside its streamable-HTTP
transport, that is for `/mcp` only; the other routes of the same server (`/documents/…`, the
RFC 9728 metadata) and Starlette's trailing-slash redirect (`GET /mcp/` answered with a
`Location` made from the request's Host header) were outside it.

    guard_http_app(app, security, mcp_path="/mcp") -> ASGI app
        every HTTP request is checked against the same TransportSecuritySettings first:
        a Host that is not allowed gets 421, a foreign Origin 403, whatever the route;
        `<mcp_path>/` is served as `<mcp_path>` (no redirect), and the app's router makes no
        trailing-slash redirects at all (a route that does not match is a 404).
"""
from __future__ import annotations

from typing import Any

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send


#: On the guard's own refusals too: nothing to run, frame or sniff (the console's pages set their own).
REFUSAL_HEADERS = {"Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
                   "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"}


class HostOriginGuard:
    """ASGI middleware: the module docstring's checks, before any route runs."""

    def __init__(self, app: ASGIApp, security: TransportSecuritySettings, *, mcp_path: str = "/mcp") -> None:
        self.app = app
        self._validator = TransportSecurityMiddleware(security)
        self._aliases = {mcp_path.rstrip("/") + "/": mcp_path.rstrip("/")}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":                   # no route of ours speaks WebSocket
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] == "http":
            refusal = await self._validator.validate_request(Request(scope), is_post=False)
            if refusal is not None:
                await PlainTextResponse(bytes(refusal.body).decode(), status_code=refusal.status_code,
                                        headers=REFUSAL_HEADERS)(scope, receive, send)
                return
            alias = self._aliases.get(scope.get("path", ""))
            if alias is not None:
                scope = {**scope, "path": alias, "raw_path": alias.encode()}
        await self.app(scope, receive, send)


def guard_http_app(app: Any, security: TransportSecuritySettings, *, mcp_path: str = "/mcp") -> HostOriginGuard:
    """`app` (a Starlette app) behind `HostOriginGuard`, its trailing-slash redirects turned off."""
    router = getattr(app, "router", None)
    if router is not None:
        router.redirect_slashes = False
    return HostOriginGuard(app, security, mcp_path=mcp_path)


__all__ = ["HostOriginGuard", "guard_http_app"]
