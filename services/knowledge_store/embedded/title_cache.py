"""Title vectors in memory for GetFieldSignals (../field_signals.py), per open tenant.

Read from SQLite per query, 100 title vectors (1.5 KB blobs in a WITHOUT ROWID table) cost
about 1.3 ms — half of the store's share of a learned query. A tenant's title vectors are
therefore read once into one float32 matrix (artifact id → row) when GetFieldSignals first asks,
and served from it while the tenant's data does not change: the cache is tied to the tenant
object and to the generation of its allowed-rows cache (allowed_cache.py), which every committed
write that changes rows advances (writes.py). A changed tenant is read again at most once every
REBUILD_AFTER_S; meanwhile (a tenant being ingested) its title vectors are read per query as
before. A tenant with more than MAX_ARTIFACTS title vectors is never cached (1.5 KB each in
memory: 100,000 are 154 MB), nor is an evicted one kept (weak reference); all tenants' matrices
together stay under MAX_BYTES (the least recently used are dropped first). This memory is the
cache's own: the tenants' memory budget (NUCLEUS_KS_MEMORY_BUDGET_MB) does not count it.
"""
from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded import storage

MAX_ARTIFACTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
REBUILD_AFTER_S = 30.0


@dataclass(frozen=True, slots=True)
class _Cached:
    tenant: weakref.ref
    generation: int
    rows: dict[str, int]
    matrix: NDArray[np.float32]


class TitleCache:
    """One matrix of title vectors per open tenant (module docstring)."""

    def __init__(self, max_artifacts: int = MAX_ARTIFACTS, rebuild_after_s: float = REBUILD_AFTER_S,
                 clock=time.monotonic, max_bytes: int = MAX_BYTES) -> None:
        self.max_artifacts = max_artifacts
        self.max_bytes = max_bytes
        self.rebuild_after_s = rebuild_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: dict[str, _Cached] = {}          # least recently used first
        self._read_at: dict[str, float] = {}
        self.builds = 0                       # how many times a tenant's matrix was read (tests)

    def vectors(self, tenant, conn: sqlite3.Connection, artifact_ids: Sequence[str],
                dimension: int) -> dict[str, NDArray[np.float32]]:
        """The stored title vectors of these artifacts (absent: none), from the tenant's matrix
        when it is current, else from SQLite (`conn`: a read connection of the tenant)."""
        generation = tenant.allowed.generation
        with self._lock:
            self._forget_closed()
            hit = self._cached.get(tenant.tenant_id)
            if hit is not None:
                self._cached[tenant.tenant_id] = self._cached.pop(tenant.tenant_id)    # most recently used
            now = self._clock()
            current = hit is not None and hit.tenant() is tenant and hit.generation == generation
            rebuild = not current and now - self._read_at.get(tenant.tenant_id, -np.inf) >= self.rebuild_after_s
            if rebuild:
                self._read_at[tenant.tenant_id] = now
        if not current and rebuild:
            hit = self._build(tenant, conn, generation, dimension)
            current = hit is not None
        if not current or hit is None:
            return storage.entries.title_vectors(conn, artifact_ids, dimension)
        return {a: hit.matrix[hit.rows[a]] for a in artifact_ids if a in hit.rows}

    def _build(self, tenant, conn: sqlite3.Connection, generation: int, dimension: int) -> _Cached | None:
        try:
            count = conn.execute("SELECT count(*) FROM title_vectors").fetchone()[0]
        except sqlite3.OperationalError:           # an older database served read-only (not migrated)
            return None
        if count > self.max_artifacts or count * dimension * 4 > self.max_bytes:
            return None
        rows: dict[str, int] = {}
        matrix = np.zeros((count, dimension), dtype=np.float32)
        size = dimension * 4
        for artifact_id, blob in conn.execute("SELECT artifact_id, vector FROM title_vectors"):
            if isinstance(blob, bytes) and len(blob) == size and len(rows) < count:
                matrix[len(rows)] = np.frombuffer(blob, dtype=np.float32)
                rows[artifact_id] = len(rows)
        cached = _Cached(weakref.ref(tenant), generation, rows, matrix[:len(rows)])
        with self._lock:
            self._cached.pop(tenant.tenant_id, None)
            self._cached[tenant.tenant_id] = cached
            while self.nbytes > self.max_bytes and len(self._cached) > 1:
                del self._cached[next(iter(self._cached))]                      # the least recently used
            self.builds += 1
        return cached

    @property
    def nbytes(self) -> int:
        """The matrices held, in bytes."""
        return sum(c.matrix.nbytes for c in self._cached.values())

    def _forget_closed(self) -> None:
        for tenant_id in [t for t, c in self._cached.items() if c.tenant() is None or c.tenant().evicted]:
            del self._cached[tenant_id]
