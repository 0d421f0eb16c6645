"""Per-stage request counts, errors and latency, derived from the spans that already mark each
stage (a span processor: recorded off the request path).

    StageMetrics             the nucleus.stage.* instruments, fed one ended span at a time
    StageMetricsProcessor    feeds StageMetrics from a batch processor's worker thread
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

from shared.telemetry.rpc import DURATION_BUCKETS_S, RpcDurations


class StageMetrics:
    """Per-stage request counts, errors and latency from the spans that already mark each stage.

        nucleus.stage.calls      counter    {nucleus.stage, nucleus.span_kind, error.type?}
        nucleus.stage.errors     counter    spans with an error status
        nucleus.stage.duration   histogram  seconds
        nucleus.search.degraded  counter    SearchAndRank answers flagged degraded

    With `prometheus` (the service's `shared.telemetry.prometheus.ServiceMetrics`), every span
    also feeds the Prometheus series `/metrics` serves, on the same worker thread.

    With `rpc_meter` (the meter named `shared.telemetry.rpc.RPC_METER_NAME`), gRPC call spans
    also feed `rpc.client.call.duration` / `rpc.server.call.duration`
    (`shared.telemetry.rpc.RpcDurations`): recorded here, on the processor's worker thread,
    instead of inline in the interceptors.

    `nucleus.stage` is the span name; at most `max_stages` distinct names are kept apart
    (span names an outside caller can influence, e.g. unknown MCP tools, fold into "other").

    `nucleus.stage.calls` is counted here, in a dict, and reported to the SDK as an
    asynchronous (observable) monotonic counter when metrics are collected: the same
    cumulative sum per label set as a synchronous counter, without an SDK measurement (its
    attribute hashing and cleaning, ~6 µs) for every span.
    """

    def __init__(self, meter: metrics.Meter, *, rpc_meter: metrics.Meter | None = None,
                 max_stages: int = 256, prometheus: Any = None) -> None:
        self._rpc = RpcDurations(rpc_meter) if rpc_meter is not None else None
        self._prometheus = prometheus      # shared.telemetry.prometheus.ServiceMetrics: the /metrics series
        self._call_counts: dict[tuple[str, ...], list[Any]] = {}     # label values -> [labels, count]
        self._counts_lock = threading.Lock()
        self._calls = meter.create_observable_counter("nucleus.stage.calls", callbacks=[self._observe_calls],
                                                      unit="{call}", description="Spans ended, per stage")
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
        key = tuple(labels.values())
        with self._counts_lock:
            counted = self._call_counts.get(key)
            if counted is None:
                if len(self._call_counts) >= self._max_stages * 8:     # bounded, as the SDK's own limit
                    labels = {"nucleus.stage": "other", "nucleus.span_kind": labels["nucleus.span_kind"]}
                    key = tuple(labels.values())
                counted = self._call_counts.setdefault(key, [labels, 0])
            counted[1] += 1
        self._duration.record((span.end_time - span.start_time) / 1e9, labels)
        if span.attributes and span.attributes.get("nucleus.degraded") is True:
            self._degraded.add(1, {"nucleus.stage": labels["nucleus.stage"]})
        if self._rpc is not None:
            self._rpc.record_span(span)
        if self._prometheus is not None:
            self._prometheus.record_span(span)

    def _observe_calls(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._counts_lock:
            counted = [(labels, n) for labels, n in self._call_counts.values()]
        return [Observation(n, labels) for labels, n in counted]


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


__all__ = ["StageMetrics", "StageMetricsProcessor"]
