"""The OpenTelemetry SDK, configured once per service process (`setup_telemetry` in the runner).

Libraries and cores use `opentelemetry-api` only (and `shared.tracing`); this module is the
one place that installs the SDK:

    TracerProvider  Resource(service.name, service.version, deployment.environment, ...)
      ├── RedactingSpanProcessor(JsonlSpanExporter)    <trace dir>/<service>.jsonl, rotated
      ├── RedactingSpanProcessor(OTLPSpanExporter)     when the OTEL_* variables ask for it
      ├── RedactingSpanProcessor(ConsoleSpanExporter)  OTEL_TRACES_EXPORTER=console (stderr)
      └── StageMetricsProcessor    calls / errors / duration per stage (span name)
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
import json
import logging
import os
import re
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, TextIO

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.status import Status
from opentelemetry.util.types import AttributeValue
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.log import redact
from shared.settings import default_data_dir
from shared.tracing import DURATION_BUCKETS_S, RPC_METER_NAME, RpcDurations

log = logging.getLogger(__name__)

SERVICE_NAMES = {
    "knowledge_store": "nucleus-knowledge-store",
    "llm_orchestration": "nucleus-llm-orchestration",
    "rag_pipeline": "nucleus-rag-pipeline",
}
REDACTED = "[REDACTED]"
_TRUE = {"1", "true", "yes", "on"}


class TelemetrySettings(BaseSettings):
    """NUCLEUS_OTEL_*: what the standard OTEL_* variables do not cover."""

    model_config = SettingsConfigDict(env_prefix="NUCLEUS_OTEL_", extra="ignore", frozen=True)

    environment: str = "local"              # deployment.environment(.name)
    capture_content: bool = False           # query / document text on spans (see shared.tracing)
    trace_file: bool = True                 # local JSONL trace files, read by `nucleus traces`
    trace_dir: Path | None = None           # default <NUCLEUS_DATA_DIR>/traces
    trace_file_max_bytes: int = 16 * 1024 * 1024
    trace_file_backups: int = 2             # <service>.jsonl.1 … .N kept after rotation
    metrics_file: bool = True               # periodic JSONL metrics dump beside the traces
    metrics_file_interval_s: float = 60.0

    def resolved_trace_dir(self) -> Path:
        return self.trace_dir if self.trace_dir is not None else default_data_dir() / "traces"


# ---------------------------------------------------------------------------- safety net
# Keys whose value is a credential, whatever it looks like (last dotted segment).
_SECRET_KEY = re.compile(
    r"(?i)(?:^|[._-])(authorization|proxy-authorization|auth|api[_-]?key|apikey|access[_-]?token|"
    r"refresh[_-]?token|id[_-]?token|bearer|token|secret|client[_-]?secret|password|passwd|pwd|cookie|"
    r"set-cookie|credentials?|signature|sig|private[_-]?key|session[_-]?key|link[_-]?secret)$")
# Keys that carry user content (queries, documents, prompts, completions).
_CONTENT_KEY = re.compile(
    r"(?i)(?:^|\.)(prompt|completion|input\.messages|output\.messages|system_instructions|"
    r"tool\.call\.arguments|tool\.call\.result|query\.text|query_text|retrieval\.documents|documents|"
    r"document\.text|statement|content|text|query)$")


class _Verdict:
    KEEP, REDACT, CONTENT = 0, 1, 2


class Redactor:
    """Removes secrets and (unless content capture is on) user content from ended spans.

    * an attribute whose key names a credential (authorization, api_key, token, password,
      cookie, signature, ...) keeps its key and gets the value "[REDACTED]";
    * any string value (attributes, event attributes such as exception messages, the status
      description) that looks like a secret (Bearer tokens, sk-… keys, JWTs, key=value
      secrets, configured keys registered with `shared.log.register_secret`) is redacted;
    * content attributes (prompts, completions, query and document text) are dropped unless
      content capture is on; numbers and flags under such keys (counts) stay.

    A span with nothing to remove is returned as it is (no copy).
    """

    _CACHE_MAX = 4_096
    _CACHE_VALUE_CHARS = 256

    def __init__(self, *, capture_content: bool = False) -> None:
        self.capture_content = capture_content
        self._verdicts: dict[str, int] = {}
        self._clean_text: dict[str, str] = {}     # short strings seen before -> redacted form

    def _verdict(self, key: str) -> int:
        verdict = self._verdicts.get(key)
        if verdict is None:
            if _SECRET_KEY.search(key):
                verdict = _Verdict.REDACT
            elif _CONTENT_KEY.search(key):
                verdict = _Verdict.CONTENT
            else:
                verdict = _Verdict.KEEP
            if len(self._verdicts) < self._CACHE_MAX:
                self._verdicts[key] = verdict
        return verdict

    def _redact_text(self, text: str) -> str:
        if len(text) > self._CACHE_VALUE_CHARS:
            return redact(text)
        cleaned = self._clean_text.get(text)
        if cleaned is None:
            cleaned = redact(text)
            if len(self._clean_text) >= self._CACHE_MAX:
                self._clean_text.clear()
            self._clean_text[text] = cleaned
        return cleaned

    def clean_attributes(self, attributes: Mapping[str, AttributeValue] | None) -> dict[str, AttributeValue] | None:
        """The attributes with secrets and (capture off) content removed; None if nothing changed."""
        if not attributes:
            return None
        cleaned: dict[str, AttributeValue] | None = None
        for key, value in attributes.items():
            new = self._clean_value(key, value)
            if new is value:
                continue
            if cleaned is None:
                cleaned = dict(attributes)
            if new is None:
                del cleaned[key]
            else:
                cleaned[key] = new
        return cleaned

    def _clean_value(self, key: str, value: AttributeValue) -> AttributeValue | None:
        """`value` itself when it may be exported, a redacted value, or None to drop it."""
        verdict = self._verdict(key)
        if verdict == _Verdict.REDACT:
            return REDACTED
        is_text = isinstance(value, str) or (isinstance(value, (tuple, list)) and bool(value)
                                             and isinstance(value[0], str))
        if not is_text:
            return value                      # numbers and flags: counts, never content or secrets
        if verdict == _Verdict.CONTENT and not self.capture_content:
            return None
        if isinstance(value, str):
            redacted = self._redact_text(value)
            return value if redacted == value else redacted
        items = tuple(self._redact_text(v) for v in value)  # type: ignore[union-attr]
        return value if items == tuple(value) else items

    def sanitize(self, span: ReadableSpan) -> ReadableSpan:
        attributes = self.clean_attributes(span.attributes)
        events = None
        for i, event in enumerate(span.events):
            cleaned = self.clean_attributes(event.attributes)
            if cleaned is not None:
                events = list(span.events) if events is None else events
                events[i] = Event(event.name, cleaned, event.timestamp)
        status = span.status
        if status.description:
            description = self._redact_text(status.description)
            if description != status.description:
                status = Status(status.status_code, description)
        if attributes is None and events is None and status is span.status:
            return span
        return ReadableSpan(
            name=span.name, context=span.context, parent=span.parent, resource=span.resource,
            attributes=attributes if attributes is not None else span.attributes,
            events=events if events is not None else span.events, links=span.links, kind=span.kind,
            status=status, start_time=span.start_time, end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope)


# ---------------------------------------------------------------------------- stage metrics
class StageMetrics:
    """Per-stage request counts, errors and latency from the spans that already mark each stage.

        nucleus.stage.calls      counter    {nucleus.stage, nucleus.span_kind, error.type?}
        nucleus.stage.errors     counter    spans with an error status
        nucleus.stage.duration   histogram  seconds
        nucleus.search.degraded  counter    SearchAndRank answers flagged degraded

    With `rpc_meter` (the meter named `shared.tracing.RPC_METER_NAME`), gRPC call spans also
    feed `rpc.client.call.duration` / `rpc.server.call.duration` (`shared.tracing.RpcDurations`):
    recorded here, on the processor's worker thread, instead of inline in the interceptors.

    `nucleus.stage` is the span name; at most `max_stages` distinct names are kept apart
    (span names an outside caller can influence, e.g. unknown MCP tools, fold into "other").
    """

    def __init__(self, meter: metrics.Meter, *, rpc_meter: metrics.Meter | None = None,
                 max_stages: int = 256) -> None:
        self._rpc = RpcDurations(rpc_meter) if rpc_meter is not None else None
        self._calls = meter.create_counter("nucleus.stage.calls", unit="{call}",
                                           description="Spans ended, per stage")
        self._errors = meter.create_counter("nucleus.stage.errors", unit="{call}",
                                            description="Spans ended with an error status, per stage")
        self._duration = meter.create_histogram(
            "nucleus.stage.duration", unit="s", description="Duration per stage (span name)",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)
        self._degraded = meter.create_counter("nucleus.search.degraded", unit="{query}",
                                              description="SearchAndRank answers flagged degraded")
        self._max_stages = max_stages
        self._stages: dict[tuple[str, SpanKind], dict[str, str]] = {}
        self._error_stages: dict[tuple[str, SpanKind, str], dict[str, str]] = {}

    def _labels(self, name: str, kind: SpanKind) -> dict[str, str]:
        labels = self._stages.get((name, kind))
        if labels is None:
            stage = name if len(self._stages) < self._max_stages else "other"
            labels = {"nucleus.stage": stage, "nucleus.span_kind": kind.name.lower()}
            if stage != "other" or len(self._stages) < self._max_stages * 2:
                self._stages[(name, kind)] = labels
        return labels

    def record(self, span: ReadableSpan) -> None:
        if span.end_time is None or span.start_time is None:
            return
        labels = self._labels(span.name, span.kind)
        if span.status.status_code is StatusCode.ERROR:
            error_type = str((span.attributes or {}).get("error.type", "error"))[:64]
            key = (span.name, span.kind, error_type)
            error_labels = self._error_stages.get(key)
            if error_labels is None:
                error_labels = {**labels, "error.type": error_type}
                if len(self._error_stages) < self._max_stages * 4:
                    self._error_stages[key] = error_labels
            labels = error_labels
            self._errors.add(1, labels)
        self._calls.add(1, labels)
        self._duration.record((span.end_time - span.start_time) / 1e9, labels)
        if span.attributes and span.attributes.get("nucleus.degraded") is True:
            self._degraded.add(1, {"nucleus.stage": labels["nucleus.stage"]})
        if self._rpc is not None:
            self._rpc.record_span(span)


# ---------------------------------------------------------------------------- processors
class _SanitizingExporter(SpanExporter):
    """Runs on the batch processor's worker thread: redaction, then the real exporter(s)."""

    def __init__(self, exporters: Sequence[SpanExporter], redactor: Redactor) -> None:
        self._exporters = tuple(exporters)
        self._redactor = redactor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        clean = [self._redactor.sanitize(span) for span in spans]
        result = SpanExportResult.SUCCESS
        for exporter in self._exporters:
            try:
                if exporter.export(clean) is not SpanExportResult.SUCCESS:
                    result = SpanExportResult.FAILURE
            except Exception as err:  # noqa: BLE001 - one broken exporter must not starve the others
                log.warning("span exporter %s failed: %s", type(exporter).__name__, err)
                result = SpanExportResult.FAILURE
        return result

    def shutdown(self) -> None:
        for exporter in self._exporters:
            exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all(exporter.force_flush(timeout_millis) for exporter in self._exporters)


