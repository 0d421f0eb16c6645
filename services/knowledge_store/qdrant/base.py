"""The qdrant backend's plumbing, which every part of QdrantKnowledgeStore uses: the connection
and its health, the collections (layout.py) created on first use, the shard of a tenant's chunk
requests, paged scrolls, and the tenant and artifact records.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qdrant_client import models as qm

from services.knowledge_store.health import StoreHealth
from services.knowledge_store.models import Embedder
from services.knowledge_store.qdrant import filters as qf
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.connection import Connection
from shared.errors import NotFound, Unavailable
from shared.settings import KnowledgeStoreSettings

BACKEND = "qdrant"
UPSERT_BATCH = 256
SCROLL_PAGE = 1024


class QdrantBase:
    """The state and plumbing of a QdrantKnowledgeStore (store.py composes the concerns)."""

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder,
                 bm25_weights: tuple[float, float]) -> None:
        self._settings = settings
        self._embedder = self.embedder = embedder
        self.data_dir = Path(settings.data_dir)     # the store's own directory (temporary files)
        self._weights = (float(bm25_weights[0]), float(bm25_weights[1]))
        self._q = Connection(settings)
        self._names = layout.Collections(settings.qdrant_collection_prefix)
        self._big_tenants = tuple(t.strip() for t in settings.qdrant_shard_key_tenants.split(",") if t.strip())
        self._ready = False
        self.health = StoreHealth(Path(settings.qdrant_path or settings.data_dir))

    @property
    def dimension(self) -> int:
        return self._settings.dimension

    def plan(self) -> list[layout.Call]:
        s = self._settings
        return layout.collection_plan(self._names, s.dimension, cluster=self._q.cluster, shards=s.qdrant_shards,
                                      replication_factor=s.qdrant_replication_factor,
                                      write_consistency=s.qdrant_write_consistency,
                                      shard_key_tenants=self._big_tenants)

    async def _call(self, method: str, **kwargs: Any) -> Any:
        try:
            out = await self._q.call(method, **kwargs)
        except Unavailable as err:
            self.health.report("*", "unavailable", str(err))
            raise
        if self.health.degraded:
            self.health.clear("*", "unavailable")
        return out

    async def _ensure(self) -> None:
        """Create the collections that do not exist yet, then finish interrupted writes."""
        if self._ready:
            return
        existing = {c.name for c in (await self._call("get_collections")).collections}
        created: set[str] = set()
        for call in self.plan():
            name = call.kwargs["collection_name"]
            if name in existing and name not in created:
                continue
            if call.method == "create_collection":
                created.add(name)
            if call.method == "create_shard_key" and not self._q.cluster:
                continue
            await self._call(call.method, **call.kwargs)
        self._ready = True
        await self.recover()
        await self.backfill_text_hashes()

    async def recover(self) -> int:
        """Finish the writes a killed replica left pending (writes.py); run once by `_ensure`."""
        raise NotImplementedError

    async def backfill_text_hashes(self) -> int:
        """Hash the texts of points stored without one (writes.py); run once by `_ensure`."""
        raise NotImplementedError

    def _shard(self, tenant_id: str) -> str | None:
        """The shard key selector of a chunk request (None in local mode: no shards)."""
        if not self._q.cluster:
            return None
        return tenant_id if tenant_id in self._big_tenants else layout.DEFAULT_SHARD_KEY

    def _chunk_args(self, tenant_id: str) -> dict[str, Any]:
        key = self._shard(tenant_id)
        return {"collection_name": self._names.chunks, **({"shard_key_selector": key} if key else {})}

    async def _scroll(self, collection_args: dict[str, Any], flt: qm.Filter, *, payload: Any = True,
                      vectors: Any = False, limit: int | None = None) -> list[qm.Record]:
        out: list[qm.Record] = []
        offset = None
        while True:
            page = SCROLL_PAGE if limit is None else min(SCROLL_PAGE, limit - len(out))
            points, offset = await self._call("scroll", **collection_args, scroll_filter=flt, limit=page,
                                              offset=offset, with_payload=payload, with_vectors=vectors)
            out += points
            if offset is None or (limit is not None and len(out) >= limit):
                return out

    async def _tenant_exists(self, tenant_id: str) -> bool:
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.tenant_point(tenant_id)], with_payload=False)
        return bool(got)

    async def _require_tenant(self, tenant_id: str) -> None:
        if not await self._tenant_exists(tenant_id):
            raise NotFound(f"tenant '{tenant_id}' has no knowledge store: nothing has been ingested for it")

    async def _records(self, tenant_id: str, artifact_ids: Sequence[str]) -> dict[str, dict]:
        got = await self._call("retrieve", collection_name=self._names.artifacts,
                               ids=[layout.artifact_point(tenant_id, a) for a in artifact_ids], with_payload=True)
        return {p.payload["artifact_id"]: p.payload for p in got}

    async def _current_chunks(self, tenant_id: str, artifact_ids: Sequence[str]) -> list[qm.Record]:
        if not artifact_ids:
            return []
        return await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id, None, qm.FieldCondition(
            key="artifact_id", match=qm.MatchAny(any=list(artifact_ids)))),
            payload=["artifact_id", "dl", "tl", "version"], vectors=[layout.SPARSE])

    def data_id(self, tenant_id: str) -> str:
        """Always "": a Qdrant tenant is never replaced in place (an import goes into an empty tenant only)."""
        return ""

    def list_tenants(self) -> list[str]:
        """Every tenant with data (synchronous, as the embedded store's)."""
        def read(client) -> list[str]:
            points, _ = client.scroll(self._names.term_stats, scroll_filter=qm.Filter(must=[
                qm.FieldCondition(key="kind", match=qm.MatchValue(value="tenant"))]), limit=100_000,
                with_payload=["tenant_id"])
            return sorted(p.payload["tenant_id"] for p in points)
        try:
            return self._q._sync(read, "list tenants")
        except ValueError:          # local mode: the collection does not exist yet
            return []


def sparse_of(point: Any) -> qm.SparseVector:
    """A point's sparse (BM25) vector; empty when it has none."""
    vector = point.vector or {}
    got = vector.get(layout.SPARSE) if isinstance(vector, dict) else None
    return got if got is not None else qm.SparseVector(indices=[], values=[])
