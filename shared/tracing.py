"""Tracing helpers for libraries and cores: `opentelemetry-api` only.

The SDK (exporters, processors, resource) is configured once per process by
`shared.telemetry`; everything here works unchanged (as a cheap no-op) when it is not.

    ClientTracingInterceptor   grpc.aio unary-unary client interceptor: a CLIENT span per call,
                               W3C `traceparent` injected into the call metadata
    ServerTracingInterceptor   grpc.aio server interceptor: the caller's context extracted from
                               the metadata, a SERVER span around the handler
    RpcDurations               `rpc.client.call.duration` / `rpc.server.call.duration` from an
                               ended RPC span (see "Call durations" below)
    embeddings_span()          a GenAI "embeddings" span (semantic conventions for GenAI)
    retrieval_attributes()     GenAI "retrieval" attributes on a retrieval stage's span
    capture_content()          whether query / document text may go on spans
                               (NUCLEUS_OTEL_CAPTURE_CONTENT=true; off by default)
    set_content_attribute()    put text on a span only when content capture is on

Attributes follow the RPC semantic conventions: span name `{rpc.service}/{rpc.method}`,
`rpc.system="grpc"`, `rpc.service`, `rpc.method`, `rpc.grpc.status_code` (int),
`server.address` / `server.port` on the client, `client.address` on the server, and
`error.type` (the status code name) when the call did not end OK.

Call durations: every call is counted in `rpc.{client,server}.call.duration`, with the span's
RPC attributes (rpc.system, rpc.service, rpc.method, rpc.grpc.status_code, error.type, and
server.address / server.port on the client). A call whose span is recorded gets its duration
from that span, on the span processors' worker thread (`RpcDurations`, fed by
`shared.telemetry.StageMetrics`), so the request path pays nothing for it; a call whose span a
sampler dropped is recorded by the interceptor itself, inline.
"""
from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
from opentelemetry import metrics, trace
from opentelemetry.propagate import extract, inject
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode

CAPTURE_CONTENT_ENV = "NUCLEUS_OTEL_CAPTURE_CONTENT"
CONTENT_MAX_CHARS = 1_024
_TRUE = {"1", "true", "yes", "on"}

#: Services whose calls are not traced: probes and tooling would bury the real traffic.
UNTRACED_SERVICES = frozenset({
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
})

#: Latency histogram buckets in seconds (advisory; from 1 ms to 60 s).
DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# gRPC server spans are errors only for these codes (RPC semantic conventions); client spans
# are errors for any code but OK.
_SERVER_ERROR_CODES = frozenset({
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
})
_CODE_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}

_TRACER_NAME = "nucleus.grpc"


# ---------------------------------------------------------------------------- content capture
@functools.cache
def capture_content() -> bool:
    """True when NUCLEUS_OTEL_CAPTURE_CONTENT is set to true/1/yes/on (read once per process)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE


def set_content_attribute(span: trace.Span, key: str, text: str | Sequence[str]) -> None:
    """Put query/document text on `span`, truncated, only when content capture is on."""
    if not capture_content() or not span.is_recording():
        return
    if isinstance(text, str):
        span.set_attribute(key, text[:CONTENT_MAX_CHARS])
    else:
        span.set_attribute(key, [t[:CONTENT_MAX_CHARS] for t in text])


# ---------------------------------------------------------------------------- GenAI embeddings
_GENAI_PROVIDERS = {"openai": "openai", "local": "sentence_transformers"}


@contextmanager
def embeddings_span(model: str, provider: str, count: int, *,
                    tracer_provider: trace.TracerProvider | None = None) -> Iterator[trace.Span]:
    """A span for one embeddings call, per the GenAI semantic conventions.

    Name `embeddings {model}`; CLIENT when a remote provider answers, INTERNAL for the
    in-process model. The caller adds `gen_ai.response.model` and
    `gen_ai.embeddings.dimension.count` once the vectors are back (see `end_embeddings`).
    """
    genai_provider = _GENAI_PROVIDERS.get(provider, provider or "unknown")
    tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
    with tracer.start_as_current_span(
        f"embeddings {model}" if model else "embeddings",
        kind=SpanKind.CLIENT if provider == "openai" else SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": genai_provider,
            "gen_ai.system": genai_provider,
            "nucleus.embeddings.count": count,
        },
    ) as span:
        yield span


def end_embeddings(span: trace.Span, *, model: str, dimension: int, cache_hits: int = 0) -> None:
    """Attributes known once the embeddings came back."""
    if span.is_recording():
        span.set_attribute("gen_ai.response.model", model)
        span.set_attribute("gen_ai.embeddings.dimension.count", dimension)
        span.set_attribute("nucleus.embeddings.cache_hits", cache_hits)


# ---------------------------------------------------------------------------- gRPC helpers
class _MetadataGetter(Getter[Any]):
    """Reads W3C headers from gRPC invocation metadata (a sequence of (key, value) pairs)."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        values = [v for k, v in carrier if k == key and isinstance(v, str)]
        return values or None

    def keys(self, carrier: Any) -> list[str]:
        return [k for k, _ in carrier]


_GETTER = _MetadataGetter()


def split_method(full_method: str | bytes) -> tuple[str, str]:
    """'/nucleus.v1.KnowledgeStore/IngestDocuments' -> ('nucleus.v1.KnowledgeStore', 'IngestDocuments')."""
    if isinstance(full_method, bytes):
        full_method = full_method.decode("ascii", "replace")
    service, _, method = full_method.lstrip("/").partition("/")
    return service, method


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


