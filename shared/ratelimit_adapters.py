"""The per-principal rate limiter (`shared.ratelimit`) on each transport, sharing one limiter so
a caller's MCP tool calls and gRPC calls draw from the same bucket.

    rate_limit_middleware(limiter, principal_of)
        MCPServer middleware: every `tools/call` takes a token before the tool runs; over the
        limit the call is answered with JSON-RPC -32029 "Rate limited: …" and
        `data: {"retry_after": seconds}` (shared.mcp_errors.jsonrpc_error). Other MCP methods
        (initialize, tools/list, …) are not counted.
    RateLimitInterceptor(limiter)
        gRPC server interceptor: every unary call of a served service (health and reflection
        excepted) takes a token; over the limit RESOURCE_EXHAUSTED with a `retry-after`
        trailing metadata entry (shared.grpc_errors.abort_for). The caller is
        `shared.identity.verified_caller()`, so it must run inside the auth interceptor (list
        it after that one); a call without a verified caller (authentication off) is not limited.

Whose bucket a call draws from is `shared.ratelimit.rate_key` (operators and the stack's own
services are never limited).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import grpc

from shared.errors import NucleusError, ResourceExhausted
from shared.grpc_errors import abort_for
from shared.grpc_handlers import PROBE_SERVICES, split_method, wrap_unary
from shared.identity import Principal, verified_caller
from shared.mcp_errors import jsonrpc_error
from shared.ratelimit import RateLimiter, rate_key

UNLIMITED_SERVICES = PROBE_SERVICES


def rate_limit_middleware(limiter: RateLimiter, principal_of: Callable[[Any], Principal | None]
                          ) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
    """MCPServer middleware (see the module docstring). `principal_of(ctx)` resolves the caller
    of a request context; when it cannot (no valid identity) the call is not counted here and
    the tool refuses it itself."""

    async def rate_limit(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if limiter.enabled and getattr(ctx, "method", None) == "tools/call":
            try:
                key = rate_key(principal_of(ctx))
            except NucleusError:
                key = None
            if key is not None:
                try:
                    limiter.check(key, what="tool calls")
                except ResourceExhausted as err:
                    raise jsonrpc_error(err) from None
        return await call_next(ctx)

    return rate_limit


class RateLimitInterceptor(grpc.aio.ServerInterceptor):
    """gRPC server interceptor (see the module docstring)."""

    def __init__(self, limiter: RateLimiter, *, unlimited_services: frozenset[str] = UNLIMITED_SERVICES) -> None:
        self._limiter = limiter
        self._unlimited = unlimited_services

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        service, _ = split_method(handler_call_details.method)
        if handler is None or handler.unary_unary is None or service in self._unlimited or not self._limiter.enabled:
            return handler
        inner = handler.unary_unary
        limiter = self._limiter

        async def limited(request: Any, context: grpc.aio.ServicerContext) -> Any:
            key = rate_key(verified_caller())
            if key is not None:
                try:
                    limiter.check(key)
                except ResourceExhausted as err:
                    await abort_for(context, err)
            return await inner(request, context)

        return wrap_unary(handler, limited)


__all__ = ["rate_limit_middleware", "RateLimitInterceptor", "UNLIMITED_SERVICES"]
