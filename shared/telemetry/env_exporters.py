"""The exporters the standard OTEL_* variables ask for: OTLP (HTTP/protobuf, or gRPC when that
exporter is installed) and console (stderr).

OTLP export is on when OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER include `otlp`, or when
they are unset and OTEL_EXPORTER_OTLP_ENDPOINT (or the per-signal
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / _METRICS_ENDPOINT) is set. Endpoint, headers, timeout and
compression are read by the exporters themselves from the standard variables.
"""
from __future__ import annotations

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


def span_exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
    """The span exporter named by OTEL_TRACES_EXPORTER ("otlp", "console"); None for others."""
    if name == "otlp":
        protocol = _otlp_protocol(env, "traces")
        if protocol == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
                return GrpcExporter()
            except ImportError:
                log.warning("OTLP protocol 'grpc' requested but opentelemetry-exporter-otlp-proto-grpc is not "
                            "installed; exporting OTLP over HTTP/protobuf (point the endpoint at port 4318)")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        return ConsoleSpanExporter(out=sys.stderr)  # stdout belongs to stdio MCP
    log.warning("unsupported OTEL_TRACES_EXPORTER value %r ignored (supported: otlp, console, none)", name)
    return None


def metric_exporter(name: str, env: Mapping[str, str]) -> MetricExporter | None:
    """The metric exporter named by OTEL_METRICS_EXPORTER ("otlp", "console"); None for others."""
    if name == "otlp":
        protocol = _otlp_protocol(env, "metrics")
        if protocol == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                    OTLPMetricExporter as GrpcMetricExporter,
                )
                return GrpcMetricExporter()
            except ImportError:
                log.warning("OTLP protocol 'grpc' requested for metrics but the gRPC exporter is not installed; "
                            "exporting over HTTP/protobuf")
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        return OTLPMetricExporter()
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        return ConsoleMetricExporter(out=sys.stderr)
    log.warning("unsupported OTEL_METRICS_EXPORTER value %r ignored (supported: otlp, console, none)", name)
    return None


__all__ = ["exporters_for", "span_exporter", "metric_exporter"]
