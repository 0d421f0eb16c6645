"""The qdrant backend's reads for topics (../topics.py serves them on both backends, with the
same clustering).

    generation   a token on the tenant's statistics point (layout.tenant_point) that every
                 write replaces (statistics.py `_put_tenant`): models are cached until it changes,
                 on every replica alike
    visible      the artifacts of the tenant's current entries a caller's filters let through
    snapshot     the tenant's current chunk points scrolled out with their dense vectors, put in
                 canonical order (artifact id, then chunk index, i.e. entry id) so the sums are
                 those of the embedded store; the analysed terms derived from each stored entry
                 as ingest derived them (preparation.derived_rows)

The generation is read before the points: a write landing during the read leaves a snapshot
newer than its generation, computed again at the next call after the write's token.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import numpy as np

from services.knowledge_store.preparation import derived_rows
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.base import QdrantBase
from services.knowledge_store.topic_model import Snapshot
from services.knowledge_store.topics import Progress, snapshot_of
from shared.errors import NotFound
from shared.records import SearchFilters

SNAPSHOT_PAYLOAD = ["artifact_id", "chunk_index", "title", "headline", "text", "created_unix", "modified_unix"]


class QdrantTopicSource:
    """topics.TopicSource over a QdrantKnowledgeStore (module docstring)."""

    def __init__(self, store: QdrantBase) -> None:
        self._store = store

    async def generation(self, tenant_id: str) -> str:
        """The tenant generation served, then the write generation of its tenant point."""
        s = self._store
        t = await s._tenant(tenant_id)
        got = await s._call("retrieve", collection_name=s._names.term_stats, ids=[layout.tenant_point(t.key)],
                            with_payload=["generation", "entries", "total_len"])
        if not got:
            raise NotFound(f"tenant '{tenant_id}' has no knowledge store: nothing has been ingested for it")
        p = got[0].payload
        return f"{t.gen}/" + str(p.get("generation") or f"{p.get('entries', 0)}:{p.get('total_len', 0.0)}")

    async def visible(self, tenant_id: str, filters: SearchFilters) -> tuple[str, set[str] | None, Any]:
        s = self._store
        await s._ensure()
        gen = await self.generation(tenant_id)
        if filters.is_empty:
            return gen, None, tenant_id
        points = await s._scroll(s._chunk_args(tenant_id), await s._scope(tenant_id, filters),
                                 payload=["artifact_id"])
        return gen, {p.payload["artifact_id"] for p in points}, tenant_id

    def read(self, handle: str, shared: Snapshot | None, progress: Progress) -> Snapshot:
        return asyncio.run(self._snapshot(handle, shared, progress))     # the compute thread's own loop

    async def _snapshot(self, tenant_id: str, shared: Snapshot | None, progress: Progress) -> Snapshot:
        s = self._store
        gen = await self.generation(tenant_id)
        if shared is not None and shared.generation == gen:
            return shared
        points = await s._scroll(s._chunk_args(tenant_id), await s._scope(tenant_id), payload=SNAPSHOT_PAYLOAD,
                                 vectors=[layout.DENSE])
        points.sort(key=lambda p: (p.payload["artifact_id"], int(p.payload.get("chunk_index", 0))))
        progress(0.2)
        ids: list[str] = []
        meta: list[dict] = []
        for p in points:
            if not ids or ids[-1] != p.payload["artifact_id"]:
                ids.append(p.payload["artifact_id"])
                meta.append(p.payload)
        where = {a: i for i, a in enumerate(ids)}
        sums = np.zeros((len(ids), s.dimension), np.float64)
        terms = [Counter() for _ in ids]
        for p in points:
            i = where[p.payload["artifact_id"]]
            vector = (p.vector or {}).get(layout.DENSE) if isinstance(p.vector, dict) else None
            if vector is not None and len(vector) == s.dimension:
                sums[i] += np.asarray(vector, np.float32)
            title, body, _ = derived_rows(p.payload.get("title", ""), p.payload.get("headline", ""),
                                          p.payload.get("text", ""))
            terms[i].update(f"{title} {body}".split())
        progress(0.35)
        return snapshot_of(gen, ids, [m.get("title", "") for m in meta], [int(m.get("created_unix", 0)) for m in meta],
                           [int(m.get("modified_unix", 0)) for m in meta], sums, terms)
