"""The last folder ingests and syncs of each tenant, kept in the data directory for the console.

    record_run(data_dir, tenant, root, mode, outcomes, seconds)   after each `nucleus ingest DIR` run
                                                                 (and each --watch pass)
    read_runs(data_dir, tenant)                                  newest first, for the tenant page

One small JSON file per tenant, `<data dir>/ingest_runs/<tenant>.json`, bounded: the last
MAX_RUNS runs, each with at most MAX_FILES per-file outcomes (failed, then truncated, first) and
the counts of all. Written under an exclusive lock by temporary file + rename, so a reader never
sees a torn file and two writers keep each other's runs. Paths are relative to the folder, and the
folder is named by its last component only: a tenant's admin reads this, not the host's layout.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from shared.identity import TENANT_ID

log = logging.getLogger(__name__)

DIR_NAME = "ingest_runs"
MAX_RUNS = 20
MAX_FILES = 200
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TEXT = 300


def log_path(data_dir: Path, tenant: str) -> Path | None:
    """The tenant's file (None for what is not a tenant id, `shared.identity.TENANT_ID`)."""
    if not TENANT_ID.match(tenant):
        return None
    return Path(data_dir) / DIR_NAME / f"{tenant}.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_name(path.name + ".lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _relative(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return Path(path).name


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return []
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    runs = data.get("runs") if isinstance(data, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def record_run(data_dir: Path, tenant: str, root: Path, mode: str, outcomes: Iterable[Any],
               seconds: float) -> dict[str, Any] | None:
    """Add one run (its per-file outcomes: objects with path, status, reason, detail, documents,
    entries) to the tenant's log, keeping the newest MAX_RUNS. A failure to write is logged,
    never raised: the ingest itself succeeded."""
    path = log_path(data_dir, tenant)
    if path is None:
        return None
    root = Path(root).resolve()
    base = root if root.is_dir() else root.parent
    def text(value: Any) -> str:                   # a converter's message names the file by its full path
        return str(value).replace(f"{base}{os.sep}", "").replace(str(base), root.name)[:MAX_TEXT]

    files = [{"path": _relative(o.path, base), "status": o.status, "reason": text(o.reason),
              "detail": text(o.detail), "documents": int(o.documents), "entries": int(o.entries)}
             for o in outcomes]
    counts: dict[str, int] = {}
    for f in files:
        counts[f["status"]] = counts.get(f["status"], 0) + 1
    files.sort(key=lambda f: (f["status"] != "failed", f["status"] != "truncated", f["status"] == "unchanged",
                              f["path"]))
    run = {"finished_unix": int(time.time()), "folder": root.name, "mode": mode, "seconds": round(seconds, 2),
           "counts": counts, "files": files[:MAX_FILES], "files_left_out": max(0, len(files) - MAX_FILES)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            runs = [run, *_load(path)][:MAX_RUNS]
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"tenant": tenant, "runs": runs}, out)
            os.replace(tmp, path)
    except OSError as err:
        log.warning("the ingest run of tenant %s was not recorded for the console (%s)", tenant, err)
        return None
    return run


def read_runs(data_dir: Path | None, tenant: str) -> list[dict[str, Any]]:
    """The tenant's recorded runs, newest first ([] when none, or unreadable)."""
    path = log_path(data_dir, tenant) if data_dir is not None else None
    return _load(path) if path is not None else []


__all__ = ["record_run", "read_runs", "log_path", "MAX_RUNS", "MAX_FILES", "DIR_NAME"]
