"""Telemetry of calls between services that share one process (`nucleus up --mode single`).

    rpc_span(service, method)    the INTERNAL span of one in-process call, named and attributed
                                 as the gRPC call's spans are (`shared.telemetry.rpc`:
                                 `{rpc.service}/{rpc.method}`, rpc.system, rpc.service,
                                 rpc.method, rpc.grpc.status_code, error.type), plus
                                 `nucleus.transport = "in-process"`; an error is recorded as the
                                 status code the gRPC adapter would have answered
    in_service(name)             the spans started inside belong to service `name`
    setup_routed_telemetry(...)  one SDK per service (its resource, its trace file, its metrics),
                                 behind one global TracerProvider that hands each span to the
                                 provider of the service whose code runs (`in_service`), so a
                                 trace reads the same as across processes: the same span names,
                                 the same service per span, one connected tree

Which service runs is a context variable: each service's servers are started inside
`in_service(its name)` (tasks inherit it), and an in-process call switches it to the callee for
the duration of the call. `opentelemetry-api` only, except `setup_routed_telemetry`, which the
composition root calls once.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.errors import NucleusError
from shared.grpc_errors import grpc_status
from shared.telemetry.rpc import SERVER_ERROR_CODES, TRACER_NAME, exception_code

#: The service whose code runs in this context ("" = not said: the process's first service).
CURRENT_SERVICE: ContextVar[str] = ContextVar("nucleus_current_service", default="")
TRANSPORT_ATTRIBUTE = "nucleus.transport"

_tracer = trace.get_tracer(TRACER_NAME)


@contextmanager
def in_service(name: str) -> Iterator[None]:
    token = CURRENT_SERVICE.set(name)
    try:
        yield
    finally:
        CURRENT_SERVICE.reset(token)


def error_code(err: BaseException) -> grpc.StatusCode:
    """The status code a gRPC adapter would have answered `err` with."""
    if isinstance(err, NucleusError):
        return grpc_status(err)
    return exception_code(err)


@contextmanager
def rpc_span(service: str, method: str, *, callee: str = "",
             tracer_provider: trace.TracerProvider | None = None) -> Iterator[trace.Span]:
    """An INTERNAL span for one in-process call of `service`/`method` ("nucleus.v1.KnowledgeStore",
    "GetEntries"), run as service `callee` when given (module docstring). `tracer_provider`:
    the global one unless given (tests)."""
    tracer = _tracer if tracer_provider is None else trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    attributes: dict[str, Any] = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method,
                                  TRANSPORT_ATTRIBUTE: "in-process"}
    token = CURRENT_SERVICE.set(callee) if callee else None
    try:
        with tracer.start_as_current_span(f"{service}/{method}", kind=SpanKind.INTERNAL, attributes=attributes,
                                           record_exception=False, set_status_on_exception=False) as span:
            code = grpc.StatusCode.OK
            try:
                yield span
            except BaseException as err:
                code = error_code(err)
                if not isinstance(err, NucleusError):
                    span.set_attribute("exception.type", type(err).__qualname__)
                raise
            finally:
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code is not grpc.StatusCode.OK:
                    span.set_attribute("error.type", code.name)
                    if code in SERVER_ERROR_CODES:
                        span.set_status(Status(StatusCode.ERROR, code.name))
    finally:
        if token is not None:
            CURRENT_SERVICE.reset(token)


class _RoutedTracer(trace.Tracer):
    """A tracer that starts each span with the tracer of the service whose code runs."""

    def __init__(self, tracers: Mapping[str, trace.Tracer], default: str) -> None:
        self._tracers = dict(tracers)
        self._default = self._tracers[default]

    def _pick(self) -> trace.Tracer:
        return self._tracers.get(CURRENT_SERVICE.get(), self._default)

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._pick().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any):   # the picked tracer's own context manager
        return self._pick().start_as_current_span(*args, **kwargs)


class RoutedTracerProvider(trace.TracerProvider):
    """The process's TracerProvider over one provider per service (module docstring)."""

    def __init__(self, providers: Mapping[str, trace.TracerProvider], default: str) -> None:
        self._providers = dict(providers)
        self._default = default

    def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _RoutedTracer({name: p.get_tracer(instrumenting_module_name, *args, **kwargs)
                              for name, p in self._providers.items()}, self._default)


def setup_routed_telemetry(services: tuple[str, ...], default: str) -> list[Any]:
    """Install one SDK per service behind a RoutedTracerProvider; the meter provider of
    `default` is the process's global one. Returns the `Telemetry` objects (flush / shut down
    each at exit); [] when OTEL_SDK_DISABLED=true."""
    import os

    from opentelemetry import metrics

    from shared.telemetry.providers import build_telemetry

    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() in {"1", "true", "yes", "on"}:
        return []
    from shared.telemetry.prometheus import service_metrics

    service_metrics(default)        # made first: `default`'s /metrics carries the process series, once
    installed = {name: build_telemetry(name) for name in services}
    trace.set_tracer_provider(RoutedTracerProvider({n: t.tracer_provider for n, t in installed.items()}, default))
    metrics.set_meter_provider(installed[default].meter_provider)
    return list(installed.values())


__all__ = ["CURRENT_SERVICE", "RoutedTracerProvider", "error_code", "in_service", "rpc_span",
           "setup_routed_telemetry"]
