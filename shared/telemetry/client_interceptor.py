"""ClientTracingInterceptor: the grpc.aio unary-unary client interceptor every channel of ours
carries (`shared.grpc_client.aio_channel`). `opentelemetry-api` only.

A CLIENT span per call, named and attributed as `shared.telemetry.rpc` describes, with the
trace context sent as W3C `traceparent` metadata.
"""
from __future__ import annotations

import time
from typing import Any

import grpc
from opentelemetry import metrics, trace
from opentelemetry.propagate import inject
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.grpc_handlers import split_method
from shared.telemetry.rpc import (
    CLIENT_DURATION, RPC_METER_NAME, TRACER_NAME, UNTRACED_SERVICES, duration_histogram, exception_code, parse_target,
    status_code,
)


class ClientTracingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """CLIENT span per unary call with the trace context sent as W3C `traceparent` metadata.

    One span covers the whole call, including the channel's own retries (they happen below
    the interceptor). Request and response messages are never recorded.
    """

    def __init__(self, target: str, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None) -> None:
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        meter = metrics.get_meter(RPC_METER_NAME, meter_provider=meter_provider)
        self._duration = duration_histogram(meter, *CLIENT_DURATION)   # unrecorded spans only
        host, port = parse_target(target)
        self._peer: dict[str, Any] = {"server.address": host}
        if port is not None:
            self._peer["server.port"] = port

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        service, method = split_method(client_call_details.method)
        if service in UNTRACED_SERVICES:
            return await continuation(client_call_details, request)
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method, **self._peer}
        started = time.perf_counter()
        code = grpc.StatusCode.UNKNOWN
        with self._tracer.start_as_current_span(
            f"{service}/{method}", kind=SpanKind.CLIENT, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                call = await continuation(_with_trace_context(client_call_details), request)
                code = status_code(await call.code())
                return call
            except BaseException as err:  # cancellation (a caller's deadline) or a local failure
                code = exception_code(err)
                raise
            finally:
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code is not grpc.StatusCode.OK:
                    attributes["error.type"] = code.name
                    span.set_attribute("error.type", code.name)
                    span.set_status(Status(StatusCode.ERROR, code.name))
                if not span.is_recording():     # else RpcDurations records it from the span
                    attributes["rpc.grpc.status_code"] = code.value[0]
                    self._duration.record(time.perf_counter() - started, attributes)


def _with_trace_context(details: Any) -> Any:
    carrier: dict[str, str] = {}
    inject(carrier)
    if not carrier:
        return details
    metadata = grpc.aio.Metadata()
    for key, value in details.metadata or ():
        if key not in carrier:
            metadata.add(key, value)
    for key, value in carrier.items():
        metadata.add(key, value)
    return details._replace(metadata=metadata)


__all__ = ["ClientTracingInterceptor"]
