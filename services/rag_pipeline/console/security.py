"""The console's HTTP security: response headers, CSRF, the session cookie, where a login may come from.

    SecurityHeaders    ASGI middleware: a strict Content-Security-Policy and the usual companions on
                       every console response (no inline script or style anywhere in the console)
    csrf_ok()          a form's CSRF token against the session's (constant time)
    login_transport_ok()  a credential is typed only over TLS, or over plain HTTP on loopback
    set_session_cookie(), clear_session_cookie()
"""
from __future__ import annotations

import hmac
import ipaddress

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",      # not no-referrer: a form POST would send `Origin: null`
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}
COOKIE = "nucleus_console"
PRELOGIN_COOKIE = "nucleus_console_login"     # double-submit token of the login form (login CSRF)
COOKIE_PATH = "/console"


class SecurityHeaders:
    """Adds `HEADERS` to every response of the wrapped app (static files included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in HEADERS.items() if k.encode() not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def csrf_ok(expected: str | None, given: object) -> bool:
    return bool(expected) and isinstance(given, str) and bool(given) and hmac.compare_digest(
        expected.encode(), given.encode())


def is_tls(request: Request) -> bool:
    return request.url.scheme == "https"


def is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def login_transport_ok(request: Request) -> bool:
    """A credential may be sent over TLS, or over plain HTTP from and to this machine only."""
    return is_tls(request) or is_loopback(request)


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def set_session_cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max(0, max_age), path=COOKIE_PATH, secure=is_tls(request),
                        httponly=True, samesite="strict")


def clear_session_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, secure=is_tls(request), httponly=True, samesite="strict")


__all__ = ["CSP", "HEADERS", "COOKIE", "PRELOGIN_COOKIE", "SecurityHeaders", "csrf_ok", "login_transport_ok",
           "client_address", "set_session_cookie", "clear_session_cookie", "is_tls"]
