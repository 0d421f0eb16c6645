"""The pure parts of `python -m lab.trace_ui`: its arguments, the "connected" check on synthetic
span lists (and what makes a trace not connected), Phoenix's span payload read back, the
service lookup in local trace files, and the UI cross-check. Phoenix itself is not installed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.trace_ui import (
    CHECK_SERVICE,
    PROJECT,
    SERVICES,
    _fit,
    check_connected,
    local_services,
    parse_args,
    phoenix_env,
    phoenix_spans,
    stack_env,
    trace_url,
    ui_agrees,
)

TRACE = "ab" * 16
OTHER = "cd" * 16


def _span(span_id: str, parent: str | None, service: str, name: str = "", trace_id: str = TRACE) -> dict:
    return {"trace_id": trace_id, "span_id": span_id, "parent_span_id": parent, "service": service,
            "name": name or f"{service}.{span_id}"}


def _tree() -> list[dict]:
    """check root -> rag server -> (rag client -> ks server, rag client -> llm server)."""
    return [_span("01", None, CHECK_SERVICE, "trace_ui.check"),
            _span("02", "01", "nucleus-rag-pipeline", "rag.search_and_rank"),
            _span("03", "02", "nucleus-rag-pipeline"),
            _span("04", "03", "nucleus-knowledge-store"),
            _span("05", "02", "nucleus-rag-pipeline"),
            _span("06", "05", "nucleus-llm-orchestration")]


def test_defaults_and_options():
    args = parse_args([])
    assert args.venv.name == ".trace-ui-venv" and args.port == 6006
    assert args.data_dir is None and args.keep is False and args.mode is None
    args = parse_args(["--venv", "/tmp/v", "--port", "7007", "--data-dir", "d", "--keep", "--mode", "split"])
    assert (args.venv, args.port, args.data_dir, args.keep, args.mode) == (Path("/tmp/v"), 7007, Path("d"), True,
                                                                           "split")


@pytest.mark.parametrize("argv", [["--port", "0"], ["--port", "70000"], ["--port", "x"], ["--mode", "both"]])
def test_refuses_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_args(argv)
    assert stopped.value.code == 2
    capsys.readouterr()


def test_a_connected_trace_of_the_three_services():
    verdict = check_connected(_tree(), TRACE)
    assert verdict.connected, verdict.problems
    assert verdict.root == f"{CHECK_SERVICE}:trace_ui.check"
    assert verdict.spans_per_service == {CHECK_SERVICE: 1, "nucleus-knowledge-store": 1,
                                         "nucleus-llm-orchestration": 1, "nucleus-rag-pipeline": 3}


def test_a_span_whose_parent_never_arrived_disconnects_the_trace():
    spans = _tree()
    spans[3]["parent_span_id"] = "99"           # the KnowledgeStore server span's parent is missing
    verdict = check_connected(spans, TRACE)
    assert not verdict.connected
    assert any("parent not in the trace" in p and "nucleus-knowledge-store" in p for p in verdict.problems)


def test_a_missing_service_a_second_root_or_another_trace_is_not_connected():
    without_llm = [s for s in _tree() if s["service"] != "nucleus-llm-orchestration"]
    assert check_connected(without_llm, TRACE).problems == ["no spans of nucleus-llm-orchestration"]
    two_roots = _tree()
    two_roots[1]["parent_span_id"] = None
    assert any("2 root spans" in p for p in check_connected(two_roots, TRACE).problems)
    mixed = [*_tree(), _span("07", "02", "nucleus-rag-pipeline", trace_id=OTHER)]
    assert any("another trace" in p for p in check_connected(mixed, TRACE).problems)
    assert not check_connected([], TRACE).connected


def test_a_cycle_is_not_reachable_from_the_root():
    spans = _tree()
    spans.append(_span("07", "08", "nucleus-rag-pipeline"))
    spans.append(_span("08", "07", "nucleus-rag-pipeline"))
    assert any("not reachable" in p for p in check_connected(spans, TRACE).problems)


def test_phoenix_payload_and_local_trace_files(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    lines = [{"trace_id": TRACE, "span_id": "02", "service": "nucleus-rag-pipeline"},
             {"trace_id": OTHER, "span_id": "09", "service": "nucleus-rag-pipeline"}]
    (traces / "rag_pipeline.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json " + TRACE)
    (traces / "knowledge_store.jsonl").write_text(json.dumps({"trace_id": TRACE, "span_id": "04", "service": ""}))
    (traces / "rag_pipeline.metrics.jsonl").write_text(json.dumps({"trace_id": TRACE, "span_id": "77"}))
    by_span = local_services(traces, TRACE)
    assert by_span == {"02": "nucleus-rag-pipeline", "04": "nucleus-knowledge-store"}
    payload = {"data": [
        {"trace_id": TRACE, "span_id": "02", "parent_span_id": "01", "name": "rag.search_and_rank",
         "attributes": [{"key": "nucleus.results", "value": {"int_value": 2}}]},
        {"trace_id": TRACE, "span_id": "05", "parent_span_id": "", "name": "x", "attributes": []}]}
    spans = phoenix_spans(payload, by_span)
    assert spans[0]["service"] == "nucleus-rag-pipeline" and spans[0]["attributes"] == {"nucleus.results": 2}
    assert spans[1]["service"] == "?" and spans[1]["parent_span_id"] is None


def test_the_ui_view_must_agree():
    spans = _tree()
    verdict = check_connected(spans, TRACE)
    ui = {"traceId": TRACE, "numSpans": len(spans), "project": {"name": PROJECT},
          "rootSpan": {"name": "trace_ui.check"}}
    assert ui_agrees(ui, spans, verdict) == []
    assert ui_agrees(None, spans, verdict)
    assert "answered: no such field" in ui_agrees({"errors": ["no such field"]}, spans, verdict)[0]
    assert ui_agrees({**ui, "numSpans": 2}, spans, verdict)
    assert ui_agrees({**ui, "project": {"name": "default"}}, spans, verdict)


def test_environments_keep_phoenix_and_the_stack_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = phoenix_env(6006, 4999, tmp_path)
    assert env["PHOENIX_HOST"] == "127.0.0.1" and env["PHOENIX_PORT"] == "6006" and env["PHOENIX_GRPC_PORT"] == "4999"
    assert env["PHOENIX_WORKING_DIR"] == str(tmp_path) and env["PHOENIX_TELEMETRY_ENABLED"] == "false"
    assert "PYTHONPATH" not in env and not any(k.startswith("OTEL_") for k in env)
    env = stack_env("http://127.0.0.1:6006", tmp_path)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:6006" and env["OTEL_TRACES_EXPORTER"] == "otlp"
    assert env["OTEL_METRICS_EXPORTER"] == "none" and env["OTEL_BSP_SCHEDULE_DELAY"] == "200"
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == f"openinference.project.name={PROJECT}"
    assert trace_url("http://127.0.0.1:6006", TRACE).endswith(f"/redirects/traces/{TRACE}")
    assert len(SERVICES) == 3


def test_names_fit_the_line():
    assert _fit(["a", "b"], 80) == "a, b"
    shown = _fit([f"name-{i:02d}" for i in range(20)], 40)
    assert len(shown) <= 40 and shown.endswith(")")
