"""Authentication of gRPC calls: a server interceptor that verifies every call, and a client
interceptor that signs every call.

Server side, `AuthServerInterceptor(authenticate)` runs `authenticate(metadata)` for each call
(health checks excepted: probes carry no credentials) and either aborts with UNAUTHENTICATED /
PERMISSION_DENIED before the handler runs, or runs the handler with the verified principal as
`shared.identity.verified_caller()` (a streamed reply, RagPipeline.Chat, and a streamed request,
KnowledgeStore.ImportTenant, as well). Adapters
only read that; the cores decide what it may do.

Client side, `signing_interceptors(signer, audience)` (unary calls, calls with a streamed
reply or request) add `authorization: Bearer <token>` to every call: an on-behalf-of assertion when the
work is done for an end user (`shared.identity.on_behalf_of`: the user a request is served
for), else the caller's own service token (an operator's or a service's call stays the
service's own; for a verified operator it says `for_operator`, which grants no role:
`shared.identity.FOR_OPERATOR`).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import grpc

from shared.auth.service_identity import ServiceSigner
from shared.errors import NucleusError, Unauthenticated
from shared.grpc_errors import grpc_status
from shared.grpc_handlers import split_method, wrap_stream_unary, wrap_unary, wrap_unary_stream
from shared.identity import OPERATOR, Principal, is_verified_operator, on_behalf_of, serving

log = logging.getLogger(__name__)

Authenticate = Callable[[Mapping[str, str]], Principal]
OPEN_SERVICES = frozenset({"grpc.health.v1.Health"})


def _metadata(details: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}


class AuthServerInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, authenticate: Authenticate, *, open_services: frozenset[str] = OPEN_SERVICES) -> None:
        self._authenticate = authenticate
        self._open = open_services

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        service, _ = split_method(handler_call_details.method)
        if service in self._open:
            return handler
        try:
            principal = self._authenticate(_metadata(handler_call_details))
        except NucleusError as err:
            log.info("refused %s: %s", handler_call_details.method, type(err).__name__)
            return _refusal(handler, grpc_status(err), err.message)
        except Exception:  # noqa: BLE001 - a verifier bug must refuse, never admit
            log.exception("authentication failed unexpectedly for %s", handler_call_details.method)
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED, "credentials could not be verified")
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def as_caller(request: Any, context: grpc.aio.ServicerContext) -> Any:
                with serving(principal):
                    return await inner(request, context)

            return wrap_unary(handler, as_caller)
        if handler.unary_stream is not None:      # a streamed reply (RagPipeline.Chat) is served as the caller too
            streamed = handler.unary_stream

            async def stream_as_caller(request: Any, context: grpc.aio.ServicerContext) -> Any:
                with serving(principal):
                    async for response in streamed(request, context):
                        yield response

            return wrap_unary_stream(handler, stream_as_caller)
        if handler.stream_unary is not None:      # a streamed request (KnowledgeStore.ImportTenant) as well
            inner_streamed = handler.stream_unary

            async def from_caller(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                with serving(principal):
                    return await inner_streamed(requests, context)

            return wrap_stream_unary(handler, from_caller)
        return handler     # bidirectional streaming (reflection): authenticated above, needs no principal


def _refusal(handler: Any, code: grpc.StatusCode, message: str) -> Any:
    async def refuse(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    kw = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(refuse, **kw)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse, **kw)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, **kw)
    return grpc.stream_stream_rpc_method_handler(refuse, **kw)


class _Signing:
    """Adds `authorization: Bearer <a token signed for audience>` (with the user asserted, if any)."""

    def __init__(self, signer: ServiceSigner, audience: str) -> None:
        self._signer = signer
        self._audience = audience

    def _signed(self, client_call_details: Any) -> Any:
        user = on_behalf_of()
        asserted = user is not None and bool(user.tenant_id) and user.auth_method not in ("service", OPERATOR)
        token = self._signer.token(self._audience, user if asserted else None,
                                   for_operator=is_verified_operator(user))
        metadata = grpc.aio.Metadata()
        for key, value in client_call_details.metadata or ():
            if key != "authorization":
                metadata.add(key, value)
        metadata.add("authorization", f"Bearer {token}")
        return client_call_details._replace(metadata=metadata)


class SigningInterceptor(_Signing, grpc.aio.UnaryUnaryClientInterceptor):
    """Signs every unary call (`signing_interceptors` adds its streamed-reply twin)."""

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        return await continuation(self._signed(client_call_details), request)


class StreamSigningInterceptor(_Signing, grpc.aio.UnaryStreamClientInterceptor):
    """Signs every call with a streamed reply (GenerateChatCompletion). A channel files each
    interceptor under one kind only (the first it is an instance of), hence a class of its own."""

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        return await continuation(self._signed(client_call_details), request)


class RequestStreamSigningInterceptor(_Signing, grpc.aio.StreamUnaryClientInterceptor):
    """Signs every call with a streamed request (KnowledgeStore.ImportTenant)."""

    async def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return await continuation(self._signed(client_call_details), request_iterator)


def signing_interceptors(signer: ServiceSigner, audience: str) -> list[Any]:
    """The client interceptors that sign every call to `audience`: unary, streamed replies and
    streamed requests."""
    return [SigningInterceptor(signer, audience), StreamSigningInterceptor(signer, audience),
            RequestStreamSigningInterceptor(signer, audience)]


def require(principal: Principal | None, what: str) -> Principal:
    """The verified caller, or Unauthenticated when a call that needs one has none."""
    if principal is None:
        raise Unauthenticated(f"{what} needs a verified caller")
    return principal


__all__ = ["AuthServerInterceptor", "SigningInterceptor", "OPEN_SERVICES", "require"]
