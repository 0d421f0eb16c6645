"""Reading the local trace files the services write (file_exporters.py): spans, traces, call trees.

    trace_files(dir)            `<service>.jsonl` and its rotations `.jsonl.N` (metrics files excluded)
    load_spans(files, tail_bytes=0)   every span record in them (0: whole files; else only the last
                                `tail_bytes` of each file, the first, torn line dropped)
    group_traces(spans)         spans grouped by trace id, oldest trace first
    select_traces(...)          the last N traces (MCP housekeeping hidden) or one by id prefix
    tree_rows(trace)            (tree prefix, span) in depth-first order
    recent_traces(dir, ...)     bounded: the last `tail_bytes` of each current file, the `limit` newest
    valid_trace_id(text)        a W3C trace id: 32 lowercase hex digits, not all zeros

Pure reading, no rendering: `nucleus traces` (cli/traces.py) draws terminal waterfalls from
these, the web console (services/rag_pipeline/console) draws SVG ones. A line that is not a span
record (a torn write) is skipped.
"""
from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.errors import NotFound

# MCP session housekeeping: a trace made only of these is hidden unless asked for.
HOUSEKEEPING = frozenset({"initialize", "notifications/initialized", "ping", "tools/list", "resources/list",
                          "prompts/list", "resources/templates/list", "server/discover", "logging/setLevel"})
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class SpanRecord:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    service: str
    kind: str
    start_ns: int
    end_ns: int
    status: str
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @staticmethod
    def from_json(obj: dict[str, Any]) -> SpanRecord:
        return SpanRecord(
            trace_id=str(obj["trace_id"]), span_id=str(obj["span_id"]), parent_span_id=obj.get("parent_span_id"),
            name=str(obj.get("name", "")), service=str(obj.get("service", "")), kind=str(obj.get("kind", "")),
            start_ns=int(obj.get("start_unix_nano", 0)), end_ns=int(obj.get("end_unix_nano", 0)),
            status=str(obj.get("status", "UNSET")), attributes=dict(obj.get("attributes") or {}))


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str
    spans: tuple[SpanRecord, ...]       # sorted by start time

    @property
    def start_ns(self) -> int:
        return min(s.start_ns for s in self.spans)

    @property
    def end_ns(self) -> int:
        return max(s.end_ns for s in self.spans)

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def services(self) -> list[str]:
        return sorted({s.service for s in self.spans})

    @property
    def roots(self) -> list[SpanRecord]:
        ids = {s.span_id for s in self.spans}
        return [s for s in self.spans if not s.parent_span_id or s.parent_span_id not in ids]

    @property
    def housekeeping(self) -> bool:
        return all(s.attributes.get("mcp.method.name") in HOUSEKEEPING or s.name in HOUSEKEEPING
                   for s in self.spans)


# ---------------------------------------------------------------------------- reading
def trace_files(trace_dir: Path) -> list[Path]:
    """`<service>.jsonl` and its rotated `.jsonl.N` files (metrics files excluded)."""
    if not trace_dir.is_dir():
        return []
    return sorted(p for p in trace_dir.iterdir()
                  if p.is_file() and ".metrics." not in p.name
                  and (p.name.endswith(".jsonl") or (".jsonl." in p.name and p.name.rsplit(".", 1)[-1].isdigit())))


def _lines(path: Path, tail_bytes: int) -> list[bytes]:
    """The file's lines; with `tail_bytes` > 0 only its last `tail_bytes` (a cut first line dropped)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if tail_bytes <= 0 or size <= tail_bytes:
            return f.read().splitlines()
        f.seek(size - tail_bytes)
        lines = f.read(tail_bytes).splitlines()
        return lines[1:]                     # the first line starts somewhere inside a record


def load_spans(files: Iterable[Path], *, tail_bytes: int = 0) -> list[SpanRecord]:
    """Every span in `files` (only the last `tail_bytes` of each when > 0); lines that are not
    span records (torn writes) are skipped."""
    spans: list[SpanRecord] = []
    for path in files:
        try:
            lines = _lines(path, tail_bytes)
        except OSError:
            continue
        for line in lines:
            try:
                spans.append(SpanRecord.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return spans


def group_traces(spans: Iterable[SpanRecord]) -> list[Trace]:
    """Spans grouped by trace id (duplicates dropped), traces ordered oldest first."""
    by_trace: dict[str, dict[str, SpanRecord]] = defaultdict(dict)
    for span in spans:
        by_trace[span.trace_id][span.span_id] = span
    traces = [Trace(tid, tuple(sorted(found.values(), key=lambda s: (s.start_ns, s.span_id))))
              for tid, found in by_trace.items()]
    return sorted(traces, key=lambda t: t.start_ns)


def select_traces(traces: Sequence[Trace], *, last: int, trace_id: str = "", include_all: bool = False) -> list[Trace]:
    if trace_id:
        wanted = trace_id.lower()
        found = [t for t in traces if t.trace_id.startswith(wanted)]
        if not found:
            raise NotFound(f"no trace with id {trace_id!r} in the local trace files")
        return found
    shown = [t for t in traces if include_all or not t.housekeeping]
    return shown[-last:] if last > 0 else shown


def recent_traces(trace_dir: Path, *, tail_bytes: int, limit: int) -> list[Trace]:
    """The `limit` most recent traces (oldest first) in the last `tail_bytes` of each current
    `<service>.jsonl` (rotations not read): the read is bounded whatever the files' size."""
    current = [p for p in trace_files(trace_dir) if p.name.endswith(".jsonl")]
    traces = group_traces(load_spans(current, tail_bytes=tail_bytes))
    return traces[-limit:] if limit > 0 else traces


def valid_trace_id(text: str) -> bool:
    """A W3C trace id as the files hold it: 32 lowercase hex digits, not all zeros."""
    return bool(_TRACE_ID.fullmatch(text)) and text != "0" * 32


# ---------------------------------------------------------------------------- call tree
def tree_rows(trace: Trace) -> list[tuple[str, SpanRecord]]:
    """(tree prefix, span) in depth-first order, children by start time."""
    children: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in trace.spans:
        if span.parent_span_id:
            children[span.parent_span_id].append(span)
    rows: list[tuple[str, SpanRecord]] = []

    def walk(span: SpanRecord, lead: str, connector: str) -> None:
        rows.append((lead + connector, span))
        kids = children.get(span.span_id, [])
        below = lead + ("" if not connector else ("   " if connector == "└─ " else "│  "))
        for i, kid in enumerate(kids):
            walk(kid, below, "└─ " if i == len(kids) - 1 else "├─ ")

    for root in trace.roots:
        walk(root, "", "")
    return rows


__all__ = ["HOUSEKEEPING", "SpanRecord", "Trace", "trace_files", "load_spans", "group_traces", "select_traces",
           "recent_traces", "valid_trace_id", "tree_rows"]
