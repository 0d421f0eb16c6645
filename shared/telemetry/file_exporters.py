"""The local trace and metrics files: one size-bounded, rotated JSONL file per service and signal.

    RotatingJsonlWriter    append-only JSONL, rotated to <name>.1 … <name>.<backups> at a size
    span_to_record()       one span as the JSON object of a trace file line
    JsonlSpanExporter      <trace dir>/<service>.jsonl, read by `nucleus traces`
    JsonlMetricExporter    <trace dir>/<service>.metrics.jsonl, one line per collection
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger(__name__)


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
    """One span as the JSON object of a trace file line (read by `nucleus traces`)."""
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


__all__ = ["RotatingJsonlWriter", "span_to_record", "JsonlSpanExporter", "JsonlMetricExporter"]
