"""The OpenTelemetry SDK, configured once per service process (`setup_telemetry` in the runner).

Libraries and cores use `opentelemetry-api` only (the API modules of `shared.telemetry`); this
module is the one place that installs the SDK:

    TracerProvider  Resource(service.name, service.version, deployment.environment, ...)
      ├── RedactingSpanProcessor(JsonlSpanExporter)    <trace dir>/<service>.jsonl, rotated
      ├── RedactingSpanProcessor(OTLPSpanExporter)     when the OTEL_* variables ask for it
      ├── RedactingSpanProcessor(ConsoleSpanExporter)  OTEL_TRACES_EXPORTER=console (stderr)
      └── StageMetricsProcessor    calls / errors / duration per stage (span name), and the
                                   Prometheus series of /metrics (shared/telemetry/prometheus.py)
    Each RedactingSpanProcessor is the safety net in front of one exporter: a batch processor
    whose worker thread applies the Redactor (no secrets; no content unless enabled).
    MeterProvider
      ├── PeriodicExportingMetricReader(OTLPMetricExporter)   when the OTEL_* variables ask
      └── PeriodicExportingMetricReader(JsonlMetricExporter)  <trace dir>/<service>.metrics.jsonl

OTLP (HTTP/protobuf) export is on when OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER include
`otlp`, or when they are unset and OTEL_EXPORTER_OTLP_ENDPOINT (or the per-signal
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / _METRICS_ENDPOINT) is set. Endpoint, headers, timeout,
compression, batch delay (OTEL_BSP_*), sampler (OTEL_TRACES_SAMPLER) and extra resource
attributes (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME) are read by the SDK from the standard
variables. OTEL_SDK_DISABLED=true turns all of it off.

Nucleus settings (NUCLEUS_OTEL_*, `TelemetrySettings`): the local trace files (on by default,
so a trace can be read with `nucleus traces` and no collector), their size bound, content
capture (off by default) and the deployment environment name.

On the request path a span costs its creation and a queue append per processor; redaction,
metrics and export run on the processors' threads. At exit, what is buffered is exported
within a few seconds (`shutdown_telemetry`), the local file first.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from shared.telemetry.env_exporters import exporters_for, metric_exporter, span_exporter
from shared.telemetry.prometheus import service_metrics
from shared.telemetry.file_exporters import JsonlMetricExporter, JsonlSpanExporter
from shared.telemetry.resource import build_resource
from shared.telemetry.rpc import RPC_METER_NAME
from shared.settings import TelemetrySettings
from shared.telemetry.span_redaction import RedactingSpanProcessor
from shared.telemetry.stage_metrics import StageMetrics, StageMetricsProcessor

log = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
#: How stale the span-derived series may be: the stage-metrics processor's batch delay.
STAGE_METRICS_DELAY_MS = 1_000


@dataclass
class Telemetry:
    """What `build_telemetry` installed; `flush()` before a graceful exit."""

    service: str
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporters: list[str] = field(default_factory=list)      # e.g. ["otlp", "file"]
    trace_file: Path | None = None
    metrics_file: Path | None = None

    def flush(self, timeout_millis: int = 5_000) -> None:
        """Blocking: waits for the exporters (use `shutdown_telemetry` on the way out)."""
        self.tracer_provider.force_flush(timeout_millis)
        self.meter_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def build_telemetry(service: str, settings: TelemetrySettings | None = None, *,
                    env: Mapping[str, str] | None = None,
                    extra_span_exporters: Sequence[SpanExporter] = (),
                    extra_metric_readers: Sequence[MetricReader] = ()) -> Telemetry:
    """Providers for `service` ("knowledge_store", "llm_orchestration", "rag_pipeline"), not
    installed globally (tests use this directly; processes use `setup_telemetry`)."""
    settings = settings or TelemetrySettings()
    env = os.environ if env is None else env
    resource = build_resource(service, settings, env)

    span_exporters: list[SpanExporter] = []
    exporters: list[str] = []
    for name in exporters_for(env, "traces"):
        exporter = span_exporter(name, env)
        if exporter is not None:
            span_exporters.append(exporter)
            exporters.append(name)
    trace_file = None
    if settings.trace_file:
        trace_file = settings.resolved_trace_dir() / f"{service}.jsonl"
        span_exporters.append(JsonlSpanExporter(
            trace_file, max_bytes=settings.trace_file_max_bytes, backups=settings.trace_file_backups))
        exporters.append("file")
    span_exporters.extend(extra_span_exporters)

    readers: list[MetricReader] = list(extra_metric_readers)
    for name in exporters_for(env, "metrics"):
        exporter_for_reader = metric_exporter(name, env)
        if exporter_for_reader is not None:
            readers.append(PeriodicExportingMetricReader(exporter_for_reader))
    metrics_file = None
    if settings.metrics_file and settings.trace_file:
        metrics_file = settings.resolved_trace_dir() / f"{service}.metrics.jsonl"
        readers.append(PeriodicExportingMetricReader(
            JsonlMetricExporter(metrics_file, max_bytes=settings.trace_file_max_bytes,
                                backups=settings.trace_file_backups),
            export_interval_millis=settings.metrics_file_interval_s * 1000))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)

    # The local file first: at shutdown it is flushed before a slow collector is waited for.
    span_exporters.sort(key=lambda e: not isinstance(e, JsonlSpanExporter))
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in span_exporters:
        tracer_provider.add_span_processor(RedactingSpanProcessor([exporter],
                                                                  capture_content=settings.capture_content))
    tracer_provider.add_span_processor(StageMetricsProcessor(StageMetrics(
        meter_provider.get_meter("nucleus.stages"), rpc_meter=meter_provider.get_meter(RPC_METER_NAME),
        prometheus=service_metrics(service) if settings.prometheus else None),
        schedule_delay_millis=STAGE_METRICS_DELAY_MS))
    return Telemetry(service=service, tracer_provider=tracer_provider, meter_provider=meter_provider,
                     exporters=exporters, trace_file=trace_file, metrics_file=metrics_file)


_installed: Telemetry | None = None
_stopped = False
_install_lock = threading.Lock()
SHUTDOWN_TIMEOUT_S = 3.0


def setup_telemetry(service: str, settings: TelemetrySettings | None = None) -> Telemetry | None:
    """Install the SDK for this process, once (later calls return the first result).

    Returns None when OTEL_SDK_DISABLED=true: the API stays a no-op. Buffered telemetry is
    exported at exit within SHUTDOWN_TIMEOUT_S (`shutdown_telemetry`).
    """
    global _installed
    with _install_lock:
        if _installed is not None:
            return _installed
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
            log.info("OpenTelemetry SDK disabled (OTEL_SDK_DISABLED)")
            return None
        telemetry = build_telemetry(service, settings)
        trace.set_tracer_provider(telemetry.tracer_provider)
        metrics.set_meter_provider(telemetry.meter_provider)
        _installed = telemetry
        atexit.register(shutdown_telemetry)
    log.info("telemetry for %s: traces -> %s%s", service, ", ".join(telemetry.exporters) or "nowhere",
             f" ({telemetry.trace_file})" if telemetry.trace_file else "")
    return telemetry


def shutdown_telemetry(timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """Export what is buffered (the local file first) and stop, giving up after `timeout_s`
    so an unreachable collector never stretches a graceful shutdown. Idempotent."""
    global _stopped
    with _install_lock:
        if _installed is None or _stopped:
            return
        _stopped = True
    worker = threading.Thread(target=_installed.shutdown, name="otel-shutdown", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        log.warning("telemetry not fully exported within %.1fs (collector unreachable?); the rest is dropped",
                    timeout_s)


__all__ = ["Telemetry", "build_telemetry", "setup_telemetry", "shutdown_telemetry", "SHUTDOWN_TIMEOUT_S"]
