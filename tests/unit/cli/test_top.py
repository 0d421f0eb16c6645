"""`nucleus top`'s arithmetic over real /metrics text (a real ServiceMetrics registry fed spans)."""
from __future__ import annotations

import io
import math

import grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from rich.console import Console

from cli.top import parse, quantile, render
from shared.telemetry.prometheus import ServiceMetrics


class _Feed(SpanExporter):
    def __init__(self, metrics):
        self.metrics = metrics

    def export(self, spans):
        for span in spans:
            self.metrics.record_span(span)
        return SpanExportResult.SUCCESS


def test_quantile_interpolates_within_the_bucket_like_histogram_quantile():
    before = {0.01: 0.0, 0.1: 0.0, math.inf: 0.0}
    after = {0.01: 10.0, 0.1: 30.0, math.inf: 30.0}
    assert math.isclose(quantile(0.5, before, after), 0.01 + 0.09 * (15 - 10) / 20)
    assert math.isclose(quantile(0.25, before, after), 0.01 * 7.5 / 10)
    assert math.isnan(quantile(0.5, after, after))        # nothing happened in the interval


def test_render_shows_the_interval_rate_errors_and_stages():
    metrics = ServiceMetrics("rag_pipeline", process_series=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_Feed(metrics)))
    tracer = provider.get_tracer("t")
    before = parse(metrics.exposition("text/plain")[0].decode(), at=0.0)
    for code in (grpc.StatusCode.OK,) * 3 + (grpc.StatusCode.UNAVAILABLE,):
        with tracer.start_as_current_span("x", kind=SpanKind.SERVER, attributes={
                "rpc.system": "grpc", "rpc.service": "nucleus.v1.RagPipeline", "rpc.method": "SearchAndRank",
                "rpc.grpc.status_code": code.value[0]}):
            with tracer.start_as_current_span("rag.search_and_rank"):
                pass
    after = parse(metrics.exposition("text/plain")[0].decode(), at=2.0)
    out = io.StringIO()
    Console(file=out, width=200).print(render({"rag_pipeline": before}, {"rag_pipeline": after}))
    text = out.getvalue()
    row = next(line for line in text.splitlines() if "SearchAndRank" in line)
    assert "2.0" in row and "0.50" in row             # 4 requests / 2 s; 1 UNAVAILABLE / 2 s
    assert "rag.search_and_rank" in text
