"""shared.telemetry.trace_files: bounded reads of the services' trace files, traces, call trees, trace ids."""
from __future__ import annotations

import json
from pathlib import Path

from shared.telemetry.trace_files import (
    group_traces,
    load_spans,
    recent_traces,
    trace_files,
    tree_rows,
    valid_trace_id,
)

MS = 1_000_000
BASE = 1_800_000_000 * 1_000_000_000


def span(trace: str, sid: str, parent: str | None, name: str, service: str, start: int, end: int) -> dict:
    return {"trace_id": trace, "span_id": sid, "parent_span_id": parent, "name": name, "kind": "INTERNAL",
            "service": service, "start_unix_nano": BASE + start * MS, "end_unix_nano": BASE + end * MS,
            "status": "UNSET", "attributes": {}}


def write(path: Path, spans: list[dict], prefix: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(prefix)
        for s in spans:
            f.write(json.dumps(s).encode() + b"\n")


def test_only_the_tail_of_a_file_is_read_and_its_cut_first_line_dropped(tmp_path):
    path = tmp_path / "nucleus-rag-pipeline.jsonl"
    old = [span(f"{i:032x}", f"{i:016x}", None, "old", "rag", i, i + 1) for i in range(1, 2001)]
    new = [span("f" * 32, "1" * 16, None, "new", "rag", 5000, 5010)]
    write(path, old + new)
    size = path.stat().st_size
    tail = 1500
    spans = load_spans([path], tail_bytes=tail)
    assert spans[-1].name == "new" and len(spans) < 10          # not the 2001 records of the whole file
    assert all(s.trace_id for s in spans)                       # the record cut at the tail's start is skipped
    assert len(load_spans([path])) == 2001 and size > tail      # without a bound: everything


def test_torn_and_foreign_lines_are_skipped(tmp_path):
    path = tmp_path / "svc.jsonl"
    write(path, [span("a" * 32, "1" * 16, None, "ok", "rag", 0, 1)], prefix=b'{"torn": \n[1, 2]\nnot json\n')
    assert [s.name for s in load_spans([path], tail_bytes=10_000)] == ["ok"]


def test_recent_traces_read_current_files_only_and_keep_the_newest(tmp_path):
    write(tmp_path / "nucleus-rag-pipeline.jsonl", [span(f"{i:032x}", "1" * 16, None, "q", "rag", i * 10, i * 10 + 5)
                                                    for i in range(1, 6)])
    write(tmp_path / "nucleus-rag-pipeline.jsonl.1", [span("e" * 32, "2" * 16, None, "rotated", "rag", 0, 1)])
    write(tmp_path / "nucleus-rag-pipeline.metrics.jsonl", [span("d" * 32, "3" * 16, None, "metric", "rag", 0, 1)])
    assert len(trace_files(tmp_path)) == 2
    traces = recent_traces(tmp_path, tail_bytes=1 << 20, limit=3)
    assert [t.trace_id for t in traces] == [f"{i:032x}" for i in (3, 4, 5)]
    assert recent_traces(tmp_path / "missing", tail_bytes=1 << 20, limit=3) == []


def test_spans_of_several_services_make_one_tree(tmp_path):
    t = "c" * 32
    write(tmp_path / "nucleus-rag-pipeline.jsonl", [
        span(t, "a" * 16, None, "rag.search_and_rank", "rag", 0, 50),
        span(t, "b" * 16, "a" * 16, "KnowledgeStore/Search", "rag", 5, 30)])
    write(tmp_path / "nucleus-knowledge-store.jsonl", [span(t, "c" * 16, "b" * 16, "ks.search", "ks", 6, 29)])
    write(tmp_path / "nucleus-llm-orchestration.jsonl", [span(t, "d" * 16, "a" * 16, "embed", "llm", 1, 4)])
    (trace,) = group_traces(load_spans(trace_files(tmp_path), tail_bytes=4096))
    assert trace.services == ["ks", "llm", "rag"] and trace.duration_ms == 50
    assert [(prefix, s.name) for prefix, s in tree_rows(trace)] == [
        ("", "rag.search_and_rank"), ("├─ ", "embed"), ("└─ ", "KnowledgeStore/Search"),
        ("   └─ ", "ks.search")]


def test_a_trace_id_is_32_lowercase_hex_digits():
    assert valid_trace_id("0af7651916cd43dd8448eb211c80319c")
    for bad in ("", "0" * 32, "0AF7651916CD43DD8448EB211C80319C", "0af7651916cd43dd8448eb211c80319", "g" * 32,
                "../../etc/passwd", "0af7651916cd43dd8448eb211c80319c\n", "0af7651916cd43dd8448eb211c80319c0"):
        assert not valid_trace_id(bad), bad
