"""Query sets stored per tenant, and evaluations of long sets run in the background with progress.

    QuerySets(data_dir)        save(tenant, name, raw, who) / listed(tenant) / load(tenant, set_id) /
                               delete(tenant, set_id, who, admin=...)
    EvalRuns(data_dir)         start(owner, total, work) / get(owner, run_id)

A stored set is the uploaded JSONL as sent (checked by `parse_query_set` first), in
`<data dir>/console/query_sets/<tenant>/<id>.jsonl` with a small `<id>.json` beside it (name,
queries, who uploaded it, when); the id is the content's hash, so an upload stored twice is one
set. A tenant keeps its newest MAX_SETS sets. Every user of the tenant may list and run them; the
user who stored a set, or the tenant's admin, may delete it; no path is ever read from a form
(an id is 16 hex digits, a tenant a safe name).

A background run belongs to the session's caller (tenant and user): its results are ranked for
that caller's visibility, so nobody else may read them (another caller's run id is answered as
unknown). At most MAX_RUNNING run at once (MAX_RUNNING_PER_OWNER per caller). Each run's state and
results are written to `<data dir>/console/query_runs/<tenant>/<run id>.json` (atomically; the
newest RUNS_PER_TENANT per tenant, for RUN_KEEP_S), so a restart loses none: a finished run reads
as it was, one that was still running reads as "interrupted", never as finished.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from services.rag_pipeline.console.evaluation import JudgedQuery, parse_query_set
from shared.errors import InvalidArgument, NotFound, NucleusError, PermissionDenied, ResourceExhausted
from shared.identity import TENANT_ID

log = logging.getLogger(__name__)

MAX_SETS = 20
SET_ID = re.compile(r"^[0-9a-f]{16}$")
NAME = re.compile(r"[^A-Za-z0-9 _.,:()-]+")
MAX_RUNNING, MAX_RUNNING_PER_OWNER, KEEP_RUNS, RUN_TTL_S = 8, 2, 100, 3600.0
RUNS_PER_TENANT, RUN_KEEP_S, SAVE_EVERY_S = 20, 7 * 86400.0, 1.0
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
NO_TENANT = "-"                         # the folder of runs whose owner names no tenant (never a tenant id)


class QuerySets:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "console" / "query_sets"

    def _dir(self, tenant: str) -> Path:
        if not TENANT_ID.match(tenant):
            raise InvalidArgument("tenant", "is not a tenant id")
        return self.root / tenant

    def save(self, tenant: str, name: str, raw: bytes, who: str) -> dict[str, Any]:
        """Store `raw` (a valid query set) for the tenant; the newest MAX_SETS are kept."""
        queries = parse_query_set(raw)
        folder = self._dir(tenant)
        folder.mkdir(parents=True, exist_ok=True)
        set_id = hashlib.sha256(raw).hexdigest()[:16]
        meta = {"id": set_id, "name": NAME.sub("_", name or "query set").strip()[:64] or "query set",
                "queries": len(queries), "uploaded_by": who, "uploaded_unix": int(time.time())}
        _write(folder / f"{set_id}.jsonl", raw)
        _write(folder / f"{set_id}.json", json.dumps(meta).encode())
        for old in self.listed(tenant)[MAX_SETS:]:
            for suffix in (".jsonl", ".json"):
                (folder / f"{old['id']}{suffix}").unlink(missing_ok=True)
        return meta

    def listed(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's stored sets, newest first."""
        folder = self._dir(tenant)
        out = []
        for path in folder.glob("*.json") if folder.is_dir() else ():
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and SET_ID.match(str(meta.get("id", ""))):
                out.append(meta)
        return sorted(out, key=lambda m: (-int(m.get("uploaded_unix", 0)), m["id"]))

    def delete(self, tenant: str, set_id: str, who: str, *, admin: bool) -> dict[str, Any]:
        """Remove a stored set: its uploader or the tenant's admin (PermissionDenied for anybody
        else, NotFound for an id the tenant does not hold). The listing entry goes first, so a
        half-done delete leaves no set that lists but does not load."""
        if not SET_ID.match(set_id):
            raise InvalidArgument("set", "is not a stored query set's id (16 hex digits)")
        folder = self._dir(tenant)
        try:
            meta = json.loads((folder / f"{set_id}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise NotFound(f"no stored query set {set_id} in tenant '{tenant}'") from None
        if not admin and meta.get("uploaded_by") != who:
            raise PermissionDenied("a stored query set is deleted by whoever stored it or the tenant's admin")
        (folder / f"{set_id}.json").unlink(missing_ok=True)
        (folder / f"{set_id}.jsonl").unlink(missing_ok=True)
        return meta

    def load(self, tenant: str, set_id: str) -> tuple[dict[str, Any], list[JudgedQuery]]:
        if not SET_ID.match(set_id):
            raise InvalidArgument("set", "is not a stored query set's id (16 hex digits)")
        folder = self._dir(tenant)
        try:
            meta = json.loads((folder / f"{set_id}.json").read_text(encoding="utf-8"))
            raw = (folder / f"{set_id}.jsonl").read_bytes()
        except (OSError, ValueError):
            raise NotFound(f"no stored query set {set_id} in tenant '{tenant}'") from None
        return meta, parse_query_set(raw)


def _write(path: Path, data: bytes) -> None:
    """`data` as `path`, whole or not at all (a temporary file synced, then renamed over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class EvalRun:
    run_id: str
    owner: tuple[str, str]
    total: int
    form: dict[str, str]
    done: int = 0
    status: str = "running"              # running | done | failed | interrupted (read back after a restart)
    result: dict[str, Any] | None = None
    error: str = ""
    started: float = field(default_factory=time.monotonic)
    started_unix: float = field(default_factory=time.time)
    task: asyncio.Task | None = None
    saved: float = 0.0                   # monotonic time of the last progress write

    def progress(self, done: int) -> None:
        self.done = done

    def record(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "owner": list(self.owner), "total": self.total, "form": self.form,
                "done": self.done, "status": self.status, "result": self.result, "error": self.error,
                "started_unix": self.started_unix}

    @classmethod
    def of_record(cls, rec: dict[str, Any]) -> EvalRun:
        """A run read back from its file: one recorded as running did not finish in this process."""
        status, result, error = str(rec["status"]), rec.get("result"), str(rec.get("error", ""))[:500]
        if status == "done" and not (isinstance(result, dict) and "rows" in result and "summary" in result):
            status, error = "failed", "its saved results cannot be read; evaluate the set again"
        return cls(str(rec["run_id"]), (str(rec["owner"][0]), str(rec["owner"][1])), int(rec["total"]),
                   {str(k): str(v) for k, v in dict(rec["form"]).items()}, done=int(rec["done"]),
                   status=status if status in ("done", "failed") else "interrupted",
                   result=result if status == "done" else None, error=error,
                   started=0.0, started_unix=float(rec.get("started_unix", 0)))


class EvalRuns:
    """Background runs; with `data_dir`, each run's state and results are also kept in
    `<data dir>/console/query_runs/<tenant>/<run id>.json` (atomic writes: at the start, at most
    every SAVE_EVERY_S of progress, at the end), the newest RUNS_PER_TENANT per tenant for at most
    RUN_KEEP_S, so a run outlives a restart: finished, it reads as it was; unfinished, as interrupted."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self._runs: dict[str, EvalRun] = {}
        self.root = Path(data_dir) / "console" / "query_runs" if data_dir is not None else None

    def _expire(self) -> None:
        now = time.monotonic()
        for run_id, run in list(self._runs.items()):
            if run.status != "running" and now - run.started > RUN_TTL_S:
                del self._runs[run_id]
        finished = [r for r in self._runs.values() if r.status != "running"]
        for run in sorted(finished, key=lambda r: r.started)[:max(0, len(self._runs) - KEEP_RUNS)]:
            del self._runs[run.run_id]

    def _path(self, owner: tuple[str, str], run_id: str) -> Path | None:
        """The run's file, from the verified owner's tenant and a checked run id (never a form's path)."""
        if self.root is None:
            return None
        tenant = owner[0] or NO_TENANT                       # the operator's credential names no tenant
        if tenant != NO_TENANT and not TENANT_ID.match(tenant) or not RUN_ID.match(run_id):
            raise InvalidArgument("run", "is not a query-set run of a tenant")
        return self.root / tenant / f"{run_id}.json"

    def _save(self, run: EvalRun) -> None:
        path = self._path(run.owner, run.run_id)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write(path, json.dumps(run.record()).encode())
        except OSError as err:               # the run goes on in memory; the page still shows it
            log.warning("query-set run %s not saved: %s", run.run_id, err.strerror or type(err).__name__)
        run.saved = time.monotonic()

    def _prune(self, folder: Path) -> None:
        """The tenant's newest RUNS_PER_TENANT run files younger than RUN_KEEP_S are kept."""
        files = []
        for path in folder.glob("*.json"):
            try:
                files.append((path.stat().st_mtime, path))
            except OSError:
                continue
        files.sort(reverse=True)
        cutoff = time.time() - RUN_KEEP_S
        running = {r.run_id for r in self._runs.values() if r.status == "running"}
        for i, (mtime, path) in enumerate(files):
            if (i >= RUNS_PER_TENANT or mtime < cutoff) and path.stem not in running:
                path.unlink(missing_ok=True)

    def start(self, owner: tuple[str, str], total: int, form: dict[str, str],
              work: Callable[[Callable[[int], None]], Awaitable[dict[str, Any]]]) -> EvalRun:
        """Run `work(progress)` in the background for `owner`; ResourceExhausted when too many run."""
        self._expire()
        running = [r for r in self._runs.values() if r.status == "running"]
        if len(running) >= MAX_RUNNING or sum(r.owner == owner for r in running) >= MAX_RUNNING_PER_OWNER:
            raise ResourceExhausted("too many query-set evaluations are running; wait for yours to finish")
        run = EvalRun(secrets.token_urlsafe(16), owner, total, form)

        def progress(done: int) -> None:
            run.progress(done)
            if time.monotonic() - run.saved >= SAVE_EVERY_S:
                self._save(run)

        async def body() -> None:
            try:
                run.result = await work(progress)
                run.done, run.status = run.total, "done"
            except NucleusError as err:
                run.status, run.error = "failed", str(err)[:500]
            except Exception:  # noqa: BLE001 - the run's page says it failed; the log says why
                log.exception("query-set run %s failed", run.run_id)
                run.status, run.error = "failed", "internal error (see the RAGPipeline's log)"
            await asyncio.to_thread(self._save, run)

        self._runs[run.run_id] = run
        self._save(run)
        path = self._path(owner, run.run_id)
        if path is not None and path.parent.is_dir():
            self._prune(path.parent)
        run.task = asyncio.get_running_loop().create_task(body())
        return run

    def get(self, owner: tuple[str, str], run_id: str) -> EvalRun:
        """The caller's run (this process's, else its file); another caller's (or an unknown) id is
        NotFound alike."""
        run = self._runs.get(run_id) if RUN_ID.match(run_id) else None
        if run is None and RUN_ID.match(run_id):
            run = self._read(owner, run_id)
        if run is None or run.owner != owner:
            raise NotFound("no such query-set run of yours (the newest runs of a tenant are kept a week)")
        return run

    def _read(self, owner: tuple[str, str], run_id: str) -> EvalRun | None:
        try:
            path = self._path(owner, run_id)
        except InvalidArgument:
            return None
        if path is None:
            return None
        try:
            return EvalRun.of_record(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None


__all__ = ["QuerySets", "EvalRuns", "EvalRun", "MAX_SETS"]
