"""shared.telemetry SDK modules: the per-process SDK set-up, the redaction safety net, span
metrics and the local rotated trace files."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared.log import register_secret
from shared.telemetry.file_exporters import JsonlSpanExporter, RotatingJsonlWriter
from shared.telemetry.providers import build_telemetry
from shared.settings import TelemetrySettings
from shared.telemetry.span_redaction import RedactingSpanProcessor, Redactor
from shared.telemetry.stage_metrics import StageMetrics, StageMetricsProcessor

ROOT = Path(__file__).resolve().parents[4]
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTEifQ.c2lnbmF0dXJlLXBhcnQ"


class Exported:
    """Spans as the exporters behind the safety net receive them."""

    def __init__(self, capture_content: bool = False, stage_metrics: StageMetrics | None = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(RedactingSpanProcessor([self.exporter], capture_content=capture_content))
        if stage_metrics is not None:
            self.provider.add_span_processor(StageMetricsProcessor(stage_metrics))

    def tracer(self):
        return self.provider.get_tracer("t")

    def spans(self):
        assert self.provider.force_flush(5_000)
        return list(self.exporter.get_finished_spans())


def _redacting(capture_content: bool = False) -> Exported:
    return Exported(capture_content=capture_content)


# ---------------------------------------------------------------------------- safety net
def test_credential_attributes_keep_their_key_and_lose_their_value():
    exported = _redacting()
    with exported.tracer().start_as_current_span("s") as span:
        span.set_attribute("rpc.grpc.request.metadata.authorization", "Bearer abc.def.ghi")
        span.set_attribute("http.request.header.x-api-key", "k-123456")
        span.set_attribute("nucleus.link_secret", "hunter2hunter2")
        span.set_attribute("db.password", "pw")
        span.set_attribute("oauth.access_token", "opaque")
    [s] = exported.spans()
    for key in ("rpc.grpc.request.metadata.authorization", "http.request.header.x-api-key", "nucleus.link_secret",
                "db.password", "oauth.access_token"):
        assert s.attributes[key] == "[REDACTED]", key


def test_secret_looking_values_are_redacted_wherever_they_appear():
    register_secret("configured-key-0123456789")
    exported = _redacting()
    with exported.tracer().start_as_current_span("s") as span:
        span.set_attribute("nucleus.note", "called with Bearer s3cr3t-t0ken-value")
        span.set_attribute("nucleus.upstream", "key sk-abcdefghijklmnop rejected")
        span.set_attribute("nucleus.list", ["ok", JWT])
        span.set_attribute("nucleus.configured", "uses configured-key-0123456789 here")
        span.add_event("exception", {"exception.message": f"401 for token={JWT}"})
        span.set_status(Status(StatusCode.ERROR, "Authorization: Bearer zzzzzzzzzzzz"))
    [s] = exported.spans()
    exported = json.dumps({"a": dict(s.attributes), "e": [dict(e.attributes) for e in s.events],
                           "st": s.status.description})
    for secret in ("s3cr3t-t0ken-value", "sk-abcdefghijklmnop", JWT, "configured-key-0123456789", "zzzzzzzzzzzz"):
        assert secret not in exported, secret
    assert s.attributes["nucleus.list"][0] == "ok"
    assert "[REDACTED]" in s.attributes["nucleus.note"]


def test_content_is_dropped_unless_capture_is_on_but_counts_stay():
    for capture in (False, True):
        exported = _redacting(capture_content=capture)
        with exported.tracer().start_as_current_span("s") as span:
            span.set_attribute("gen_ai.retrieval.query.text", "how do I reset the battery fuse")
            span.set_attribute("gen_ai.prompt", "system: you are…")
            span.set_attribute("gen_ai.input.messages", ["hello"])
            span.set_attribute("nucleus.documents", 12)              # a count, not content
            span.set_attribute("gen_ai.usage.input_tokens", 40)      # not a credential
        [s] = exported.spans()
        assert ("gen_ai.retrieval.query.text" in s.attributes) is capture
        assert ("gen_ai.prompt" in s.attributes) is capture
        assert ("gen_ai.input.messages" in s.attributes) is capture
        assert s.attributes["nucleus.documents"] == 12
        assert s.attributes["gen_ai.usage.input_tokens"] == 40


def test_clean_spans_pass_through_without_a_copy():
    net = Redactor()
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("s", attributes={"nucleus.tenant_id": "acme",
                                                                       "nucleus.candidates": 7}) as span:
        pass
    assert net.sanitize(span) is span


# ---------------------------------------------------------------------------- span metrics
def _metrics(reader: InMemoryMetricReader) -> dict[str, list]:
    out: dict[str, list] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_every_stage_gets_calls_errors_and_a_latency_histogram():
    reader = InMemoryMetricReader()
    exported = Exported(stage_metrics=StageMetrics(MeterProvider(metric_readers=[reader]).get_meter("t")))
    tracer = exported.tracer()
    for _ in range(3):
        with tracer.start_as_current_span("rag.embed"):
            pass
    with tracer.start_as_current_span("rag.search_and_rank") as span:
        span.set_attribute("nucleus.degraded", True)
    with pytest.raises(ValueError):
        with tracer.start_as_current_span("rag.retrieve.vector"):
            raise ValueError("boom")
    exported.spans()
    found = _metrics(reader)
    calls = {p.attributes["nucleus.stage"]: p.value for p in found["nucleus.stage.calls"]}
    assert calls == {"rag.embed": 3, "rag.search_and_rank": 1, "rag.retrieve.vector": 1}
    [error] = found["nucleus.stage.errors"]
    assert error.attributes["nucleus.stage"] == "rag.retrieve.vector" and error.value == 1
    durations = {p.attributes["nucleus.stage"]: p for p in found["nucleus.stage.duration"]}
    assert durations["rag.embed"].count == 3
    assert found["nucleus.search.degraded"][0].value == 1


def test_stage_names_beyond_the_cap_fold_into_other():
    reader = InMemoryMetricReader()
    exported = Exported(stage_metrics=StageMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"),
                                                   max_stages=2))
    for i in range(5):
        with exported.tracer().start_as_current_span(f"tools/call attacker-{i}"):
            pass
    exported.spans()
    stages = {p.attributes["nucleus.stage"] for p in _metrics(reader)["nucleus.stage.calls"]}
    assert stages == {"tools/call attacker-0", "tools/call attacker-1", "other"}


def test_stage_calls_are_cumulative_across_collections_and_their_label_sets_stay_bounded():
    reader = InMemoryMetricReader()
    exported = Exported(stage_metrics=StageMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"),
                                                   max_stages=1))
    tracer = exported.tracer()
    for _ in range(2):
        with tracer.start_as_current_span("rag.embed"):
            pass
    exported.spans()
    assert {p.attributes["nucleus.stage"]: p.value for p in _metrics(reader)["nucleus.stage.calls"]} == {
        "rag.embed": 2}
    for i in range(30):            # errors of many kinds: each a label set, until the bound folds them
        with tracer.start_as_current_span("rag.embed") as span:
            span.set_attribute("error.type", f"E{i}")
            span.set_status(Status(StatusCode.ERROR))
    exported.spans()
    points = _metrics(reader)["nucleus.stage.calls"]
    assert sum(p.value for p in points) == 32 and len(points) <= 8 + 1
    assert {p.attributes["nucleus.stage"] for p in points} == {"rag.embed", "other"}
    assert [p.value for p in points if p.attributes == {"nucleus.stage": "rag.embed",
                                                          "nucleus.span_kind": "internal"}] == [2]


# ---------------------------------------------------------------------------- trace files
def test_trace_file_holds_one_json_span_per_line_with_parents(tmp_path):
    path = tmp_path / "traces" / "rag_pipeline.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(path)))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        with tracer.start_as_current_span("child", attributes={"nucleus.k": 5, "nucleus.tags": ["a", "b"]}):
            pass
    provider.shutdown()
    child, parent_rec = [json.loads(line) for line in path.read_text().splitlines()]
    assert parent_rec["parent_span_id"] is None and parent_rec["kind"] == "SERVER"
    assert child["parent_span_id"] == parent_rec["span_id"]
    assert child["trace_id"] == parent_rec["trace_id"] == format(parent.get_span_context().trace_id, "032x")
    assert child["attributes"] == {"nucleus.k": 5, "nucleus.tags": ["a", "b"]}
    assert child["duration_ms"] >= 0 and child["end_unix_nano"] >= child["start_unix_nano"]


def test_trace_files_rotate_and_stay_bounded(tmp_path):
    path = tmp_path / "svc.jsonl"
    writer = RotatingJsonlWriter(path, max_bytes=2_000, backups=2)
    for i in range(200):
        writer.write_lines([json.dumps({"i": i, "pad": "x" * 80})])
    writer.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["svc.jsonl", "svc.jsonl.1", "svc.jsonl.2"]
    assert all(p.stat().st_size <= 2_000 for p in tmp_path.iterdir())
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["i"] == 199
    newest_backup = [json.loads(line)["i"] for line in (tmp_path / "svc.jsonl.1").read_text().splitlines()]
    oldest_current = json.loads(path.read_text().splitlines()[0])["i"]
    assert newest_backup[-1] == oldest_current - 1


# ---------------------------------------------------------------------------- set-up
def _clear_otel_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)


def test_without_otel_variables_traces_go_only_to_the_local_file(tmp_path, monkeypatch):
    _clear_otel_env(monkeypatch)
    telemetry = build_telemetry("rag_pipeline", TelemetrySettings(trace_dir=tmp_path, metrics_file=False))
    try:
        assert telemetry.exporters == ["file"]
        assert telemetry.trace_file == tmp_path / "rag_pipeline.jsonl"
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span("rag.rank"):
            pass
        telemetry.flush()
        assert json.loads(telemetry.trace_file.read_text())["service"] == "nucleus-rag-pipeline"
    finally:
        telemetry.shutdown()


@pytest.mark.parametrize("env,expected", [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, []),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
    ({}, []),
])
def test_otlp_export_follows_the_standard_variables(tmp_path, monkeypatch, env, expected):
    _clear_otel_env(monkeypatch)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    telemetry = build_telemetry("knowledge_store", TelemetrySettings(trace_file=False))
    try:
        assert telemetry.exporters == expected
        assert telemetry.trace_file is None
    finally:
        telemetry.shutdown()


def test_resource_names_the_service_version_and_environment(tmp_path, monkeypatch):
    _clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name=nucleus")
    telemetry = build_telemetry("llm_orchestration", TelemetrySettings(trace_file=False, environment="staging"))
    try:
        attrs = telemetry.tracer_provider.resource.attributes
        assert attrs["service.name"] == "nucleus-llm-orchestration"
        assert attrs["service.version"]
        assert attrs["deployment.environment"] == attrs["deployment.environment.name"] == "staging"
        assert attrs["k8s.namespace.name"] == "nucleus"
        assert attrs["service.instance.id"]
    finally:
        telemetry.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "custom-name")
    telemetry = build_telemetry("llm_orchestration", TelemetrySettings(trace_file=False))
    try:
        assert telemetry.tracer_provider.resource.attributes["service.name"] == "custom-name"
    finally:
        telemetry.shutdown()


def _python(code: str, env: dict[str, str]) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_setup_installs_the_sdk_once_per_process(tmp_path):
    code = ("from opentelemetry import trace; from shared.telemetry.providers import setup_telemetry as s\n"
            "a = s('rag_pipeline'); b = s('knowledge_store')\n"
            "print(a is b, trace.get_tracer_provider() is a.tracer_provider, "
            "a.tracer_provider.resource.attributes['service.name'])")
    assert _python(code, {"NUCLEUS_OTEL_TRACE_DIR": str(tmp_path)}) == "True True nucleus-rag-pipeline"


def test_otel_sdk_disabled_leaves_the_api_a_no_op(tmp_path):
    code = ("from opentelemetry import trace; from shared.telemetry.providers import setup_telemetry as s\n"
            "print(s('rag_pipeline'), trace.get_tracer('x').start_span('y').is_recording())")
    assert _python(code, {"OTEL_SDK_DISABLED": "true", "NUCLEUS_OTEL_TRACE_DIR": str(tmp_path)}) == "None False"
    assert not list(tmp_path.iterdir())


def test_a_failing_exporter_does_not_starve_the_others():
    class Broken(InMemorySpanExporter):
        def export(self, spans):
            raise ConnectionError("collector down")

    good = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(RedactingSpanProcessor([Broken(), good]))
    with provider.get_tracer("t").start_as_current_span("s"):
        pass
    provider.force_flush(5_000)
    assert [s.name for s in good.get_finished_spans()] == ["s"]


def test_the_installed_pipeline_redacts_what_reaches_the_trace_file(tmp_path, monkeypatch):
    _clear_otel_env(monkeypatch)
    telemetry = build_telemetry("knowledge_store", TelemetrySettings(trace_dir=tmp_path, metrics_file=False))
    try:
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
            span.set_attribute("rpc.grpc.request.metadata.authorization", "Bearer live-token-123456")
            span.set_attribute("gen_ai.retrieval.query.text", "private question")
        telemetry.flush()
        text = telemetry.trace_file.read_text()
    finally:
        telemetry.shutdown()
    assert "live-token-123456" not in text and "private question" not in text
    assert json.loads(text)["attributes"] == {"rpc.grpc.request.metadata.authorization": "[REDACTED]"}


def test_shutdown_writes_the_local_file_and_does_not_wait_for_a_dead_collector(tmp_path):
    """The OTLP exporter alone would retry for ~10 s; shutdown gives up after its bound."""
    code = ("import time; from opentelemetry import trace; from shared.telemetry.providers import "
            "setup_telemetry, shutdown_telemetry\n"
            "setup_telemetry('rag_pipeline')\n"
            "with trace.get_tracer('t').start_as_current_span('rag.rank'): pass\n"
            "t0 = time.monotonic(); shutdown_telemetry(timeout_s=1.0); print(round(time.monotonic() - t0))")
    elapsed = _python(code, {"NUCLEUS_OTEL_TRACE_DIR": str(tmp_path), "OTEL_BSP_SCHEDULE_DELAY": "60000",
                             "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})   # nothing listens on 9
    assert int(elapsed) <= 2
    assert json.loads((tmp_path / "rag_pipeline.jsonl").read_text())["name"] == "rag.rank"
