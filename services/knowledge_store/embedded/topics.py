"""The embedded backend's reads for topics (../topics.py serves them on both backends): the
tenant's write generation, the artifacts a caller's filters let through, and the snapshot —
every artifact's summed chunk vectors and analysed terms (the FTS5 rows) from one SQLite read.

The snapshot is read under the tenant's read lock (shared with searches; a write waits for it,
and it keeps the tenant from being evicted meanwhile); the clustering after it holds no lock.
`TopicReads` is the store's `topics` (a mixin of core.KnowledgeStore).
"""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import numpy as np

from services.knowledge_store.embedded.storage.filter_sql import filter_clause
from services.knowledge_store.embedded.tenants import Tenant, Tenants
from services.knowledge_store.topic_model import Snapshot
from services.knowledge_store.topics import Progress, Topics, answer, snapshot_of
from shared.records import SearchFilters


def generation(conn) -> tuple[int, int]:
    """Changes with every write of the tenant: rows are only ever added with new ids
    (AUTOINCREMENT, never reused) or removed."""
    count, = conn.execute("SELECT count(*) FROM entries").fetchone()
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'entries'").fetchone()
    return int(count), int(row[0]) if row else 0


def read_snapshot(conn, dimension: int, progress: Progress | None = None) -> Snapshot:
    """Every artifact's mean vector, dates, title and terms, from one read snapshot."""
    gen = generation(conn)
    meta = conn.execute("SELECT artifact_id, title, created_unix, modified_unix FROM artifacts "
                        "ORDER BY artifact_id").fetchall()
    ids = [r[0] for r in meta]
    where = {a: i for i, a in enumerate(ids)}
    sums = np.zeros((len(ids), dimension), np.float64)
    size = dimension * 4
    for artifact_id, blob in conn.execute(
            "SELECT e.artifact_id, v.vector FROM entries e JOIN entry_vectors v ON v.rid = e.rid"):
        i = where.get(artifact_id)
        if i is not None and isinstance(blob, bytes) and len(blob) == size:
            sums[i] += np.frombuffer(blob, np.float32)
    if progress:
        progress(0.2)
    terms = [Counter() for _ in ids]
    for artifact_id, title, body in conn.execute(
            "SELECT e.artifact_id, f.title, f.body FROM entries e JOIN entries_fts f ON f.rowid = e.rid"):
        i = where.get(artifact_id)
        if i is not None:
            terms[i].update(f"{title} {body}".split())
    if progress:
        progress(0.35)
    return snapshot_of(gen, ids, [r[1] for r in meta], [r[2] for r in meta], [r[3] for r in meta], sums, terms)


class EmbeddedTopicSource:
    """topics.TopicSource over the embedded store's tenants."""

    def __init__(self, tenants: Tenants) -> None:
        self._tenants = tenants

    async def visible(self, tenant_id: str, filters: SearchFilters) -> tuple[tuple[int, int], set[str] | None, Any]:
        tenant = await self._tenants.get(tenant_id)
        gen, visible = await asyncio.to_thread(self._visible, tenant, filters)
        return gen, visible, tenant

    @staticmethod
    def _visible(tenant: Tenant, filters: SearchFilters) -> tuple[tuple[int, int], set[str] | None]:
        with tenant.rw.read(), tenant.db.read("topics") as conn:
            gen = generation(conn)
            if filters.is_empty:
                return gen, None
            where, params = filter_clause(filters)
            rows = conn.execute("SELECT DISTINCT e.artifact_id FROM entries e JOIN artifacts a "
                                f"ON a.artifact_id = e.artifact_id WHERE {where}", params)
            return gen, {r[0] for r in rows}

    def read(self, handle: Tenant, shared: Snapshot | None, progress: Progress) -> Snapshot:
        with handle.rw.read(), handle.db.read("topics") as conn:
            if shared is not None and shared.generation == generation(conn):
                return shared
            return read_snapshot(conn, self._tenants.settings.dimension, progress)


class TopicReads:
    """The store's topics (a mixin of core.KnowledgeStore: `self._topics` is its
    ../topics.py `Topics` over an EmbeddedTopicSource)."""

    _topics: Topics

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, **params) -> dict:
        """Topics of the tenant as the caller sees them (`filters` carry their visibility):
        kind "topics" | "evolution" | "members" | "map", a JSON-ready dict, or
        {"status": "computing", "progress"} while the tenant's clusters are computed (../topics.py)."""
        return await answer(self._topics, tenant_id, filters, kind, **params)