def _duration_histogram(meter: metrics.Meter, name: str, description: str) -> metrics.Histogram:
    return meter.create_histogram(name, unit="s", description=description,
                                  explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)


RPC_METER_NAME = _TRACER_NAME
_CLIENT_DURATION = ("rpc.client.call.duration", "Duration of outgoing gRPC calls, retries included")
_SERVER_DURATION = ("rpc.server.call.duration", "Duration of served gRPC calls")
_METRIC_ATTRIBUTES = {
    SpanKind.CLIENT: ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code", "error.type",
                      "server.address", "server.port"),
    SpanKind.SERVER: ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code", "error.type"),
}


class RpcDurations:
    """The call-duration histograms, recorded from ended gRPC CLIENT / SERVER spans.

    Give it the meter named `RPC_METER_NAME` of the provider the interceptors use: both then
    write to the same instruments (the interceptors only for calls whose span is not recorded).
    """

    def __init__(self, meter: metrics.Meter) -> None:
        self._histograms = {SpanKind.CLIENT: _duration_histogram(meter, *_CLIENT_DURATION),
                            SpanKind.SERVER: _duration_histogram(meter, *_SERVER_DURATION)}

    def record_span(self, span: Any) -> bool:
        """Record `span` (an SDK ReadableSpan) if it is a gRPC call span; True if it was."""
        keys = _METRIC_ATTRIBUTES.get(span.kind)
        attributes = span.attributes or {}
        if keys is None or attributes.get("rpc.system") != "grpc" or span.end_time is None:
            return False
        self._histograms[span.kind].record(
            (span.end_time - span.start_time) / 1e9, {k: attributes[k] for k in keys if k in attributes})
        return True


def _code(value: Any) -> grpc.StatusCode:
    if isinstance(value, grpc.StatusCode):
        return value
    if isinstance(value, int):
        return _CODE_BY_VALUE.get(value, grpc.StatusCode.UNKNOWN)
    return grpc.StatusCode.UNKNOWN


# ---------------------------------------------------------------------------- client
class ClientTracingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """CLIENT span per unary call with the trace context sent as W3C `traceparent` metadata.

    One span covers the whole call, including the channel's own retries (they happen below
    the interceptor). Request and response messages are never recorded.
    """

    def __init__(self, target: str, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)
        meter = metrics.get_meter(RPC_METER_NAME, meter_provider=meter_provider)
        self._duration = _duration_histogram(meter, *_CLIENT_DURATION)   # unrecorded spans only
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
                code = _code(await call.code())
                return call
            except BaseException as err:  # cancellation (a caller's deadline) or a local failure
                code = _exception_code(err)
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


def _exception_code(err: BaseException) -> grpc.StatusCode:
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return _code(err.code())
    if isinstance(err, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


# ---------------------------------------------------------------------------- server
class ServerTracingInterceptor(grpc.aio.ServerInterceptor):
    """SERVER span per unary call, child of the caller's span (W3C `traceparent` metadata).

    Streaming methods, health checks and reflection pass through untraced. The handler's
    status comes from `context.abort` / `context.set_code`; an unhandled exception is UNKNOWN.
    """

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None,
                 meter_provider: metrics.MeterProvider | None = None,
                 untraced_services: frozenset[str] = UNTRACED_SERVICES) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)
        meter = metrics.get_meter(RPC_METER_NAME, meter_provider=meter_provider)
        self._duration = _duration_histogram(meter, *_SERVER_DURATION)   # unrecorded spans only
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
                    code = _code(context.code()) if context.code() is not None else grpc.StatusCode.OK
                    return response
                except grpc.aio.AbortError:
                    code = _code(context.code())
                    raise
                except BaseException as err:
                    code = _exception_code(err)
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
                        if code in _SERVER_ERROR_CODES:
                            span.set_status(Status(StatusCode.ERROR, code.name))
                    if not span.is_recording():     # else RpcDurations records it from the span
                        attributes["rpc.grpc.status_code"] = code.value[0]
                        duration.record(time.perf_counter() - started, attributes)

        return grpc.unary_unary_rpc_method_handler(
            traced, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


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


def trace_context_meta() -> dict[str, str]:
    """The current trace context as a dict for an MCP request's `_meta` (SEP-414)."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier


# ---------------------------------------------------------------------------- GenAI retrieval
def retrieval_attributes(span: trace.Span, *, data_source: str, top_k: int, query: str | Sequence[str]) -> None:
    """Mark `span` as a GenAI "retrieval" operation against `data_source` (query text only
    when content capture is on)."""
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.operation.name", "retrieval")
    span.set_attribute("gen_ai.data_source.id", data_source)
    span.set_attribute("gen_ai.request.top_k", top_k)
    set_content_attribute(span, "gen_ai.retrieval.query.text", query)


__all__ = [
    "CAPTURE_CONTENT_ENV", "ClientTracingInterceptor", "ServerTracingInterceptor", "RpcDurations",
    "RPC_METER_NAME", "UNTRACED_SERVICES",
    "capture_content", "set_content_attribute", "embeddings_span", "end_embeddings", "split_method",
    "parse_target", "trace_context_meta", "retrieval_attributes",
]
