"""The Traces page's data: recent SearchAndRank traces from the local trace files, as waterfalls.

    search_traces(trace_dir)        the slowest first, each with its spans' services (bounded read)
    one_trace(trace_dir, trace_id)  one trace's waterfall rows (InvalidArgument: not a trace id;
                                    NotFound: not in the files' recent part)

The services write `<data dir>/traces/<service>.jsonl` (shared/telemetry/file_exporters.py); in
split mode the three processes share the data directory, so this process reads all of them. Only
the last TAIL_BYTES of each file are read and at most MAX_TRACES traces kept, whatever the files'
size. A row shows a span's name, kind, service, duration, status and the attributes in
SHOWN_ATTRIBUTES only (counts and RPC codes, never text that could carry content). The bar of a
row is an SVG rect placed in a 0..WIDTH viewBox (attributes, not inline style: the CSP forbids it).
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from shared.errors import InvalidArgument, NotFound
from shared.telemetry.trace_files import Trace, recent_traces, tree_rows, valid_trace_id

TAIL_BYTES = 2 * 1024 * 1024          # read from the end of each `<service>.jsonl`
MAX_TRACES = 500                      # the most recent traces considered
SHOWN = 50                            # SearchAndRank traces listed
WIDTH = 1000.0                        # the waterfall's viewBox width
SHOWN_ATTRIBUTES = ("nucleus.results", "nucleus.candidates", "nucleus.phrases", "nucleus.top_k_final",
                    "nucleus.fallback", "nucleus.degraded", "rpc.method", "rpc.grpc.status_code")
_ROOTS = ("rag.search_and_rank",)     # the core's span, whichever transport asked


def is_search(trace: Trace) -> bool:
    """A SearchAndRank query: the core's span, or the gRPC method's."""
    return any(s.name in _ROOTS or s.name.endswith("/SearchAndRank") for s in trace.spans)


def _short(service: str) -> str:
    return service.removeprefix("nucleus-")


def _read(trace_dir: Path | None) -> list[Trace]:
    return recent_traces(trace_dir, tail_bytes=TAIL_BYTES, limit=MAX_TRACES) if trace_dir is not None else []


def summary(trace: Trace) -> dict[str, Any]:
    roots = trace.roots
    return {
        "trace_id": trace.trace_id, "root": roots[0].name if roots else "?",
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(trace.start_ns / 1e9)),
        "duration_ms": trace.duration_ms, "spans": len(trace.spans),
        "services": [_short(s) for s in trace.services], "errors": sum(s.status == "ERROR" for s in trace.spans),
    }


def waterfall(trace: Trace) -> dict[str, Any]:
    """The trace's summary and one row per span, depth first, its bar placed by start and duration."""
    total = max(trace.end_ns - trace.start_ns, 1)
    rows = []
    for prefix, span in tree_rows(trace):
        x = (span.start_ns - trace.start_ns) * WIDTH / total
        w = max(WIDTH / 500, (span.end_ns - span.start_ns) * WIDTH / total)
        attrs = [(k.removeprefix("nucleus."), _value(span.attributes[k]))
                 for k in SHOWN_ATTRIBUTES if k in span.attributes]
        rows.append({"prefix": prefix, "name": span.name, "kind": span.kind, "service": _short(span.service),
                     "duration_ms": span.duration_ms, "status": span.status, "error": span.status == "ERROR",
                     "x": round(min(x, WIDTH - 1), 2), "w": round(min(w, WIDTH - min(x, WIDTH - 1)), 2),
                     "attrs": attrs})
    return {**summary(trace), "rows": rows, "width": WIDTH}


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)[:200]
    return str(value)[:200]


async def search_traces(trace_dir: Path | None) -> dict[str, Any]:
    """The recent SearchAndRank traces, slowest first (at most SHOWN)."""
    traces = await asyncio.to_thread(_read, trace_dir)
    found = sorted((t for t in traces if is_search(t)), key=lambda t: -t.duration_ms)[:SHOWN]
    return {"traces": [summary(t) for t in found], "trace_dir": str(trace_dir) if trace_dir else "",
            "read": len(traces)}


async def one_trace(trace_dir: Path | None, trace_id: str) -> dict[str, Any]:
    if not valid_trace_id(trace_id):
        raise InvalidArgument("trace_id", "must be 32 lowercase hexadecimal digits")
    traces = await asyncio.to_thread(_read, trace_dir)
    found = next((t for t in traces if t.trace_id == trace_id), None)
    if found is None:
        raise NotFound(f"no trace {trace_id} in the recent part of the local trace files")
    return waterfall(found)


__all__ = ["search_traces", "one_trace", "waterfall", "is_search", "SHOWN_ATTRIBUTES", "TAIL_BYTES", "MAX_TRACES"]
