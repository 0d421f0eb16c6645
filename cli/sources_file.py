"""The federation's sources file as the CLI reads it: where it is, its sources, the running
RAGPipeline's published view of it (`<sources file>.status.json`), the summary lines of `nucleus
status`, and asking the service to reload (`<sources file>.reload`). The `nucleus sources`
commands are in sources.py (list, show, reload), sources_edit.py and sources_registry.py.
"""
from __future__ import annotations

import argparse
import secrets
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from cli.stack import data_dir
from services.rag_pipeline.federation.sources import (SourcesFileError, load_sources, read_status_file,
                                                      reload_request_path)
from shared.settings import cli_settings

INVALID_EXIT = 2
UNREACHABLE_EXIT = 3


def sources_file(args: argparse.Namespace) -> Path:
    if getattr(args, "file", None):
        return Path(args.file).resolve()
    configured = cli_settings(args).sources_file
    return configured.expanduser().resolve() if configured else data_dir(args) / "sources.json"


def ago(unix: float) -> str:
    if not unix:
        return "never"
    secs = max(0.0, time.time() - unix)
    return f"{secs:.0f}s ago" if secs < 120 else f"{secs / 60:.0f}m ago" if secs < 7200 else f"{secs / 3600:.0f}h ago"


def state_markup(state: str) -> str:
    colour = {"connected": "green", "action_required": "yellow", "locked": "yellow", "error": "red"}.get(state, "dim")
    return f"[{colour}]{escape(state)}[/{colour}]"


def load(path: Path) -> tuple[list[Any], str]:
    try:
        return list(load_sources(path)), ""
    except SourcesFileError as err:
        return [], str(err)


#: States that are a federation problem worth a line in `nucleus status` (a disabled source's
#: `locked` is the operator's choice, and `unknown` is not probed yet).
PROBLEM_STATES = ("error", "action_required", "locked")
MAX_PROBLEM_LINES = 20


def source_lines(path: Path) -> list[str]:
    """Lines for `nucleus status` (rich markup): one summary line, one line per failing source
    (its state and last error), and the last reload error."""
    published = read_status_file(path)
    sources, local_error = load(path)
    if not sources and not (published or {}).get("sources") and not local_error:
        return [f"[dim]federation: no remote sources ({escape(str(path))} absent)[/dim]"
                if not path.exists() else f"[dim]federation: no remote sources ({escape(str(path))})[/dim]"]
    lines = []
    rows = (published or {}).get("sources") or [s.to_json() for s in sources]
    counts: dict[str, int] = {}
    failing: list[tuple[str, str, str]] = []
    for row in rows:
        status = row.get("status") or {}
        state = status.get("state", "unknown")
        counts[state] = counts.get(state, 0) + 1
        if state in PROBLEM_STATES and row.get("enabled", True):
            failing.append((str(row.get("id", "?")), state, str(status.get("last_error", ""))))
    summary = ", ".join(f"{n} {escape(s)}" for s, n in sorted(counts.items())) or "none"
    lines.append(f"federation: {len(rows)} remote sources ({summary}); file {escape(str(path))}")
    for sid, state, error in failing[:MAX_PROBLEM_LINES]:
        lines.append(f"  source {escape(sid)}: {state_markup(state)}" + (f": {escape(error[:300])}" if error else ""))
    if len(failing) > MAX_PROBLEM_LINES:
        lines.append(f"  … {len(failing) - MAX_PROBLEM_LINES} more failing sources (`nucleus sources list`)")
    error = (published or {}).get("last_error") or local_error
    if error:
        kept = " (the service keeps its last good configuration)" if published else ""
        lines.append(f"  [red]sources file error[/red]{kept}: {escape(error)}")
    return lines


def request_reload(path: Path, *, wait_s: float = 5.0) -> dict | None:
    """Ask the running service to reload: write a fresh token in the reload request file, which
    it polls, and wait until its status file says it answered that token. The service's status
    once it has (None: no running service answered within `wait_s`)."""
    before = (read_status_file(path) or {}).get("reloads", -1)
    token = f"{time.time_ns()}-{secrets.token_hex(4)}"
    request = reload_request_path(path)
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(token)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        status = read_status_file(path)
        if status and (status.get("answered_request") == token
                       or ("answered_request" not in status and status.get("reloads", -1) > before)):
            return status
        time.sleep(0.05)
    return None
