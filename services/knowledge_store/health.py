"""The KnowledgeStore's condition, for operators: which tenant has which problem, what was repaired.

    StoreHealth    problems by (tenant, kind), counters of repaired rows, and listeners told
                   when the store turns degraded or healthy again (the gRPC health entry
                   `nucleus.v1.KnowledgeStore.storage`, see main.py)
    StoreStatus    a snapshot of it (models.py; GetStoreStatus, `nucleus status`)

Problem kinds and what clears them:

    corrupt        the tenant's database is damaged         a successful open of the tenant
    unavailable    the tenant's database cannot be opened   a successful open of the tenant
    read_only      the tenant is served read-only           never while the process runs
    full           a write found no space left              the tenant's next successful write
    inconsistent   entries, vectors and keyword rows of     a repair that leaves the tenant
                   the tenant disagree                      consistent (embedded/consistency.py)
    corrupt_rows   rows failing their checksums             the scrub finding none, or a restore
    lost_commits   saved indexes newer than SQLite          `nucleus check --tenant T`

Any problem makes the store "degraded": it keeps serving every tenant it can, and says which
it cannot serve fully, and why.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from opentelemetry import metrics

from services.knowledge_store.disk import free_space
from services.knowledge_store.models import Problem, StoreStatus

log = logging.getLogger(__name__)
meter = metrics.get_meter("nucleus.knowledge_store")
_repaired_counter = meter.create_counter(
    "nucleus.knowledge_store.repaired_rows", unit="{row}",
    description="Derived rows (vectors, keyword rows) rebuilt or orphans removed by the consistency repair")
_fault_counter = meter.create_counter(
    "nucleus.knowledge_store.storage_faults", unit="{fault}",
    description="Storage faults met by requests, by kind (full, read_only, corrupt, inconsistent, unavailable)")

#: Every kind a problem can have (embedded/storage/faults.py reports them); /metrics shows each, at 0 when none.
KINDS = ("corrupt", "unavailable", "read_only", "full", "inconsistent", "corrupt_rows", "lost_commits")


class StoreHealth:
    """Problems of one store's tenants (module docstring). Thread-safe."""

    def __init__(self, data_dir: Path, *, read_only: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self.data_dir = Path(data_dir)
        self.read_only = read_only
        self._clock = clock
        self._lock = threading.Lock()
        self._problems: dict[tuple[str, str], Problem] = {}
        self._listeners: list[Callable[[bool], None]] = []
        self.repaired: Counter[str] = Counter()

    @property
    def degraded(self) -> bool:
        return bool(self._problems)

    def report(self, tenant_id: str, kind: str, message: str) -> None:
        """Record (or update) a problem of `tenant_id`."""
        with self._lock:
            was = self.degraded
            old = self._problems.get((tenant_id, kind))
            since = old.since_unix if old is not None else int(self._clock())
            self._problems[(tenant_id, kind)] = Problem(tenant_id, kind, message, since)
        _fault_counter.add(1, {"kind": kind})
        if old is None:
            log.warning("tenant %s: %s: %s", tenant_id, kind, message)
        self._changed(was)

    def clear(self, tenant_id: str, *kinds: str) -> None:
        """Forget the tenant's problems of these kinds (all of them when none is given)."""
        if not self._problems:
            return
        with self._lock:
            was = self.degraded
            gone = [key for key in self._problems if key[0] == tenant_id and (not kinds or key[1] in kinds)]
            for key in gone:
                del self._problems[key]
        for _, kind in gone:
            log.info("tenant %s: %s cleared", tenant_id, kind)
        self._changed(was)

    def has(self, tenant_id: str, kind: str) -> bool:
        """Whether `tenant_id` has a problem of `kind` now (one dict lookup: every search asks)."""
        return (tenant_id, kind) in self._problems

    def problems(self, tenant_id: str | None = None) -> list[Problem]:
        with self._lock:
            return sorted((p for p in self._problems.values() if tenant_id is None or p.tenant_id == tenant_id),
                          key=lambda p: (p.tenant_id, p.kind))

    def count_repair(self, kind: str, rows: int) -> None:
        """Count `rows` derived rows repaired (kind: "vectors", "keyword_rows", "orphans")."""
        if rows <= 0:
            return
        with self._lock:
            self.repaired[kind] += rows
        _repaired_counter.add(rows, {"kind": kind})

    def watch(self, listener: Callable[[bool], None]) -> None:
        """Call `listener(serving_fully)` now and whenever the store turns degraded or healthy."""
        with self._lock:
            self._listeners.append(listener)
            serving = not self.degraded
        listener(serving)

    def status(self, open_tenants: int, *, tenants: tuple[tuple[str, int], ...] = (),
               memory_budget_bytes: int = 0) -> StoreStatus:
        free, total = free_space(self.data_dir)
        problems = tuple(self.problems())
        with self._lock:
            repaired = sum(self.repaired.values())
        return StoreStatus(state="degraded" if problems else "ok", data_dir=str(self.data_dir),
                           read_only=self.read_only, free_bytes=free, total_bytes=total, problems=problems,
                           repaired_rows=repaired, open_tenants=open_tenants,
                           open_tenant_bytes=sum(b for _, b in tenants), memory_budget_bytes=memory_budget_bytes,
                           tenants=tenants)

    def _changed(self, was_degraded: bool) -> None:
        now = self.degraded
        if now == was_degraded:
            return
        log.warning("knowledge store is %s", "degraded" if now else "healthy again")
        for listener in list(self._listeners):
            try:
                listener(not now)
            except Exception:  # noqa: BLE001 - a listener must not break the store
                log.exception("health listener failed")
