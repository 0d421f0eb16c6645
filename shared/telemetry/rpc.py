"""gRPC under the RPC semantic conventions: what both tracing interceptors and the span-derived
metrics share. `opentelemetry-api` only.

Attributes: span name `{rpc.service}/{rpc.method}`, `rpc.system="grpc"`, `rpc.service`,
`rpc.method`, `rpc.grpc.status_code` (int), `server.address` / `server.port` on the client,
`client.address` on the server, and `error.type` (the status code name) when the call did not
end OK. Server spans are errors only for the codes in SERVER_ERROR_CODES; client spans for
any code but OK.

Call durations: every call is counted in `rpc.{client,server}.call.duration`, with the span's
RPC attributes (rpc.system, rpc.service, rpc.method, rpc.grpc.status_code, error.type, and
server.address / server.port on the client). A call whose span is recorded gets its duration
from that span, on the span processors' worker thread (`RpcDurations`, fed by
`shared.telemetry.stage_metrics.StageMetrics`), so the request path pays nothing for it; a
call whose span a sampler dropped is recorded by the interceptor itself, inline.
"""
from __future__ import annotations

import asyncio
from typing import Any

import grpc
from opentelemetry import metrics
from opentelemetry.trace import SpanKind

from shared.grpc_handlers import PROBE_SERVICES, split_method

#: Services whose calls are not traced: probes and tooling would bury the real traffic.
UNTRACED_SERVICES = PROBE_SERVICES

#: Latency histogram buckets in seconds (advisory; from 1 ms to 60 s).
DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: gRPC server spans are errors only for these codes (RPC semantic conventions); client spans
#: are errors for any code but OK.
SERVER_ERROR_CODES = frozenset({
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
})
_CODE_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}

#: The tracer of the interceptors' spans, and the meter of the call-duration histograms.
TRACER_NAME = "nucleus.grpc"
RPC_METER_NAME = TRACER_NAME
CLIENT_DURATION = ("rpc.client.call.duration", "Duration of outgoing gRPC calls, retries included")
SERVER_DURATION = ("rpc.server.call.duration", "Duration of served gRPC calls")
_METRIC_ATTRIBUTES = {
    SpanKind.CLIENT: ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code", "error.type",
                      "server.address", "server.port"),
    SpanKind.SERVER: ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code", "error.type"),
}


def parse_target(target: str) -> tuple[str, int | None]:
    """Host and port of a gRPC target ('host:port', 'dns:///host:port', '[::1]:50061')."""
    address = target.split("///", 1)[-1] if "///" in target else target
    if address.startswith("unix:"):
        return address, None
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            return address, None
    return host, int(port) if port.isdigit() else None


def duration_histogram(meter: metrics.Meter, name: str, description: str) -> metrics.Histogram:
    """A call-duration histogram in seconds with DURATION_BUCKETS_S as its advisory buckets."""
    return meter.create_histogram(name, unit="s", description=description,
                                  explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)


class RpcDurations:
    """The call-duration histograms, recorded from ended gRPC CLIENT / SERVER spans.

    Give it the meter named `RPC_METER_NAME` of the provider the interceptors use: both then
    write to the same instruments (the interceptors only for calls whose span is not recorded).
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self._histograms = {SpanKind.CLIENT: duration_histogram(meter, *CLIENT_DURATION),
                            SpanKind.SERVER: duration_histogram(meter, *SERVER_DURATION)}

    def record_span(self, span: Any) -> bool:
        """Record `span` (an SDK ReadableSpan) if it is a gRPC call span; True if it was."""
        keys = _METRIC_ATTRIBUTES.get(span.kind)
        attributes = span.attributes or {}
        if keys is None or attributes.get("rpc.system") != "grpc" or span.end_time is None:
            return False
        self._histograms[span.kind].record(
            (span.end_time - span.start_time) / 1e9, {k: attributes[k] for k in keys if k in attributes})
        return True


def status_code(value: Any) -> grpc.StatusCode:
    """A gRPC status code from a StatusCode or its int value; UNKNOWN for anything else."""
    if isinstance(value, grpc.StatusCode):
        return value
    if isinstance(value, int):
        return _CODE_BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)
    return grpc.StatusCode.UNKNOWN


def exception_code(err: BaseException) -> grpc.StatusCode:
    """The status a call ends with when `err` escapes it (CANCELLED for a cancellation)."""
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return status_code(err.code())
    if isinstance(err, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


__all__ = [
    "UNTRACED_SERVICES", "DURATION_BUCKETS_S", "SERVER_ERROR_CODES", "TRACER_NAME", "RPC_METER_NAME",
    "CLIENT_DURATION", "SERVER_DURATION", "parse_target", "duration_histogram", "RpcDurations",
    "status_code", "exception_code",
]