class RedactingSpanProcessor(BatchSpanProcessor):
    """The safety net every exporter sits behind: a batch span processor whose exporters only
    ever receive spans cleaned by `Redactor` (no secrets; no content unless capture is on).

    On the request path a span costs one queue append; redaction and export run on this
    processor's worker thread. Batch size, delay and queue bound come from the standard
    OTEL_BSP_* variables. `build_telemetry` gives every exporter its own processor, so an
    unreachable collector never holds up the local trace file.
    """

    def __init__(self, exporters: Sequence[SpanExporter], *, capture_content: bool = False,
                 **batch_options: Any) -> None:
        self.redactor = Redactor(capture_content=capture_content)
        super().__init__(_SanitizingExporter(exporters, self.redactor), **batch_options)


class _StageMetricsExporter(SpanExporter):
    def __init__(self, stage_metrics: StageMetrics) -> None:
        self._metrics = stage_metrics

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._metrics.record(span)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class StageMetricsProcessor(BatchSpanProcessor):
    """Feeds `StageMetrics` from ended spans on a worker thread (not on the request path).

    Spans a sampler drops never end in a processor: with a ratio sampler the nucleus.stage.*
    metrics count the sampled requests only. The rpc.*.call.duration histograms count every
    call: recorded calls from their spans here, the others inline by the gRPC interceptors.
    """

    def __init__(self, stage_metrics: StageMetrics, **batch_options: Any) -> None:
        super().__init__(_StageMetricsExporter(stage_metrics), **batch_options)


