"""The consistency of each tenant: the full check on demand, and the repair of derived rows.

Every entry (SQLite `entries`) has derived rows: one vector (`entry_vectors`, the source of
FAISS) and one keyword row (`entries_fts`, the source of the BM25 index). They are written in
the entry's transaction, so they only disagree when something went wrong outside the store
(a file edited or restored behind its back, a disk fault).

    on open      tenants.py compares counts (entries vs vectors vs keyword rows, nothing
                 joined) and, on a mismatch, calls `Consistency._schedule_repair`: the repair below
                 runs as a background task, retried with back-off while re-embedding waits
    check        the full scan (storage/checks.py): entries missing a vector or a keyword row,
                 malformed vectors, orphaned vectors and keyword rows, entries whose artifact
                 is gone, SQLite's quick_check, and whether the in-memory indexes hold as many
                 rows as SQLite (`nucleus check --tenant T`, gRPC CheckTenant)
    repair       keyword rows re-analysed from the stored text; vectors re-embedded from the
                 stored text through the store's embedder (LlmOrchestration): when it cannot be
                 reached they wait (`deferred`) and the background task tries again later;
                 orphans deleted; then both in-memory indexes rebuilt from SQLite. One log line
                 per repair and the `nucleus.knowledge_store.repaired_rows` counter (../health.py)

The check reads one snapshot while holding the tenant's lock shared (writes wait for it);
the repair is an ordinary write of the tenant (writes.py), so it queues behind ingests and
skips rows whose entry was deleted in the meantime.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

import numpy as np

from services.knowledge_store import validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.tenants import Tenant, Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, IndexChange, write
from services.knowledge_store.models import TenantCheck
from services.knowledge_store.preparation import derived_rows
from shared.errors import NucleusError

log = logging.getLogger(__name__)

BACKGROUND_RETRY_S = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _report(tenant_id: str, found: storage.checks.Found, indexed: tuple[int, int]) -> TenantCheck:
    return TenantCheck(
        tenant_id=tenant_id, entries=found.entries, vectors=found.vectors, keyword_rows=found.keyword_rows,
        vectors_indexed=indexed[0], keyword_rows_indexed=indexed[1],
        missing_vectors=len(found.missing_vectors), malformed_vectors=len(found.malformed_vectors),
        missing_keyword_rows=len(found.missing_keyword_rows), orphan_vectors=len(found.orphan_vectors),
        orphan_keyword_rows=len(found.orphan_keyword_rows), entries_without_artifact=found.entries_without_artifact,
        integrity_errors=tuple(found.integrity_errors),
        corrupt_rows=len(found.corrupt_rows) + len(found.corrupt_artifacts), unverified_rows=found.unverified_rows)


class Consistency:
    """The check and repair of the tenants of one store (see the module docstring); a mixin of
    core.KnowledgeStore: `self._tenants` is the store's, `self.embed` its checked embedding
    (ingest.py), `self._repairs` its background repairs running."""

    _tenants: Tenants
    _repairs: set[asyncio.Task]
    embed: Callable[[list[str]], Awaitable[np.ndarray]]

    async def check_tenant(self, tenant_id: str, *, repair: bool = True) -> TenantCheck:
        """The full consistency check of a tenant; with `repair`, missing vectors and keyword
        rows are rebuilt from the stored text and orphans removed, and the answer is a second
        check's, with what was repaired."""
        validation.tenant_id(tenant_id)
        tenant = await self._tenants.get(tenant_id)
        found, report = await self._scan_tenant(tenant)
        health = self._tenants.health
        if found.corrupt_rows or found.corrupt_artifacts:
            tenant.db.rows_failed(found.corrupt_rows, found.corrupt_artifacts)
        if repair:
            await asyncio.to_thread(self._tenants.acknowledge_lost_commits, tenant)
        if report.consistent:
            health.clear(tenant_id, "inconsistent")
            return report
        if not repair or tenant.db.read_only_reason:
            why = "" if not repair else f"not repaired: {tenant.db.read_only_reason}"
            health.report(tenant_id, "inconsistent", report.summary() + (f"; {why}" if why else ""))
            return replace(report, deferred=why)
        repaired, deferred = await self._repair_tenant(tenant, found)
        _, after = await self._scan_tenant(tenant)
        after = replace(after, repaired_vectors=repaired["vectors"], repaired_keyword_rows=repaired["keyword_rows"],
                        removed_orphans=repaired["orphans"], deferred=deferred)
        for kind, rows in repaired.items():
            health.count_repair(kind, rows)
        log.warning("tenant %s repaired: %d vectors re-embedded, %d keyword rows rebuilt, %d orphan rows removed; "
                    "now %s%s", tenant_id, repaired["vectors"], repaired["keyword_rows"], repaired["orphans"],
                    "consistent" if after.consistent else "still inconsistent: " + after.summary(),
                    f"; {deferred}" if deferred else "")
        if after.consistent:
            health.clear(tenant_id, "inconsistent")
        else:
            health.report(tenant_id, "inconsistent", after.summary() + (f"; {deferred}" if deferred else ""))
        return after

    async def _scan_tenant(self, tenant: Tenant) -> tuple[storage.checks.Found, TenantCheck]:
        dimension = self._tenants.settings.dimension

        def scan() -> tuple[storage.checks.Found, TenantCheck]:
            with tenant.rw.read(), tenant.db.read("consistency check") as conn:
                found = storage.checks.find_problems(conn, dimension)
                indexed = (tenant.index.ntotal, tenant.keywords.ntotal)
            return found, _report(tenant.tenant_id, found, indexed)

        return await asyncio.to_thread(scan)

    async def _repair_tenant(self, tenant: Tenant, found: storage.checks.Found) -> tuple[dict[str, int], str]:
        """Rebuild the derived rows `found` misses, delete its orphans, rebuild the indexes.
        Returns (rows repaired by kind, why some wait)."""
        need_vectors = sorted(set(found.missing_vectors) | set(found.malformed_vectors))
        wanted = sorted(set(need_vectors) | set(found.missing_keyword_rows))

        def read() -> dict[int, tuple[str, str, str]]:
            with tenant.db.read("repair") as conn:
                stored = storage.checks.stored_entries(conn, wanted)
            return {e.rid: derived_rows(e.title, e.headline, e.text) for e in stored}

        derived = await asyncio.to_thread(read) if wanted else {}
        vector_rids = [rid for rid in need_vectors if rid in derived]
        vectors: np.ndarray | None = None
        deferred = ""
        if vector_rids:
            try:
                vectors = await self.embed([derived[rid][2] for rid in vector_rids])
            except NucleusError as err:
                deferred = f"{len(vector_rids)} vectors wait for re-embedding: {err}"
        keyword_rows = [(rid, derived[rid][0], derived[rid][1]) for rid in found.missing_keyword_rows
                        if rid in derived]

        def work(conn) -> tuple[dict[str, int], IndexChange]:
            done = {"keyword_rows": storage.checks.put_keyword_rows(conn, keyword_rows), "vectors": 0}
            if vectors is not None:
                done["vectors"] = storage.checks.put_vectors(conn, vector_rids, vectors,
                                                             replace=found.malformed_vectors)
            done["orphans"] = storage.checks.delete_orphans(conn)
            return done, NO_CHANGE

        done = await write(self._tenants, tenant.tenant_id, work, create=False, action="repair", rebuild=True)
        if done["vectors"] and tenant.db.corrupt_rids & set(vector_rids):   # re-embedded: whole again
            tenant.db.corrupt_rids.difference_update(vector_rids)
            if not tenant.db.corrupt_rids and not tenant.db.corrupt_artifacts:
                self._tenants.health.clear(tenant.tenant_id, "corrupt_rows")
        return done, deferred

    # -- background repair -----------------------------------------------------------------

    def _schedule_repair(self, tenant_id: str) -> None:
        """Repair `tenant_id` in the background (called on the event loop, see tenants.py)."""
        task = asyncio.get_running_loop().create_task(self._background_repair(tenant_id))
        self._repairs.add(task)
        task.add_done_callback(self._repairs.discard)

    async def _background_repair(self, tenant_id: str) -> None:
        for delay in (0.0, *BACKGROUND_RETRY_S):
            if delay:
                await asyncio.sleep(delay)
            if self._tenants.closed:
                return
            try:
                report = await self.check_tenant(tenant_id, repair=True)
            except NucleusError as err:
                log.warning("background repair of tenant %s failed: %s", tenant_id, err)
                continue
            except Exception:  # noqa: BLE001 - a background task must log, not vanish
                log.exception("background repair of tenant %s failed", tenant_id)
                return
            if not report.deferred:
                return
            log.warning("tenant %s: %s; trying again later", tenant_id, report.deferred)

    async def settle_repairs(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded: at most `timeout_s`) for the background repairs running now."""
        if self._repairs:
            await asyncio.wait(list(self._repairs), timeout=timeout_s)

    def _cancel_repairs(self) -> None:
        for task in list(self._repairs):
            task.cancel()
