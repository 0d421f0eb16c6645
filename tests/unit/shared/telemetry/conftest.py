"""A private SDK pipeline per test (never the global providers: one test process, many tests)."""
from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.telemetry import genai as content, rpc
from shared.telemetry.stage_metrics import StageMetrics, StageMetricsProcessor


class Pipeline:
    """Spans in memory; metrics in memory, including the ones derived from spans (stage and
    gRPC call durations, as `build_telemetry` wires them)."""

    def __init__(self, sampler=None) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer_provider.add_span_processor(StageMetricsProcessor(StageMetrics(
            self.meter_provider.get_meter("nucleus.stages"),
            rpc_meter=self.meter_provider.get_meter(rpc.RPC_METER_NAME))))

    def spans(self):
        return list(self.exporter.get_finished_spans())

    def metric_points(self, name: str) -> list:
        self.tracer_provider.force_flush()        # span-derived metrics are recorded in batches
        data = self.reader.get_metrics_data()
        points = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points


@pytest.fixture
def pipeline():
    p = Pipeline()
    yield p
    p.tracer_provider.shutdown()
    p.meter_provider.shutdown()


@pytest.fixture(autouse=True)
def _content_capture_off(monkeypatch):
    """Content capture is off unless a test turns it on (the flag is read once and cached)."""
    monkeypatch.delenv(content.CAPTURE_CONTENT_ENV, raising=False)
    content.capture_content.cache_clear()
    yield
    content.capture_content.cache_clear()


@pytest.fixture
def content_capture(monkeypatch, _content_capture_off):
    """NUCLEUS_OTEL_CAPTURE_CONTENT=true for one test."""
    monkeypatch.setenv(content.CAPTURE_CONTENT_ENV, "true")
    content.capture_content.cache_clear()
