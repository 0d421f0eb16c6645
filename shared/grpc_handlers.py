"""What every gRPC server interceptor of ours needs: a method's service and name, the probe and
tooling services that carry no user traffic, and a unary handler re-wrapped around a new
behaviour (the tracing, authentication and rate-limit interceptors all wrap the same way)."""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import grpc

#: Health checks and reflection: not traced, not rate limited (authentication exempts health only).
PROBE_SERVICES = frozenset({
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
})

Behaviour = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def split_method(full_method: str | bytes) -> tuple[str, str]:
    """'/nucleus.v1.KnowledgeStore/IngestDocuments' -> ('nucleus.v1.KnowledgeStore', 'IngestDocuments')."""
    if isinstance(full_method, bytes):
        full_method = full_method.decode("ascii", "replace")
    service, _, method = full_method.lstrip("/").partition("/")
    return service, method


def wrap_unary(handler: Any, behaviour: Behaviour) -> Any:
    """A unary-unary handler with `handler`'s (de)serialisers running `behaviour`."""
    return grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)


def wrap_unary_stream(handler: Any, behaviour: Any) -> Any:
    """A unary-stream handler with `handler`'s (de)serialisers running `behaviour` (an async generator)."""
    return grpc.unary_stream_rpc_method_handler(
        behaviour, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)


def wrap_stream_unary(handler: Any, behaviour: Behaviour) -> Any:
    """A stream-unary handler (streamed request) with `handler`'s (de)serialisers running `behaviour`."""
    return grpc.stream_unary_rpc_method_handler(
        behaviour, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)


__all__ = ["PROBE_SERVICES", "split_method", "wrap_stream_unary", "wrap_unary", "wrap_unary_stream"]
