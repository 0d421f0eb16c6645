"""The exporters the standard OTEL_* variables ask for: OTLP (HTTP/protobuf, or gRPC when that
exporter is installed) and console (stderr).

OTLP export is on when OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER include `otlp`, or when
they are unset and OTEL_EXPORTER_OTLP_ENDPOINT (or the per-signal
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / _METRICS_ENDPOINT) is set. Endpoint, headers, timeout and
compression are read by the exporters themselves from the standard variables.
"""
from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Mapping

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)


def _env_list(env: Mapping[str, str], name: str) -> list[str] | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    return [v.strip().lower() for v in raw.split(",") if v.strip()]


def exporters_for(env: Mapping[str, str], signal: str) -> list[str]:
    """Exporter names for 'traces' or 'metrics' from OTEL_<SIGNAL>_EXPORTER and the endpoints."""
    explicit = _env_list(env, f"OTEL_{signal.upper()}_EXPORTER")
    if explicit is not None:
        return [e for e in explicit if e != "none"] if "none" not in explicit else []
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return ["otlp"] if endpoint else []


def _otlp_protocol(env: Mapping[str, str], signal: str) -> str:
    return (env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf").strip().lower()


#: Per signal: the OTLP exporter's module (under opentelemetry.exporter.otlp.proto.<grpc|http>) and
#: class, the console exporter's module and class.
_EXPORTERS = {
    "traces": ("trace_exporter", "OTLPSpanExporter", "opentelemetry.sdk.trace.export", "ConsoleSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter", "opentelemetry.sdk.metrics.export", "ConsoleMetricExporter"),
}


def _exporter(name: str, env: Mapping[str, str], signal: str):
    """The exporter OTEL_<SIGNAL>_EXPORTER names ("otlp", "console"); None for others. OTLP over
    gRPC when asked for and installed, else over HTTP/protobuf."""
    otlp_module, otlp_class, console_module, console_class = _EXPORTERS[signal]
    if name == "otlp":
        if _otlp_protocol(env, signal) == "grpc":
            try:
                return getattr(importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{otlp_module}"),
                               otlp_class)()
            except ImportError:
                log.warning("OTLP protocol 'grpc' requested for %s but opentelemetry-exporter-otlp-proto-grpc is "
                            "not installed; exporting OTLP over HTTP/protobuf (point the endpoint at port 4318)",
                            signal)
        return getattr(importlib.import_module(f"opentelemetry.exporter.otlp.proto.http.{otlp_module}"), otlp_class)()
    if name == "console":
        return getattr(importlib.import_module(console_module), console_class)(out=sys.stderr)  # stdout: stdio MCP
    log.warning("unsupported OTEL_%s_EXPORTER value %r ignored (supported: otlp, console, none)", signal.upper(), name)
    return None


def span_exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
    """The span exporter named by OTEL_TRACES_EXPORTER ("otlp", "console"); None for others."""
    return _exporter(name, env, "traces")


def metric_exporter(name: str, env: Mapping[str, str]) -> MetricExporter | None:
    """The metric exporter named by OTEL_METRICS_EXPORTER ("otlp", "console"); None for others."""
    return _exporter(name, env, "metrics")


__all__ = ["exporters_for", "span_exporter", "metric_exporter"]
