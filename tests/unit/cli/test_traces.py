"""cli.traces: reading the services' trace files and drawing waterfalls (`nucleus traces`)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from cli.main import main as cli_main
from shared.errors import NotFound
from cli.traces import (
    BAR_WIDTH,
    bar,
    group_traces,
    key_attributes,
    load_spans,
    select_traces,
    trace_files,
    tree_rows,
)

T1 = "a" * 32
T2 = "b" * 32
MS = 1_000_000
BASE = 1_800_000_000 * 1_000_000_000


def _span(trace_id, span_id, parent, name, service, start_ms, end_ms, **attributes):
    return {"trace_id": trace_id, "span_id": span_id, "parent_span_id": parent, "name": name, "kind": "INTERNAL",
            "service": service, "start_unix_nano": BASE + start_ms * MS, "end_unix_nano": BASE + end_ms * MS,
            "status": attributes.pop("status", "UNSET"), "attributes": attributes}


def _write(path: Path, spans: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for s in spans:
            f.write(json.dumps(s) + "\n")


@pytest.fixture
def trace_dir(tmp_path) -> Path:
    """One query across three services (files per service, one rotated), plus MCP housekeeping."""
    d = tmp_path / "traces"
    rag, ks, llm = "nucleus-rag-pipeline", "nucleus-knowledge-store", "nucleus-llm-orchestration"
    _write(d / "rag_pipeline.jsonl", [
        _span(T1, "0000000000000001", "00000000000000ff", "tools/call search_and_rank", rag, 0, 100,
              **{"mcp.method.name": "tools/call"}),
        _span(T1, "0000000000000002", "0000000000000001", "rag.search_and_rank", rag, 2, 98,
              **{"nucleus.tenant_id": "acme", "nucleus.degraded": False}),
        _span(T1, "0000000000000003", "0000000000000002", "rag.embed", rag, 5, 30),
        _span(T1, "0000000000000005", "0000000000000002", "rag.retrieve.vector", rag, 31, 90,
              **{"nucleus.candidates": 50}),
        _span("c" * 32, "00000000000000c1", None, "initialize", rag, 500, 501, **{"mcp.method.name": "initialize"}),
    ])
    _write(d / "rag_pipeline.jsonl.1", [
        _span(T2, "0000000000000021", None, "nucleus.v1.KnowledgeStore/IngestDocuments", ks, -1000, -900,
              **{"rpc.grpc.status_code": 3}, status="UNSET"),
    ])
    _write(d / "llm_orchestration.jsonl", [
        _span(T1, "0000000000000004", "0000000000000003", "embeddings all-MiniLM-L6-v2", llm, 8, 28,
              **{"gen_ai.operation.name": "embeddings"}),
    ])
    _write(d / "knowledge_store.jsonl", [
        _span(T1, "0000000000000006", "0000000000000005", "knowledge_store.search_by_vector", ks, 40, 80,
              status="ERROR"),
    ])
    (d / "knowledge_store.metrics.jsonl").write_text("{\"resource_metrics\": []}\n")
    with open(d / "knowledge_store.jsonl", "a") as f:
        f.write('{"trace_id": "torn wri')   # a torn last line is skipped
    return d


def test_files_of_all_services_and_rotations_are_read_but_not_metrics(trace_dir):
    names = [p.name for p in trace_files(trace_dir)]
    assert names == ["knowledge_store.jsonl", "llm_orchestration.jsonl", "rag_pipeline.jsonl",
                     "rag_pipeline.jsonl.1"]
    assert len(load_spans(trace_files(trace_dir))) == 8


def test_spans_are_grouped_by_trace_and_drawn_as_a_tree(trace_dir):
    traces = group_traces(load_spans(trace_files(trace_dir)))
    assert [t.trace_id for t in traces] == [T2, T1, "c" * 32]
    query = traces[1]
    assert query.services == ["nucleus-knowledge-store", "nucleus-llm-orchestration", "nucleus-rag-pipeline"]
    assert [r.name for r in query.roots] == ["tools/call search_and_rank"]   # parent is the agent's span
    rows = [(prefix, span.name) for prefix, span in tree_rows(query)]
    assert rows == [
        ("", "tools/call search_and_rank"),
        ("└─ ", "rag.search_and_rank"),
        ("   ├─ ", "rag.embed"),
        ("   │  └─ ", "embeddings all-MiniLM-L6-v2"),
        ("   └─ ", "rag.retrieve.vector"),
        ("      └─ ", "knowledge_store.search_by_vector"),
    ]


def test_bars_are_placed_by_start_time_and_sized_by_duration(trace_dir):
    query = group_traces(load_spans(trace_files(trace_dir)))[1]
    by_name = {s.name: s for s in query.spans}
    root = bar(by_name["tools/call search_and_rank"], query)
    assert root == "━" * BAR_WIDTH
    vector = bar(by_name["rag.retrieve.vector"], query)
    assert len(vector) == BAR_WIDTH
    assert vector.index("━") == int(0.31 * BAR_WIDTH)
    assert vector.count("━") == round(0.59 * BAR_WIDTH)


def test_selection_skips_housekeeping_and_matches_id_prefixes(trace_dir):
    traces = group_traces(load_spans(trace_files(trace_dir)))
    assert [t.trace_id for t in select_traces(traces, last=1)] == [T1]
    assert [t.trace_id for t in select_traces(traces, last=1, include_all=True)] == ["c" * 32]
    assert [t.trace_id for t in select_traces(traces, last=0)] == [T2, T1]
    assert [t.trace_id for t in select_traces(traces, last=1, trace_id="BBBB")] == [T2]
    with pytest.raises(NotFound):
        select_traces(traces, last=1, trace_id="0123")


def test_key_attributes_are_short_and_skip_what_the_row_shows():
    from cli.traces import SpanRecord

    span = SpanRecord.from_json(_span(T1, "1", None, "x", "s", 0, 1, **{
        "rpc.system": "grpc", "rpc.grpc.status_code": 5, "nucleus.tenant_id": "acme", "nucleus.score": 0.123456}))
    assert key_attributes(span) == "grpc=NOT_FOUND tenant_id=acme score=0.123"


def test_nucleus_traces_prints_the_waterfall_of_the_latest_trace(trace_dir, capsys):
    code = cli_main(["traces", "--trace-dir", str(trace_dir), "--last", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert T1 in out
    for name in ("rag.search_and_rank", "embeddings all-MiniLM-L6-v2", "knowledge_store.search_by_vector"):
        assert name in out
    assert "knowledge-store" in out and "llm-orchestration" in out
    assert "━" in out
    assert T2 not in out


def test_nucleus_traces_reads_the_data_dir_and_lists(trace_dir, capsys):
    code = cli_main(["--data-dir", str(trace_dir.parent), "traces", "--list", "--last", "0"])
    out = capsys.readouterr().out
    assert code == 0 and T1 in out and T2 in out


def test_nucleus_traces_without_files_says_where_it_looked(tmp_path, capsys):
    code = cli_main(["traces", "--trace-dir", str(tmp_path / "none")])
    assert code == NotFound.exit_code
    assert "no trace files" in capsys.readouterr().err


def test_render_uses_the_given_console(trace_dir):
    from cli.traces import render_trace

    console = Console(record=True, width=200)
    render_trace(group_traces(load_spans(trace_files(trace_dir)))[1], console)
    text = console.export_text()
    assert "rag.retrieve.vector" in text and "candidates=50" in text
