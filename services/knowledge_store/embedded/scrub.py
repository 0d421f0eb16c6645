"""The background scrub: every row of every tenant checked against its checksum, at a bounded
read rate, so corruption is found before a search stumbles on it.

    a pass       every tenant with a database on disk, open or not, one after the other; the
                 entries in rid order, `BATCH` rows per read transaction (short snapshots, so
                 the write-ahead log keeps checkpointing), each entry with its vector and its
                 artifact's row (storage/rowsums.py); then SQLite's quick_check when the file
                 is at most `quick_check_max_mb` (cheap there, it reads every page)
    the rate     after each batch the scrub sleeps until the bytes it read (texts, vectors)
                 fit `scrub_rate_mb_s`; one thread, so at most one tenant's I/O at a time
    findings     rows failing their checksums go to the tenant's set of corrupt rows: left out
                 of answers, reported as "corrupt_rows" (a pass that finds none clears it);
                 a page-level error (SQLITE_CORRUPT, quick_check failing) marks the tenant
                 corrupt with the typed error naming the file (tenants.py `mark_corrupt`)
                 while other tenants serve; both name the newest backup (catalog.py)
    migration    rows written before checksums existed (schema < 3) get theirs here, a few
                 hundred per write transaction on the scrub's own connection (a write of
                 checksums only: the derived indexes do not change), so "unverified" counts
                 down to 0 without a long lock

A pass starts `scrub_interval_s` after the previous one began (0 = no scrub); `run_pass` runs one
now (tests, `nucleus check` uses the full check instead).
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.tenants import Tenants

log = logging.getLogger(__name__)

BATCH = 256                      # entries per read transaction
BACKFILL_BATCH = 500             # checksums written per write transaction


@dataclass
class TenantScrub:
    tenant_id: str
    rows: int = 0
    bytes: int = 0
    corrupt_rows: int = 0
    unverified: int = 0
    backfilled: int = 0
    page_error: str = ""
    quick_checked: bool = False


@dataclass
class PassReport:
    started_unix: float = 0.0
    seconds: float = 0.0
    tenants: list[TenantScrub] = field(default_factory=list)

    def line(self, rate_mb_s: float) -> str:
        rows = sum(t.rows for t in self.tenants)
        corrupt = sum(t.corrupt_rows for t in self.tenants)
        unverified = sum(t.unverified for t in self.tenants)
        pages = sum(1 for t in self.tenants if t.page_error)
        mb = sum(t.bytes for t in self.tenants) / 1e6
        when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(self.started_unix))
        return (f"scrub: last pass {when}, {len(self.tenants)} tenants, {rows} rows ({mb:.1f} MB) checked in "
                f"{self.seconds:.1f}s (limit {rate_mb_s:g} MB/s); {corrupt} corrupt rows, {pages} tenants with "
                f"damaged pages, {unverified} rows unverified")


class Scrub:
    """The scrub of one store's tenants (module docstring)."""

    def __init__(self, tenants: Tenants) -> None:
        self._tenants = tenants
        self._settings = tenants.settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pass_lock = threading.Lock()
        self.last: PassReport | None = None

    def start(self) -> None:
        if self._settings.scrub_interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="scrub", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def status_line(self) -> str:
        return self.last.line(self._settings.scrub_rate_mb_s) if self.last else ""

    def _loop(self) -> None:
        interval = self._settings.scrub_interval_s
        while not self._stop.wait(min(interval, 60.0) if self.last is None
                                  else max(0.0, self.last.started_unix + interval - time.time())):
            try:
                self.run_pass()
            except Exception:  # noqa: BLE001 - the scrub must log and go on, never take the store down
                log.exception("scrub pass failed")

    def run_pass(self) -> PassReport:
        """One pass over every tenant (module docstring)."""
        with self._pass_lock:
            report = PassReport(started_unix=time.time())
            started = time.perf_counter()
            for tenant_id in self._tenants.ids():
                if self._stop.is_set() or self._tenants.closed:
                    break
                report.tenants.append(self.scrub_tenant(tenant_id))
            report.seconds = time.perf_counter() - started
            self.last = report
            log.info("%s", report.line(self._settings.scrub_rate_mb_s))
            return report

    def scrub_tenant(self, tenant_id: str) -> TenantScrub:
        out = TenantScrub(tenant_id)
        path = self._tenants.database_path(tenant_id)
        try:
            conn = storage.db.connect_for_scrub(path)
        except sqlite3.Error as err:
            self._page_error(tenant_id, path, err, out)
            return out
        try:
            if not storage.rowsums.has_columns(conn):
                out.unverified = storage.rowsums.unverified(conn)      # migrated when the tenant opens
            else:
                found_rids: list[int] = []
                found_artifacts: list[str] = []
                try:
                    self._walk(conn, out, found_rids, found_artifacts)
                except BaseException:
                    self._rows_found(tenant_id, path, out, found_rids, found_artifacts, complete=False)
                    raise
                self._rows_found(tenant_id, path, out, found_rids, found_artifacts, complete=True)
                out.unverified = storage.rowsums.unverified(conn)
                if out.unverified and not self._settings.read_only:
                    self._backfill(path, out)
            limit = self._settings.quick_check_max_mb * 2**20
            if limit and path.stat().st_size <= limit:
                found = [r[0] for r in conn.execute("PRAGMA quick_check(20)")]
                out.quick_checked = True
                if found != ["ok"]:
                    raise sqlite3.DatabaseError(f"database disk image is malformed: quick_check: "
                                                f"{'; '.join(found[:5])}")
        except (sqlite3.Error, OSError) as err:
            self._page_error(tenant_id, path, err, out)
        finally:
            conn.close()
        return out

    def _rows_found(self, tenant_id: str, path: Path, out: TenantScrub, found_rids: list[int],
                    found_artifacts: list[str], *, complete: bool) -> None:
        """Record what a walk found (also a walk cut short by a damaged page); a complete walk
        that found nothing clears the tenant's corrupt rows (replaced or deleted since)."""
        rids, artifacts = self._tenants.corrupt_sets(tenant_id)
        out.corrupt_rows = len(found_rids) + len(found_artifacts)
        if found_rids or found_artifacts:
            new = set(found_rids) - rids or set(found_artifacts) - artifacts
            rids.update(found_rids)
            artifacts.update(found_artifacts)
            if new:
                self._report_rows(tenant_id, path, rids, artifacts)
        elif (rids or artifacts) and complete and not self._stop.is_set():
            rids.clear()
            artifacts.clear()
            self._tenants.health.clear(tenant_id, storage.faults.CORRUPT_ROWS)

    def _walk(self, conn: sqlite3.Connection, out: TenantScrub, rids: list[int], artifacts: list[str]) -> None:
        rate = self._settings.scrub_rate_mb_s * 1e6
        step = storage.rowsums.Scanned()
        began = time.monotonic()
        while not step.done and not self._stop.is_set():
            conn.execute("BEGIN")
            try:
                step = storage.rowsums.scan(conn, step.last_rid, BATCH)
            finally:
                conn.execute("COMMIT")
            out.rows += step.rows
            out.bytes += step.bytes
            rids += step.corrupt
            artifacts += step.corrupt_artifacts
            ahead = out.bytes / rate - (time.monotonic() - began)
            if ahead > 0:
                self._stop.wait(ahead)

    def _backfill(self, path: Path, out: TenantScrub) -> None:
        """Give unverified rows their checksums (schema-3 migration of older rows)."""
        try:
            conn = storage.db.connect_for_scrub(path, writer=True)
        except sqlite3.Error as err:
            log.warning("scrub: cannot fill checksums of %s: %s", path, err)
            return
        try:
            while not self._stop.is_set():
                conn.execute("BEGIN IMMEDIATE")
                try:
                    filled = storage.rowsums.backfill(conn, BACKFILL_BATCH)
                    conn.execute("COMMIT")
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                out.backfilled += filled
                if filled < BACKFILL_BATCH:
                    break
            out.unverified = storage.rowsums.unverified(conn)
        except sqlite3.Error as err:
            log.warning("scrub: filling checksums of %s stopped: %s", path, err)
        finally:
            conn.close()
        if out.backfilled:
            log.info("scrub: %d rows of %s given their checksums (%d still unverified)", out.backfilled, path,
                     out.unverified)

    def _report_rows(self, tenant_id: str, path: Path, rids: set[int], artifacts: set[str]) -> None:
        parts = []
        if rids:
            shown = sorted(rids)
            more = ", …" if len(shown) > 10 else ""
            parts.append(f"{len(shown)} entries (rid {', '.join(map(str, shown[:10]))}{more})")
        if artifacts:
            parts.append(f"{len(artifacts)} artifacts ({', '.join(sorted(artifacts)[:5])})")
        self._tenants.report(tenant_id, storage.faults.CORRUPT_ROWS,
                             f"tenant '{tenant_id}': {' and '.join(parts)} of {path} fail their checksums (found by "
                             "the scrub): left out of answers; re-ingest those documents or restore a backup")

    def _page_error(self, tenant_id: str, path: Path, err: BaseException, out: TenantScrub) -> None:
        error, kind = storage.faults.translate(err, tenant_id=tenant_id, path=path,
                                               data_dir=Path(self._settings.data_dir), action="scrub")
        out.page_error = str(error)
        if kind == storage.faults.CORRUPT:
            self._tenants.report(tenant_id, kind, str(error) + " (found by the scrub)")
            self._tenants.mark_corrupt(tenant_id, error)
        else:
            log.warning("scrub of tenant %s: %s", tenant_id, error)


class Scrubbing:
    """The store's `scrub` (a mixin of core.KnowledgeStore: `self._scrub` is its Scrub)."""

    _scrub: Scrub

    async def scrub(self) -> PassReport:
        """Run one scrub pass now (module docstring) and return what it found."""
        return await asyncio.to_thread(self._scrub.run_pass)
