"""Open tenants: each tenant's in-memory state, and how it is opened, rebuilt and closed.

    Tenant   db        TenantDB (SQLite, the system of record: storage/)
             index     VectorIndex (FAISS), rebuilt from SQLite's vectors on open
             keywords  KeywordIndex (in-memory BM25), rebuilt from SQLite's FTS5 rows on open
             rw        readers/writer lock around the two indexes (locking.py)
             allowed   row ids each filter allows, cleared under `rw.write()` (allowed_cache.py)
             write_lock, writer_queue()   where writers of the tenant queue (writes.py)

Isolation is structural: a tenant's data lives only in `<data_dir>/tenants/<tenant>/` and in
its own FAISS object; every call resolves exactly one tenant first (`Tenants.get`).

A tenant is opened on first use (by one thread; others wanting it wait on its opening lock)
and stays open until the store closes. Opening checks that the directory holds this tenant
at the configured dimension, then builds both indexes from what SQLite committed, so after a
crash records = keyword rows = vectors again. `forget` drops a tenant whose in-memory state
could not be repaired: the next access reopens (and so rebuilds) it.

Faults: a tenant that cannot be opened (corrupted, unreadable) raises a typed error naming its
path (storage/faults.py) and is reported to `health` (health.py); other tenants are not
touched, and the failed open is retried after OPEN_RETRY_S. A tenant whose files refuse
writes is opened read-only. Consistency: once the indexes are built, the count of entries is
compared with the vectors and keyword rows they were built from (no join, no extra scan); a
mismatch is reported as "inconsistent" and `on_inconsistent` is called to repair the tenant in
the background (consistency.py).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.knowledge_store import storage, validation
from services.knowledge_store.allowed_cache import AllowedCache
from services.knowledge_store.health import StoreHealth
from services.knowledge_store.keyword_index import KeywordIndex
from services.knowledge_store.locking import RWLock
from services.knowledge_store.vector_index import IndexConfig, VectorIndex
from shared.errors import NotFound, NucleusError, Unavailable
from shared.settings import KnowledgeStoreSettings

log = logging.getLogger(__name__)

OPEN_RETRY_S = 5.0          # a tenant that failed to open is not tried again sooner


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
    _queues: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def writer_queue(self) -> asyncio.Lock:
        """The asyncio lock writers of this tenant queue on, one per event loop."""
        loop = asyncio.get_running_loop()
        lock = self._queues.get(loop)
        if lock is None:
            lock = self._queues[loop] = asyncio.Lock()
        return lock


class Tenants:
    """The open tenants of one store, by tenant id (see the module docstring)."""

    def __init__(self, settings: KnowledgeStoreSettings, bm25_weights: tuple[float, float]) -> None:
        self.settings = settings
        self.bm25_weights = bm25_weights
        self.closed = False
        self._root = Path(settings.data_dir) / "tenants"
        self._open: dict[str, Tenant] = {}
        self._opening: dict[str, threading.Lock] = {}
        self._registry = threading.Lock()
        self._failed: dict[str, tuple[float, NucleusError]] = {}     # tenant -> (retry at, error)
        self.health = StoreHealth(settings.data_dir, read_only=settings.read_only)
        self.on_inconsistent: Callable[[str], None] | None = None

    def open_count(self) -> int:
        return len(self._open)

    def ids(self) -> list[str]:
        """Every tenant with a database on disk, open or not."""
        if not self._root.is_dir():
            return []
        return sorted(storage.db.tenant_from_dir_name(d.name) for d in self._root.iterdir()
                      if (d / storage.db.DB_FILE).is_file())

    async def get(self, tenant_id: str, *, create: bool = False) -> Tenant:
        """The tenant, opened if need be (created when `create`, else NotFound if it has no
        database yet). Validates `tenant_id`; Unavailable once the store is closed."""
        validation.tenant_id(tenant_id)
        tenant = self._open.get(tenant_id)
        if tenant is not None and not self.closed:
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
            return tenant
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
                    self._failed[tenant_id] = (time.monotonic() + OPEN_RETRY_S, err)
                    raise
                self._failed.pop(tenant_id, None)
                self.health.clear(tenant_id, "corrupt", "unavailable")
                self._open[tenant_id] = tenant
            return tenant

    def _load(self, tenant_id: str, directory: Path) -> Tenant:
        dim = self.settings.dimension
        default = IndexConfig(kind=self.settings.default_index_kind)
        health = self.health
        db = storage.db.TenantDB(directory, tenant_id, dim, default.to_json(), data_dir=Path(self.settings.data_dir),
                                 read_only=self.settings.read_only,
                                 on_fault=lambda kind, message: health.report(tenant_id, kind, message),
                                 on_write=lambda: health.clear(tenant_id, "full"))
        try:
            with db.guard("open"):
                conn = db.writer
                stored_tenant = storage.db.get_meta(conn, "tenant_id")
                if stored_tenant != tenant_id:
                    raise NucleusError(f"{directory} holds tenant {stored_tenant!r}, not {tenant_id!r}")
                stored_dim = int(storage.db.get_meta(conn, "dimension") or dim)
                if stored_dim != dim:
                    raise NucleusError(f"tenant '{tenant_id}' stores {stored_dim}-dimensional vectors but the "
                                       f"service is configured for {dim}")
                entries = storage.checks.cheap_count(conn)
                index = self.build_index(conn, IndexConfig.from_json(storage.db.get_meta(conn, "index_config")))
                keywords = self.build_keywords(conn)
        except BaseException:
            db.close()
            raise
        log.info("opened tenant %s%s: %d entries, %d vectors, %s index, %d keyword entries", tenant_id,
                 " (read-only)" if db.read_only_reason else "", entries, index.ntotal, index.kind, keywords.ntotal)
        tenant = Tenant(tenant_id=tenant_id, db=db, index=index, keywords=keywords)
        if not entries == index.ntotal == keywords.ntotal:
            health.report(tenant_id, "inconsistent",
                          f"{entries} entries but {index.ntotal} vectors and {keywords.ntotal} keyword rows in "
                          f"{db.path}; " + ("repairing in the background" if not db.read_only_reason
                                            else "read-only, so not repaired"))
            tenant.pending_repair = not db.read_only_reason
        return tenant

    def build_index(self, conn, config: IndexConfig) -> VectorIndex:
        """A fresh vector index of every vector SQLite holds (`conn` sees committed data)."""
        ids, vectors = storage.entries.load_vectors(conn, self.settings.dimension)
        return VectorIndex(self.settings.dimension, config, ids, vectors)

    def build_keywords(self, conn) -> KeywordIndex:
        """A fresh keyword index of every FTS5 row SQLite holds."""
        return KeywordIndex.build(storage.entries.keyword_rows(conn), self.bm25_weights)

    def forget(self, tenant_id: str) -> None:
        """Drop an open tenant whose indexes are broken: the next access reopens it."""
        self._open.pop(tenant_id, None)

    def check_open(self) -> None:
        if self.closed:
            raise Unavailable("the knowledge store is closed")

    def close(self) -> None:
        """Close every tenant's files (after any write in progress). Later calls raise Unavailable."""
        self.closed = True
        for tenant in list(self._open.values()):
            with tenant.write_lock, tenant.rw.write():
                tenant.db.close()
        self._open.clear()
