"""The write path: one SQLite transaction per request, mirrored in the tenant's in-memory indexes.

    work(conn) inside BEGIN IMMEDIATE ─▶ (result, IndexChange)
      ─▶ under rw.write(): COMMIT, clear the allowed-rows cache, apply the change to the
         keyword index and FAISS
      ─▶ outside the exclusive lock: rebuild FAISS / compact the keyword index if they ask
         for it, then swap the fresh one in under rw.write()

Consistency: writes commit SQLite first, then apply the change to FAISS and to the
in-memory keyword index; all of it happens while the tenant's readers/writer lock is held
exclusively, and a search holds it shared for its SQLite snapshot plus its in-memory search,
so a search never sees an id the indexes and SQLite disagree about (the cache of allowed row
ids is cleared under the same exclusive lock at every commit). If an index cannot apply a
committed change it is rebuilt from SQLite; if even that fails the tenant is dropped, so the
next access reopens and rebuilds it (tenants.py). A repair (consistency.py) writes rows the
indexes do not track one by one, so it asks for both to be rebuilt from SQLite (`rebuild`).

Faults: the transaction is the tenant's `db.write()`, so a full disk, a read-only tenant or a
corrupted database leaves as a typed error naming the path, with nothing applied
(storage/faults.py).

Persistence and eviction (tenants.py): a write counts its changed entries towards the next
save of the indexes (`Tenants.note_write`); a repair (`rebuild`) also logs a rebuild marker in
the same transaction, so saved indexes older than it are never replayed past it. A write
whose tenant was evicted while it queued starts again on the reopened tenant.

Queueing: writers of one tenant queue on an asyncio lock (no thread is parked while
waiting), then the work runs on a worker thread under the tenant's thread lock (correctness
even across event loops).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.keyword_index import KeywordBatch
from services.knowledge_store.embedded.tenants import Tenant, Tenants
from shared.errors import Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IndexChange:
    """What a committed write changed, for the in-memory indexes: row ids removed and added."""
    removed: list[int]
    added: list[int]
    vectors: NDArray[np.float32]
    keywords: KeywordBatch | None = None        # analysed terms of `added`, same order


NO_CHANGE = IndexChange([], [], np.zeros((0, 0), np.float32))

# The writer's SQL, given the writer connection inside the open transaction (it must not commit).
Work = Callable[[object], tuple[T, IndexChange]]


async def write(tenants: Tenants, tenant_id: str, work: Work[T], *, create: bool, action: str = "write",
                rebuild: bool = False, quiet: bool = False) -> T:
    """Run `work` as the tenant's next write and mirror its change (module docstring); with
    `rebuild`, both indexes are rebuilt from SQLite after the commit instead. `quiet`: rows no
    search reads (the search log, source votes): committed without the exclusive lock, no
    cache cleared, nothing mirrored."""
    while True:
        tenant = await tenants.get(tenant_id, create=create)
        async with tenant.writer_queue():
            try:
                return await asyncio.to_thread(_write_sync, tenants, tenant, work, action, rebuild, quiet)
            except Evicted:
                continue


class Evicted(Exception):
    """The tenant was evicted while this write queued: run it on the reopened one."""


def _write_sync(tenants: Tenants, tenant: Tenant, work: Work[T], action: str, rebuild: bool,
                quiet: bool = False) -> T:
    with tenant.write_lock:
        tenants.check_open()
        if tenant.evicted:
            raise Evicted
        with tenant.db.write(action) as conn:
            result, change = work(conn)
            if quiet:
                conn.execute("COMMIT")
                return result
            if rebuild:
                storage.index_log.mark_rebuild(conn)
            with tenant.rw.write():
                conn.execute("COMMIT")
                tenant.allowed.clear()
                if not rebuild:
                    _apply(tenants, tenant, change)
        if rebuild:
            _rebuild(tenants, tenant, keywords=True)
        elif tenant.index.needs_rebuild:
            _rebuild(tenants, tenant)
        if tenant.keywords.needs_compaction:
            fresh = tenant.keywords.compacted()       # searches keep using the old one meanwhile
            with tenant.rw.write():
                tenant.keywords = fresh
                tenant.allowed.clear()
        tenants.note_write(tenant, len(change.removed) + len(change.added))
        return result


def _apply(tenants: Tenants, tenant: Tenant, change: IndexChange) -> None:
    """Mirror a committed change in FAISS and the keyword index (caller holds the
    exclusive lock)."""
    if not change.removed and not change.added:
        return
    try:
        tenant.keywords.remove(np.asarray(change.removed, np.int64))
        if change.added:
            if change.keywords is None:
                raise ValueError("added entries without their analysed terms")
            tenant.keywords.add(change.added, change.keywords)
    except Exception:
        log.exception("keyword index update failed for tenant %s; rebuilding from SQLite", tenant.tenant_id)
        try:
            tenant.keywords = tenants.build_keywords(tenant.db.writer)
        except Exception as err:
            tenants.forget(tenant.tenant_id)     # next access reopens and rebuilds
            raise Unavailable(f"keyword index of tenant '{tenant.tenant_id}' could not be rebuilt: "
                              f"{err}") from err
    try:
        tenant.index.remove(np.asarray(change.removed, np.int64))
        tenant.index.add(np.asarray(change.added, np.int64), change.vectors)
    except Exception:
        log.exception("FAISS update failed for tenant %s; rebuilding from SQLite", tenant.tenant_id)
        try:
            tenant.index = tenants.build_index(tenant.db.writer, tenant.index.config)
        except Exception as err:
            tenants.forget(tenant.tenant_id)     # next access reopens and rebuilds
            raise Unavailable(f"vector index of tenant '{tenant.tenant_id}' could not be rebuilt: "
                              f"{err}") from err


def _rebuild(tenants: Tenants, tenant: Tenant, *, keywords: bool = False) -> None:
    """Build a fresh index (and keyword index) from SQLite while searches keep using the old
    one (the caller holds the tenant's write lock, so no write can slip in between)."""
    started = time.perf_counter()
    with tenant.db.guard("index rebuild"):
        fresh = tenants.build_index(tenant.db.writer, tenant.index.config)
        fresh_keywords = tenants.build_keywords(tenant.db.writer) if keywords else tenant.keywords
    with tenant.rw.write():
        tenant.index = fresh
        tenant.keywords = fresh_keywords
        tenant.allowed.clear()
    tenant.unsaved = -1
    log.info("rebuilt %s index of tenant %s (%d vectors) in %.2fs", fresh.kind, tenant.tenant_id,
             fresh.ntotal, time.perf_counter() - started)
