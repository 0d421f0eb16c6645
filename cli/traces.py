"""`nucleus traces`: the local trace files of all services, grouped by trace, drawn as waterfalls.

    nucleus traces                    the 3 most recent traces
    nucleus traces --last 10          the 10 most recent
    nucleus traces --trace-id 4bf92f  one trace (an id prefix is enough)
    nucleus traces --list             one line per trace instead of waterfalls

Each service writes `<trace dir>/<service>.jsonl` (rotated to `.1`, `.2`; see shared.telemetry;
the directory is `<data dir>/traces` unless NUCLEUS_OTEL_TRACE_DIR says otherwise). A waterfall
row is one span: its place in the call tree, service, duration, a bar placed by its start time
within the trace, and its key attributes. A span whose parent is not in the files (the agent's
own span, say) is drawn as a root. Reading the files and building the call tree is
shared.telemetry.trace_files (the web console's Traces page reads them too).
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from shared.errors import NotFound
from shared.settings import TelemetrySettings, cli_settings
from shared.telemetry.trace_files import (  # noqa: F401 - the reading half, re-exported
    SpanRecord,
    Trace,
    group_traces,
    load_spans,
    select_traces,
    trace_files,
    tree_rows,
)

BAR_WIDTH = 40
ATTRS_WIDTH = 90
# Attributes that the row already shows (name, service) or that are noise in a terminal.
_HIDDEN_ATTRS = {"rpc.system", "rpc.service", "rpc.method", "server.address", "server.port", "client.address",
                 "mcp.protocol.version", "jsonrpc.request.id", "mcp.method.name", "gen_ai.system",
                 "network.peer.address", "network.peer.port"}
_SERVICE_STYLES = {"nucleus-rag-pipeline": "cyan", "nucleus-knowledge-store": "green",
                   "nucleus-llm-orchestration": "magenta"}
_GRPC_CODES = {0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
               6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
               10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
               15: "DATA_LOSS", 16: "UNAUTHENTICATED"}


# ---------------------------------------------------------------------------- drawing
def bar(span: SpanRecord, trace: Trace, width: int = BAR_WIDTH) -> str:
    """The span's interval drawn inside the trace's [start, end] on `width` cells."""
    total = max(trace.end_ns - trace.start_ns, 1)
    offset = min(width - 1, int((span.start_ns - trace.start_ns) * width / total))
    length = max(1, min(width - offset, round((span.end_ns - span.start_ns) * width / total)))
    return " " * offset + "━" * length + " " * (width - offset - length)


def key_attributes(span: SpanRecord, limit: int = ATTRS_WIDTH) -> str:
    parts = []
    for key, value in span.attributes.items():
        if key in _HIDDEN_ATTRS:
            continue
        if key == "rpc.grpc.status_code":
            if value == 0:
                continue
            value = _GRPC_CODES.get(value, value)
            key = "grpc"
        if isinstance(value, float):
            value = f"{value:.3g}"
        elif isinstance(value, list):
            value = ",".join(str(v) for v in value)
        parts.append(f"{key.removeprefix('nucleus.')}={value}")
    text = " ".join(parts)
    return text if limit <= 0 or len(text) <= limit else text[:limit - 1] + "…"


def _short(service: str) -> str:
    return service.removeprefix("nucleus-")


def render_trace(trace: Trace, console: Console, *, all_attributes: bool = False) -> None:
    """One waterfall, one line per span. Span names and services are never cut; on a narrow
    terminal the bar shrinks (to 10 cells) and the attributes are cut (all shown with --attrs)."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(trace.start_ns / 1e9))
    roots = trace.roots
    title = Text.assemble(("trace ", "bold"), (trace.trace_id, "bold yellow"),
                          f"  {roots[0].name if roots else '?'}  {started}  {trace.duration_ms:.1f} ms  "
                          f"{len(trace.spans)} spans  services: {', '.join(_short(s) for s in trace.services)}")
    rows = tree_rows(trace)
    name_w = max(len(prefix) + len(span.name) for prefix, span in rows)
    service_w = max(len(_short(span.service)) for _, span in rows)
    ms_w = max(len(f"{span.duration_ms:.1f}") for _, span in rows)
    spare = console.width - name_w - service_w - ms_w - 4
    bar_w = max(10, min(BAR_WIDTH, spare // 2))
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, show_edge=False,
                  collapse_padding=True)
    table.add_column("span", no_wrap=True, min_width=name_w)
    table.add_column("service", no_wrap=True, min_width=service_w)
    table.add_column("ms", justify="right", no_wrap=True, min_width=ms_w)
    table.add_column("timeline", no_wrap=True, min_width=bar_w, max_width=bar_w)
    table.add_column("attributes", ratio=1, no_wrap=not all_attributes,
                     overflow="fold" if all_attributes else "ellipsis")
    for prefix, span in rows:
        style = _SERVICE_STYLES.get(span.service, "white")
        name = Text(prefix, style="dim") + Text(span.name, style="bold red" if span.status == "ERROR" else "")
        table.add_row(name, Text(_short(span.service), style=style), f"{span.duration_ms:.1f}",
                      Text(bar(span, trace, bar_w), style="red" if span.status == "ERROR" else style),
                      key_attributes(span, limit=0 if all_attributes else ATTRS_WIDTH))
    console.print(table)
    console.print()


def render_list(traces: Sequence[Trace], console: Console) -> None:
    table = Table(title="traces (oldest first)", box=None, title_justify="left")
    for col in ("trace id", "root span", "started", "ms", "spans", "services", "errors"):
        table.add_column(col, no_wrap=col in ("trace id", "started", "ms"), overflow="fold")
    for t in traces:
        roots = t.roots
        errors = sum(s.status == "ERROR" for s in t.spans)
        table.add_row(t.trace_id, roots[0].name if roots else "?",
                      time.strftime("%H:%M:%S", time.localtime(t.start_ns / 1e9)), f"{t.duration_ms:.1f}",
                      str(len(t.spans)), ", ".join(_short(s) for s in t.services), str(errors) if errors else "")
    console.print(table)


# ---------------------------------------------------------------------------- CLI
def default_trace_dir(args: argparse.Namespace) -> Path:
    explicit = getattr(args, "trace_dir", None) or TelemetrySettings().trace_dir
    if explicit:
        return Path(explicit).resolve()
    data_dir = getattr(args, "data_dir", None)
    return (Path(data_dir).resolve() if data_dir else cli_settings(args).data_dir) / "traces"


def cmd_traces(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console()
    trace_dir = default_trace_dir(args)
    files = trace_files(trace_dir)
    if not files:
        raise NotFound(f"no trace files in {trace_dir}; services write them while they run "
                       "(NUCLEUS_OTEL_TRACE_FILE=true, the default)")
    traces = group_traces(load_spans(files))
    chosen = select_traces(traces, last=args.last, trace_id=args.trace_id or "", include_all=args.all)
    if not chosen:
        console.print(f"no traces in {trace_dir} yet")
        return 0
    if args.list:
        render_list(chosen, console)
        return 0
    for t in chosen:
        render_trace(t, console, all_attributes=args.attrs)
    return 0


def register(subparsers: Any) -> None:
    """Add `nucleus traces` to the operator CLI (called by cli.main)."""
    p = subparsers.add_parser("traces", help="show recent traces from the local trace files as waterfalls")
    p.add_argument("--last", type=int, default=3, help="how many of the most recent traces (default 3; 0 = all)")
    p.add_argument("--trace-id", dest="trace_id", default="", help="one trace, by id or id prefix")
    p.add_argument("--list", action="store_true", help="one line per trace instead of waterfalls")
    p.add_argument("--all", action="store_true", help="include MCP housekeeping traces (initialize, tools/list)")
    p.add_argument("--attrs", action="store_true", help="show every attribute, not just the first line")
    p.add_argument("--trace-dir", dest="trace_dir", help="default <data dir>/traces or $NUCLEUS_OTEL_TRACE_DIR")
    p.set_defaults(func=cmd_traces)
