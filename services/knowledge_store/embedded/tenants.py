"""Open tenants: each tenant's in-memory state, and how it is opened, rebuilt and closed.

    Tenant   db        TenantDB (SQLite, the system of record: storage/)
             index     VectorIndex (FAISS), rebuilt from SQLite's vectors on open
             keywords  KeywordIndex (in-memory BM25), rebuilt from SQLite's FTS5 rows on open
             rw        readers/writer lock around the two indexes (locking.py)
             allowed   row ids each filter allows, cleared under `rw.write()` (allowed_cache.py)
             write_lock, writer_queue()   where writers of the tenant queue (writes.py)

Isolation is structural: a tenant's data lives only in `<data_dir>/tenants/<tenant>/` and in its own
FAISS object; every call resolves exactly one tenant first (`Tenants.get`).

A tenant is opened on first use (by one thread; others wanting it wait on its opening lock). Opening checks
that the directory holds this tenant at the configured dimension, then loads both indexes from the files saved
next to SQLite (persistence.py) when their stamp matches what SQLite committed, replays the entries changed
since an older stamp (storage/index_log.py), or else builds them from SQLite with a log line saying why, so
after a crash records = keyword rows = vectors again. `counters` counts loads, replays and rebuilds. The
indexes are saved again in the background once `persist_after_rows` entries changed, and when the tenant is
closed or evicted. `forget` drops a tenant whose in-memory state could not be repaired: the next access
reopens (and so rebuilds) it.

Eviction: open tenants are kept in least-recently-used order with an estimate of their memory (FAISS
+ BM25 + TENANT_OVERHEAD_BYTES); after an open, while the total passes `memory_budget_mb`, the least
recently used tenant is saved and closed — never one used within EVICT_IDLE_S, nor one whose lock a
request holds or waits for (its write lock and its readers/writer lock are tried without waiting).
An evicted Tenant object is marked `evicted`; a write that finds its tenant evicted starts again on
the reopened one (writes.py), and a search that still holds the object finishes on it (its memory
goes when the last reference does, SQLite connections included, and freed heap is handed back to the
system with `malloc_trim`). Reopening loads the saved files, so answers are identical.

Faults: a tenant that cannot be opened (corrupted, unreadable) raises a typed error naming its path
(storage/faults.py) and is reported to `health` (../health.py); other tenants are not touched, and
the failed open is retried after OPEN_RETRY_S. An open runs SQLite's quick_check on databases up to
`quick_check_max_mb`; the scrub (scrub.py) marks a tenant whose pages it finds damaged corrupt until
a restore (`mark_corrupt`); rows failing their checksums are kept per tenant in `corrupt`
(storage/rowsums.py). Data problems name the newest backup (catalog.py). Saved indexes newer than
SQLite are lost commits: reported, kept in the database's meta until `nucleus check` acknowledges
them, never silently rebuilt over. A restore closes the tenant and answers Unavailable for it while
its files are swapped (`unavailable_for`, backup.py). A tenant whose files refuse writes is opened
read-only. Consistency: once the indexes are built, the count of entries is compared with the
vectors and keyword rows they were built from (no join, no extra scan); a mismatch is reported as
"inconsistent" and `on_inconsistent` is called to repair the tenant in the background (consistency.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import sqlite3
import threading
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from services.knowledge_store import validation
from services.knowledge_store.embedded import catalog, persistence, storage
from services.knowledge_store.embedded.allowed_cache import AllowedCache
from services.knowledge_store.embedded.keyword_index import KeywordBatch, KeywordIndex
from services.knowledge_store.embedded.locking import RWLock
from services.knowledge_store.embedded.vector_index import IndexConfig, VectorIndex
from services.knowledge_store.health import StoreHealth
from shared.errors import FailedPrecondition, NotFound, NucleusError, Unavailable
from shared.settings import KnowledgeStoreSettings

log = logging.getLogger(__name__)

OPEN_RETRY_S = 5.0          # a tenant that failed to open is not tried again sooner
TENANT_OVERHEAD_BYTES = 1792 * 1024     # connections, locks, Python objects, heap slack (measured)
SQLITE_CACHE_BYTES = 34 * 2**20         # the writer's page cache (2 MiB) + a reader's (32 MiB)
SAVE_FRACTION = 0.05        # see Tenants._save_due
REPLAY_MAX_ROWS = 200_000   # more changed entries than this since the saved stamp: rebuild instead
EVICT_IDLE_S = 1.0          # a tenant used this recently is not evicted (an internal guard, not a setting)


@dataclass(eq=False)
class Tenant:
    """One open tenant: its database, the indexes derived from it, and their locks."""
    tenant_id: str
    db: storage.db.TenantDB
    index: VectorIndex
    keywords: KeywordIndex
    rw: RWLock = field(default_factory=RWLock)
    allowed: AllowedCache = field(default_factory=AllowedCache)   # cleared under rw.write()
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    pending_repair: bool = False            # the open found its rows inconsistent
    unsaved: int = 0                        # entries changed since the indexes were saved (-1: never saved)
    memory: int = 0                         # estimated bytes (see Tenants.measure)
    last_used: float = 0.0                  # time.monotonic() of the last `Tenants.get`
    evicted: bool = False                   # closed by eviction: writers must reopen (writes.py)
    saving: bool = False                    # a background save is queued or running
    _queues: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def writer_queue(self) -> asyncio.Lock:
        """The asyncio lock writers of this tenant queue on, one per event loop."""
        loop = asyncio.get_running_loop()
        lock = self._queues.get(loop)
        if lock is None:
            lock = self._queues[loop] = asyncio.Lock()
        return lock


_libc = None


def _release_freed_memory() -> None:
    """Hand the memory of evicted tenants back to the system: glibc keeps freed heap pages
    (many small arrays, SQLite's caches) in the process until `malloc_trim`."""
    global _libc
    if _libc is False:
        return
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _libc.malloc_trim(0)
    except (OSError, AttributeError):       # not glibc: the allocator keeps its own policy
        _libc = False


class Tenants:
    """The open tenants of one store, by tenant id (see the module docstring)."""

    def __init__(self, settings: KnowledgeStoreSettings, bm25_weights: tuple[float, float]) -> None:
        self.settings = settings
        self.bm25_weights = bm25_weights
        self.closed = False
        self._root = Path(settings.data_dir) / "tenants"
        self._open: OrderedDict[str, Tenant] = OrderedDict()      # least recently used first
        self._verify_failed: set[str] = set()
        self.counters: Counter[str] = Counter()    # opened_loaded/replayed/rebuilt, saved, evicted
        self._opening: dict[str, threading.Lock] = {}
        self._registry = threading.Lock()
        self._failed: dict[str, tuple[float, NucleusError]] = {}     # tenant -> (retry at, error)
        self.health = StoreHealth(settings.data_dir, read_only=settings.read_only)
        self.on_inconsistent: Callable[[str], None] | None = None
        # tenant -> (rids, artifact ids) failing their checksums, found on read or by the scrub
        self.corrupt: dict[str, tuple[set[int], set[str]]] = {}
        self._restoring: dict[str, str] = {}        # tenant -> why it is briefly unavailable

    # -- problems ----------------------------------------------------------------------------

    def report(self, tenant_id: str, kind: str, message: str) -> None:
        """A problem of the tenant, for the store's health; data problems name the newest backup
        that would restore the tenant (catalog.py)."""
        if kind in (storage.faults.CORRUPT, storage.faults.CORRUPT_ROWS, storage.faults.LOST_COMMITS):
            message += catalog.note(Path(self.settings.data_dir), tenant_id)
        self.health.report(tenant_id, kind, message)

    def corrupt_sets(self, tenant_id: str) -> tuple[set[int], set[str]]:
        with self._registry:
            return self.corrupt.setdefault(tenant_id, (set(), set()))

    def mark_corrupt(self, tenant_id: str, error: NucleusError) -> None:
        """A page-level error found outside a request (the scrub): the tenant answers `error`
        until it opens cleanly again (a restore), other tenants serve on."""
        if "newest backup" not in str(error) and "no backup" not in str(error):
            error = FailedPrecondition(str(error) + catalog.note(Path(self.settings.data_dir), tenant_id))
        self._failed[tenant_id] = (float("inf"), error)
        self.forget(tenant_id)

    def database_path(self, tenant_id: str) -> Path:
        return self._root / storage.db.tenant_dir_name(tenant_id) / storage.db.DB_FILE

    def open_count(self) -> int:
        return len(self._open)

    def open_tenants(self) -> list[tuple[str, int]]:
        """(tenant, estimated bytes) of every open tenant, most recently used first."""
        with self._registry:
            return [(tid, t.memory) for tid, t in reversed(self._open.items())]

    def open_indexes(self) -> list[tuple[str, int]]:      # (index kind, live vectors) per open tenant
        with self._registry:
            return [(t.index.kind, t.index.ntotal) for t in self._open.values()]

    def memory_bytes(self) -> int:
        """Estimated memory of the open tenants together."""
        with self._registry:
            return sum(t.memory + t.allowed.row_bytes() for t in self._open.values())

    def ids(self) -> list[str]:
        """Every tenant with a database on disk, open or not."""
        if not self._root.is_dir():
            return []
        return sorted(storage.db.tenant_from_dir_name(d.name) for d in self._root.iterdir()
                      if not d.name.startswith(".") and (d / storage.db.DB_FILE).is_file())

    async def get(self, tenant_id: str, *, create: bool = False) -> Tenant:
        """The tenant, opened if need be (created when `create`, else NotFound if it has no
        database yet). Validates `tenant_id`; Unavailable once the store is closed."""
        validation.tenant_id(tenant_id)
        if tenant_id in self._restoring:
            raise Unavailable(f"tenant '{tenant_id}' is being restored from a backup ({self._restoring[tenant_id]}); "
                              "retry in a moment")
        tenant = self._open.get(tenant_id)
        if tenant is not None and not self.closed:
            tenant.last_used = time.monotonic()
            try:
                self._open.move_to_end(tenant_id)
            except KeyError:                    # evicted meanwhile: reopen
                pass
            else:
                return tenant
        tenant = await asyncio.to_thread(self._get_sync, tenant_id, create)
        if tenant.pending_repair:
            tenant.pending_repair = False
            if self.on_inconsistent is not None:
                self.on_inconsistent(tenant_id)
        return tenant

    def _get_sync(self, tenant_id: str, create: bool) -> Tenant:
        self.check_open()
        tenant = self._open.get(tenant_id)
        if tenant is not None:
            tenant.last_used = time.monotonic()
            return tenant
        tenant = self._open_sync(tenant_id, create)
        self.evict_over_budget(keep=tenant_id)
        return tenant

    def _open_sync(self, tenant_id: str, create: bool) -> Tenant:
        with self._registry:
            opening = self._opening.setdefault(tenant_id, threading.Lock())
        with opening:
            tenant = self._open.get(tenant_id)
            if tenant is None:
                directory = self._root / storage.db.tenant_dir_name(tenant_id)
                if not create and not (directory / storage.db.DB_FILE).is_file():
                    raise NotFound(f"tenant '{tenant_id}' has no knowledge store: nothing has been "
                                   "ingested for it")
                failed = self._failed.get(tenant_id)
                if failed is not None and time.monotonic() < failed[0]:
                    raise failed[1]
                try:
                    tenant = self._load(tenant_id, directory)
                except NucleusError as err:
                    if isinstance(err, FailedPrecondition) and "is corrupted" in str(err):
                        err = FailedPrecondition(str(err) + catalog.note(Path(self.settings.data_dir), tenant_id))
                    self._failed[tenant_id] = (time.monotonic() + OPEN_RETRY_S, err)
                    raise err from err.__cause__
                self._failed.pop(tenant_id, None)
                self.health.clear(tenant_id, "corrupt", "unavailable")
                tenant.last_used = time.monotonic()
                self.measure(tenant)
                with self._registry:
                    self._open[tenant_id] = tenant
                if tenant_id in self._verify_failed:     # found corrupt while it was opening
                    self._verify_failed.discard(tenant_id)
                    self.forget(tenant_id)
                if self._save_due(tenant):
                    self.save_soon(tenant)
            return tenant

    def _load(self, tenant_id: str, directory: Path) -> Tenant:
        dim = self.settings.dimension
        default = IndexConfig(kind=self.settings.default_index_kind, hnsw_ef_search=self.settings.hnsw_ef_search,
                              hnsw_m=self.settings.hnsw_m, hnsw_ef_construction=self.settings.hnsw_ef_construction)
        health = self.health
        db = storage.db.TenantDB(directory, tenant_id, dim, default.to_json(), data_dir=Path(self.settings.data_dir),
                                 read_only=self.settings.read_only,
                                 on_fault=lambda kind, message: self.report(tenant_id, kind, message),
                                 on_write=lambda: health.clear(tenant_id, "full"),
                                 corrupt=self.corrupt_sets(tenant_id))
        try:
            with db.guard("open"):
                conn = db.writer
                self._quick_check(db)
                stored_tenant = storage.db.get_meta(conn, "tenant_id")
                if stored_tenant != tenant_id:
                    raise NucleusError(f"{directory} holds tenant {stored_tenant!r}, not {tenant_id!r}")
                stored_dim = int(storage.db.get_meta(conn, "dimension") or dim)
                if stored_dim != dim:
                    raise NucleusError(f"tenant '{tenant_id}' stores {stored_dim}-dimensional vectors but the "
                                       f"service is configured for {dim}")
                conn.execute("BEGIN")           # one snapshot for the stamp and what it covers
                try:
                    entries = storage.checks.cheap_count(conn)
                    config = IndexConfig.from_json(storage.db.get_meta(conn, "index_config"))
                    if config.kind == "auto":       # the settings apply to every auto tenant
                        config = replace(config, hnsw_ef_search=self.settings.hnsw_ef_search,
                                         hnsw_m=self.settings.hnsw_m,
                                         hnsw_ef_construction=self.settings.hnsw_ef_construction)
                    index, keywords, how, unsaved = self._derive(tenant_id, directory, conn, config)
                    lost = storage.db.get_meta(conn, "lost_commits")
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
                if lost:
                    self.report(tenant_id, storage.faults.LOST_COMMITS, lost)
                if db.corrupt_rids or db.corrupt_artifacts:
                    self.report(tenant_id, storage.faults.CORRUPT_ROWS, db.corrupt_rows_message())
        except BaseException:
            db.close()
            raise
        self.counters[f"opened_{how}"] += 1
        log.info("opened tenant %s%s: %d entries, %d vectors, %s index, %d keyword entries (indexes %s)", tenant_id,
                 " (read-only)" if db.read_only_reason else "", entries, index.ntotal, index.kind, keywords.ntotal,
                 how)
        tenant = Tenant(tenant_id=tenant_id, db=db, index=index, keywords=keywords, unsaved=unsaved)
        if not entries == index.ntotal == keywords.ntotal:
            health.report(tenant_id, "inconsistent",
                          f"{entries} entries but {index.ntotal} vectors and {keywords.ntotal} keyword rows in "
                          f"{db.path}; " + ("repairing in the background" if not db.read_only_reason
                                            else "read-only, so not repaired"))
            tenant.pending_repair = not db.read_only_reason
        return tenant

    def _derive(self, tenant_id: str, directory: Path, conn,
                config: IndexConfig) -> tuple[VectorIndex, KeywordIndex, str, int]:
        """Both indexes, loaded from the saved files when they fit what SQLite committed, caught
        up by replay when they are older, else rebuilt: (index, keywords, how, unsaved rows)."""
        stamp = storage.index_log.stamp(conn) if self.settings.persist_indexes else None
        if stamp is not None and persistence.exists(directory):
            try:
                loaded = persistence.load(directory, stamp=stamp, dimension=self.settings.dimension, config=config,
                                          weights=self.bm25_weights, auto_threshold=self.settings.hnsw_threshold)
            except persistence.LostCommits as err:
                self._lost_commits(tenant_id, directory, conn, err)
            except persistence.Unusable as err:
                log.warning("tenant %s: saved indexes not used, rebuilding from SQLite: %s", tenant_id, err)
            else:
                if loaded.unverified:
                    self._verify_later(tenant_id, directory, loaded.unverified)
                if loaded.seq == stamp.seq:
                    return loaded.index, loaded.keywords, "loaded", 0
                rids = storage.index_log.changed_since(conn, loaded.seq, REPLAY_MAX_ROWS)
                if rids is None:
                    log.warning("tenant %s: saved indexes (log seq %d) are older than the change log still "
                                "holds (seq %d), rebuilding from SQLite", tenant_id, loaded.seq, stamp.seq)
                else:
                    try:
                        self._replay(conn, loaded.index, loaded.keywords, rids)
                    except (ValueError, RuntimeError) as err:
                        log.warning("tenant %s: replay of %d changed entries failed (%s), rebuilding from SQLite",
                                    tenant_id, len(rids), err)
                    else:
                        return loaded.index, loaded.keywords, "replayed", max(len(rids), 1)
        index, keywords = self.build_index(conn, config), self.build_keywords(conn)
        return index, keywords, "rebuilt", max(index.ntotal, keywords.ntotal)

    def _quick_check(self, db: storage.db.TenantDB) -> None:
        """SQLite's quick_check on open, for databases up to `quick_check_max_mb`: a damaged page
        makes the open fail as "corrupt" (a typed error naming the file) instead of serving."""
        limit = self.settings.quick_check_max_mb * 2**20
        try:
            size = db.path.stat().st_size
        except OSError:
            return
        if not limit or size > limit:
            return
        found = [r[0] for r in db.writer.execute("PRAGMA quick_check(20)")]
        if found != ["ok"]:
            raise sqlite3.DatabaseError(f"database disk image is malformed: quick_check: {'; '.join(found[:5])}")

    def _lost_commits(self, tenant_id: str, directory: Path, conn, err: persistence.LostCommits) -> None:
        """Saved indexes newer than SQLite: commits were lost (a damaged write-ahead log). Said
        so, kept in the database's meta until `nucleus check` acknowledges it, and the files
        are discarded (their row ids would be reused); the caller rebuilds from SQLite."""
        entries = storage.checks.cheap_count(conn)
        lost = err.saved_seq - err.database_seq
        message = (f"tenant '{tenant_id}' lost commits: its saved indexes reflect change-log seq {err.saved_seq} but "
                   f"{directory / storage.db.DB_FILE} holds only up to seq {err.database_seq} ({lost} row changes "
                   f"lost; the saved indexes held {err.saved_vectors} vectors, SQLite now {entries} entries) — its "
                   "write-ahead log was damaged or lost; documents acknowledged after the last intact commit must be "
                   "ingested again or restored; `nucleus check --tenant "
                   f"{tenant_id}` acknowledges this")
        log.error("%s", message)
        self.counters["lost_commits"] += 1
        persistence.discard(directory)
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            storage.db.set_meta(conn, "lost_commits", message)
        except sqlite3.Error as write_err:       # read-only: reported for this process's life only
            log.warning("tenant %s: could not record the lost commits in its database: %s", tenant_id, write_err)

    def acknowledge_lost_commits(self, tenant: Tenant) -> None:
        """The operator has seen the lost commits (`nucleus check`): stop reporting them."""
        if tenant.db.read_only_reason:
            return
        with tenant.write_lock, tenant.db.write("acknowledging lost commits") as conn:
            conn.execute("DELETE FROM meta WHERE key = 'lost_commits'")
            conn.execute("COMMIT")
        self.health.clear(tenant.tenant_id, storage.faults.LOST_COMMITS)

    @contextlib.contextmanager
    def unavailable_for(self, tenant_id: str, why: str) -> Iterator[None]:
        """Close the tenant (after the write in progress) and answer Unavailable for it while the
        block runs (a restore swaps its files); other tenants serve on. Afterwards its next
        request opens it afresh."""
        self._restoring[tenant_id] = why
        try:
            with self._registry:
                tenant = self._open.get(tenant_id)
            if tenant is not None:
                with tenant.write_lock:
                    with tenant.rw.write():
                        tenant.evicted = True
                        tenant.unsaved = 0
                        with self._registry:
                            self._open.pop(tenant_id, None)
                        tenant.db.close()
            yield
        finally:
            self._failed.pop(tenant_id, None)
            with self._registry:
                self.corrupt.pop(tenant_id, None)
            self.health.clear(tenant_id)
            self._restoring.pop(tenant_id, None)

    def _verify_later(self, tenant_id: str, directory: Path, unverified) -> None:
        """Check the checksums of memory-mapped files on a background thread; on a mismatch the
        saved files are discarded and the open tenant dropped, so the next access rebuilds it."""
        def run() -> None:
            problem = persistence.verify(unverified)
            if not problem:
                return
            log.warning("tenant %s: saved indexes fail verification, rebuilding from SQLite on the next "
                        "access: %s", tenant_id, problem)
            persistence.discard(directory)
            self.counters["verify_failed"] += 1
            with self._registry:
                if tenant_id not in self._open:     # still opening: dropped once registered
                    self._verify_failed.add(tenant_id)
            self.forget(tenant_id)

        threading.Thread(target=run, name=f"verify-{tenant_id}", daemon=True).start()

    def _replay(self, conn, index: VectorIndex, keywords: KeywordIndex, rids: list[int]) -> None:
        """Bring loaded indexes up to what SQLite holds now: every rid changed since their stamp
        is dropped, and the ones that exist now are added back (rids ascend, never reused)."""
        changed = np.asarray(rids, np.int64)
        keywords.remove(changed)
        index.remove(changed, only_present=True)
        ids, vectors = storage.index_log.vectors_of(conn, rids, self.settings.dimension)
        index.add(ids, vectors)
        rows = storage.index_log.keyword_rows_of(conn, rids)
        if rows:
            keywords.add([r[0] for r in rows], KeywordBatch.from_docs([(r[1], r[2]) for r in rows],
                                                                       self.bm25_weights))

    def build_index(self, conn, config: IndexConfig) -> VectorIndex:
        """A fresh vector index of every vector SQLite holds (`conn` sees committed data)."""
        ids, vectors = storage.entries.load_vectors(conn, self.settings.dimension)
        return VectorIndex(self.settings.dimension, config, ids, vectors,
                           auto_threshold=self.settings.hnsw_threshold)

    def build_keywords(self, conn) -> KeywordIndex:
        """A fresh keyword index of every FTS5 row SQLite holds."""
        return KeywordIndex.build(storage.entries.keyword_rows(conn), self.bm25_weights)

    def forget(self, tenant_id: str) -> None:
        """Drop an open tenant whose indexes are broken: the next access reopens it."""
        with self._registry:
            tenant = self._open.pop(tenant_id, None)
        if tenant is not None:
            tenant.unsaved = 0                  # never save broken indexes
            tenant.evicted = True

    # -- memory, saving and eviction ---------------------------------------------------------

    def measure(self, tenant: Tenant) -> None:
        """Refresh the tenant's memory estimate (after an open or a write): FAISS, BM25, SQLite's
        page caches (half the database file, at most SQLITE_CACHE_BYTES) and a fixed overhead —
        calibrated on the scale benchmark's 1,000-chunk tenants (benchmarks/scale.py)."""
        try:
            db_bytes = tenant.db.path.stat().st_size
        except OSError:
            db_bytes = 0
        tenant.memory = (tenant.index.memory_bytes() + tenant.keywords.memory_bytes()
                         + min(db_bytes // 2, SQLITE_CACHE_BYTES) + TENANT_OVERHEAD_BYTES)

    def save(self, tenant: Tenant, *, locked: bool = False) -> bool:
        """Save the tenant's indexes if they changed since the last save (persistence.py).
        Takes the tenant's write lock (writes wait, searches go on) unless `locked`.
        Returns whether a save was written; a failure is logged, never raised."""
        if not self.settings.persist_indexes or tenant.db.read_only_reason:
            return False
        if not locked:
            with tenant.write_lock:
                return self.save(tenant, locked=True)
        if not tenant.unsaved:
            return False
        started = time.perf_counter()
        try:
            with tenant.db.guard("index save"):
                with tenant.rw.read():
                    stamp = storage.index_log.stamp(tenant.db.writer)
                    if stamp is None:
                        return False
                    size = persistence.save(tenant.db.directory, stamp=stamp, index=tenant.index,
                                            keywords=tenant.keywords, weights=self.bm25_weights)
                tenant.unsaved = 0
                with tenant.db.write("index log trim") as conn:
                    storage.index_log.trim(conn, stamp.seq)
                    conn.execute("COMMIT")
        except Exception as err:  # noqa: BLE001 - the next open rebuilds; the service goes on
            log.warning("tenant %s: saving its indexes failed (they will be rebuilt on the next open): %s",
                        tenant.tenant_id, err)
            return False
        self.counters["saved"] += 1
        log.info("saved indexes of tenant %s (log seq %d, %d vectors, %.1f MB) in %.2fs", tenant.tenant_id,
                 stamp.seq, tenant.index.ntotal, size / 1e6, time.perf_counter() - started)
        return True

    def save_soon(self, tenant: Tenant) -> None:
        """Save the tenant's indexes on a background thread (one at a time per tenant)."""
        if tenant.saving or not self.settings.persist_indexes or tenant.db.read_only_reason:
            return
        tenant.saving = True

        def run() -> None:
            try:
                if not self.closed and not tenant.evicted:
                    self.save(tenant)
            finally:
                tenant.saving = False

        threading.Thread(target=run, name=f"save-{tenant.tenant_id}", daemon=True).start()

    def note_write(self, tenant: Tenant, rows: int) -> None:
        """After a committed write of `rows` entries: update the estimate, save when due, and
        evict others if the tenant grew past the budget (the writer holds the write lock)."""
        if rows:
            tenant.unsaved = -1 if tenant.unsaved < 0 else tenant.unsaved + rows
        self.measure(tenant)
        if self._save_due(tenant):
            self.save_soon(tenant)

    def _save_due(self, tenant: Tenant) -> bool:
        """Unsaved changes worth a save: `persist_after_rows`, or SAVE_FRACTION of a big tenant
        (a save rewrites the whole index, so a large ingest saves every few percent of it)."""
        due = max(self.settings.persist_after_rows, int(SAVE_FRACTION * tenant.index.ntotal))
        return tenant.unsaved < 0 or tenant.unsaved >= due

    def evict_over_budget(self, keep: str = "") -> int:
        """Evict least recently used tenants until the estimate fits `memory_budget_mb`
        (module docstring). Returns how many were evicted."""
        budget = self.settings.memory_budget_mb * 1024 * 1024
        if budget <= 0:
            return 0
        total = self.memory_bytes()
        evicted = 0
        idle_before = time.monotonic() - EVICT_IDLE_S
        with self._registry:
            candidates = list(self._open.items())
        for tenant_id, tenant in candidates:
            if total <= budget:
                break
            if tenant_id == keep or tenant.last_used > idle_before:
                continue
            if self.evict(tenant):
                total -= tenant.memory
                evicted += 1
        candidates.clear()                  # the evicted tenants' last references here
        tenant = None
        if evicted:
            _release_freed_memory()
        if total > budget:
            log.warning("open tenants take an estimated %.0f MB, over the %d MB budget: the others are in use",
                        total / 2**20, self.settings.memory_budget_mb)
        return evicted

    def evict(self, tenant: Tenant) -> bool:
        """Save and close one open tenant unless a request holds or waits for it."""
        if not tenant.write_lock.acquire(blocking=False):
            return False
        try:
            if tenant.rw.busy or self._open.get(tenant.tenant_id) is not tenant:
                return False
            self.save(tenant, locked=True)
            with tenant.rw.write():
                tenant.evicted = True
                with self._registry:
                    self._open.pop(tenant.tenant_id, None)
        finally:
            tenant.write_lock.release()
        self.counters["evicted"] += 1
        log.info("evicted tenant %s (%.1f MB estimated)", tenant.tenant_id, tenant.memory / 2**20)
        return True

    def check_open(self) -> None:
        if self.closed:
            raise Unavailable("the knowledge store is closed")

    def close(self) -> None:
        """Close every tenant's files (after any write in progress). Later calls raise Unavailable."""
        self.closed = True
        for tenant in list(self._open.values()):
            with tenant.write_lock:
                self.save(tenant, locked=True)
                with tenant.rw.write():
                    tenant.db.close()
        self._open.clear()
