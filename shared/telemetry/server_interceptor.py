"""ServerTracingInterceptor: the grpc.aio server interceptor every service's gRPC server
carries (`shared.service_runner`). `opentelemetry-api` only.

The caller's trace context is extracted from the W3C `traceparent` metadata and a SERVER span,
named and attributed as `shared.telemetry.rpc` describes, wraps the handler.
"""
from __future__ import annotations

import time
from typing import Any

import grpc
from opentelemetry import metrics, trace
from opentelemetry.propagate import extract
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.grpc_handlers import split_method, wrap_unary
from shared.telemetry.rpc import (
    RPC_METER_NAME, SERVER_DURATION, SERVER_ERROR_CODES, TRACER_NAME, UNTRACED_SERVICES, duration_histogram,
    exception_code, parse_target, status_code,
)


class _MetadataGetter(Getter[Any]):
    """Reads W3C headers from gRPC invocation metadata (a sequence of (key, value) pairs)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        values = [v for k, v in carrier if k == key and isinstance(v, str)]
        return values or None

    def keys(self, carrier: Any) -> list[str]:
        return [k for k, _ in carrier]


_GETTER = _MetadataGetter()


class ServerTracingInterceptor(grpc.aio.ServerInterceptor):
    """SERVER span per unary call, child of the caller's span (W3C `traceparent` metadata).

    Streaming methods, health checks and reflection pass through untraced. The handler's
    status comes from `context.abort` / `context.set_code`; an unhandled exception is UNKNOWN.
    """

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None,
                 untraced_services: frozenset[str] = UNTRACED_SERVICES) -> None:
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        meter = metrics.get_meter(RPC_METER_NAME, meter_provider=meter_provider)
        self._duration = duration_histogram(meter, *SERVER_DURATION)   # unrecorded spans only
        self._untraced = untraced_services

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        service, method = split_method(handler_call_details.method)
        if service in self._untraced:
            return handler
        inner = handler.unary_unary
        metadata = tuple(handler_call_details.invocation_metadata or ())
        tracer, duration = self._tracer, self._duration

        async def traced(request: Any, context: grpc.aio.ServicerContext) -> Any:
            attributes: dict[str, Any] = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            with tracer.start_as_current_span(
                f"{service}/{method}", context=extract(metadata, getter=_GETTER), kind=SpanKind.SERVER,
                attributes=attributes, record_exception=False, set_status_on_exception=False,
            ) as span:
                try:
                    response = await inner(request, context)
                    code = status_code(context.code()) if context.code() is not None else grpc.StatusCode.OK
                    return response
                except grpc.aio.AbortError:
                    code = status_code(context.code())
                    raise
                except BaseException as err:
                    code = exception_code(err)
                    if not isinstance(err, grpc.RpcError):
                        span.set_attribute("exception.type", type(err).__qualname__)
                    raise
                finally:
                    span.set_attribute("rpc.grpc.status_code", code.value[0])
                    peer = _peer_address(context)
                    if peer:
                        span.set_attribute("client.address", peer)
                    if code is not grpc.StatusCode.OK:
                        span.set_attribute("error.type", code.name)
                        attributes["error.type"] = code.name
                        if code in SERVER_ERROR_CODES:
                            span.set_status(Status(StatusCode.ERROR, code.name))
                    if not span.is_recording():     # else RpcDurations records it from the span
                        attributes["rpc.grpc.status_code"] = code.value[0]
                        duration.record(time.perf_counter() - started, attributes)

        return wrap_unary(handler, traced)


def _peer_address(context: Any) -> str:
    """'ipv4:127.0.0.1:53422' -> '127.0.0.1' (the port is ephemeral noise)."""
    try:
        peer = context.peer() or ""
    except Exception:  # noqa: BLE001 - a peer we cannot read is just not recorded
        return ""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host, _ = parse_target(rest if kind == "ipv4" else rest.replace("%5B", "[").replace("%5D", "]"))
        return host
    return ""


__all__ = ["ServerTracingInterceptor"]