# ---------------------------------------------------------------------------- local files
class RotatingJsonlWriter:
    """Append-only JSONL file bounded by size: at `max_bytes` it becomes `<name>.1` (older
    files shift up to `<name>.<backups>`, the oldest is deleted)."""

    def __init__(self, path: Path, *, max_bytes: int, backups: int) -> None:
        self.path = path
        self._max_bytes = max(1024, max_bytes)
        self._backups = max(0, backups)
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._size = 0

    def _open(self) -> TextIO:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")
            self._size = self._file.tell()
        return self._file

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._backups == 0:
            self.path.unlink(missing_ok=True)
            return
        for i in range(self._backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.path.exists():
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def write_lines(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        payload = "".join(line + "\n" for line in lines)
        size = len(payload.encode("utf-8"))
        with self._lock:
            f = self._open()
            if self._size and self._size + size > self._max_bytes:
                self._rotate()
                f = self._open()
            f.write(payload)
            f.flush()
            self._size += size

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _hex_trace(trace_id: int) -> str:
    return format(trace_id, "032x")


def _hex_span(span_id: int) -> str:
    return format(span_id, "016x")


def _json_value(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_json_value(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def span_to_record(span: ReadableSpan) -> dict[str, Any]:
    """One span as the JSON object of a trace file line (read by `shared.trace_view`)."""
    ctx = span.context
    start, end = span.start_time or 0, span.end_time or 0
    resource = span.resource.attributes if span.resource else {}
    record: dict[str, Any] = {
        "trace_id": _hex_trace(ctx.trace_id) if ctx else "",
        "span_id": _hex_span(ctx.span_id) if ctx else "",
        "parent_span_id": _hex_span(span.parent.span_id) if span.parent else None,
        "name": span.name,
        "kind": span.kind.name,
        "service": str(resource.get("service.name", "")),
        "start_unix_nano": start,
        "end_unix_nano": end,
        "duration_ms": round((end - start) / 1e6, 3),
        "status": span.status.status_code.name,
        "attributes": {k: _json_value(v) for k, v in (span.attributes or {}).items()},
    }
    if span.status.description:
        record["status_message"] = span.status.description
    if span.events:
        record["events"] = [{"name": e.name, "time_unix_nano": e.timestamp,
                             "attributes": {k: _json_value(v) for k, v in (e.attributes or {}).items()}}
                            for e in span.events]
    if span.instrumentation_scope is not None:
        record["scope"] = span.instrumentation_scope.name
    return record


class JsonlSpanExporter(SpanExporter):
    """Spans as JSON lines in a size-bounded, rotated local file (one file per service)."""

    def __init__(self, path: Path, *, max_bytes: int = 16 * 1024 * 1024, backups: int = 2) -> None:
        self._writer = RotatingJsonlWriter(path, max_bytes=max_bytes, backups=backups)
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self._writer.write_lines([json.dumps(span_to_record(s), separators=(",", ":")) for s in spans])
        except OSError as err:
            log.warning("cannot write trace file %s: %s", self.path, err)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._writer.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class JsonlMetricExporter(MetricExporter):
    """Each metrics collection as one JSON line in a size-bounded, rotated local file."""

    def __init__(self, path: Path, *, max_bytes: int = 16 * 1024 * 1024, backups: int = 2) -> None:
        super().__init__(preferred_temporality={})
        self._writer = RotatingJsonlWriter(path, max_bytes=max_bytes, backups=backups)
        self.path = path

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            self._writer.write_lines([metrics_data.to_json(indent=None)])
        except OSError as err:
            log.warning("cannot write metrics file %s: %s", self.path, err)
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._writer.close()


# ---------------------------------------------------------------------------- set-up
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


def _env_list(env: Mapping[str, str], name: str) -> list[str] | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return None
    return [v.strip().lower() for v in raw.split(",") if v.strip()]


def _exporters_for(env: Mapping[str, str], signal: str) -> list[str]:
    """Exporter names for 'traces' or 'metrics' from OTEL_<SIGNAL>_EXPORTER and the endpoints."""
    explicit = _env_list(env, f"OTEL_{signal.upper()}_EXPORTER")
    if explicit is not None:
        return [e for e in explicit if e != "none"] if "none" not in explicit else []
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return ["otlp"] if endpoint else []


def _otlp_protocol(env: Mapping[str, str], signal: str) -> str:
    return (env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf").strip().lower()


def _service_version() -> str:
    try:
        return importlib_metadata.version("nucleus-rag")
    except importlib_metadata.PackageNotFoundError:
        return "0.0.0"


def build_resource(service: str, settings: TelemetrySettings, env: Mapping[str, str]) -> Resource:
    """service.name (OTEL_SERVICE_NAME wins), version, namespace, instance, environment;
    OTEL_RESOURCE_ATTRIBUTES adds to (never replaces) these."""
    attributes = {
        "service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAMES.get(service, service),
        "service.namespace": "nucleus",
        "service.version": _service_version(),
        "service.instance.id": str(uuid.uuid4()),
        "deployment.environment": settings.environment,
        "deployment.environment.name": settings.environment,
    }
    return Resource.create(attributes)


def _span_exporter(name: str, env: Mapping[str, str]) -> SpanExporter | None:
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


def _metric_exporter(name: str, env: Mapping[str, str]) -> MetricExporter | None:
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
    for name in _exporters_for(env, "traces"):
        exporter = _span_exporter(name, env)
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
    for name in _exporters_for(env, "metrics"):
        metric_exporter = _metric_exporter(name, env)
        if metric_exporter is not None:
            readers.append(PeriodicExportingMetricReader(metric_exporter))
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
        meter_provider.get_meter("nucleus.stages"), rpc_meter=meter_provider.get_meter(RPC_METER_NAME))))
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


__all__ = [
    "SERVICE_NAMES", "TelemetrySettings", "Telemetry", "Redactor", "RedactingSpanProcessor", "StageMetrics",
    "StageMetricsProcessor", "shutdown_telemetry",
    "JsonlSpanExporter", "JsonlMetricExporter", "RotatingJsonlWriter", "span_to_record", "build_resource",
    "build_telemetry", "setup_telemetry",
]
