"""The qdrant backend's plumbing, which every part of QdrantKnowledgeStore uses: the connection
and its health, the collections (layout.py) created on first use, the shard of a tenant's chunk
requests, paged scrolls, the tenant and artifact records, and the tenant's generation.

Generations (archive.py switches them): every read and write of a tenant names it by `_tenant`,
a filters.Tenant of the generation served (read from its generation record at most every
GENERATION_TTL_S, forgotten at once by a switch in this process; an import's own view is pinned
to the generation it writes). Every point upserted is tagged with its tenant's generation in
one place, `_call`.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qdrant_client import models as qm

from services.knowledge_store import archive_file
from services.knowledge_store.health import StoreHealth
from services.knowledge_store.models import Embedder
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.connection import Connection
from services.knowledge_store.qdrant.filters import GEN, Tenant
from shared.errors import NotFound, Unavailable
from shared.settings import KnowledgeStoreSettings

BACKEND = "qdrant"
UPSERT_BATCH = 256
SCROLL_PAGE = 1024
#: How long a replica serves the tenant generation it read before reading it again (another
#: replica's import is seen within this; the replica that switched sees it at once).
GENERATION_TTL_S = 1.0


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
        self._serving: dict[str, tuple[float, int]] = {}    # tenant -> (until, generation served): `_tenant`
        self._pinned: dict[str, int] = {}       # an import's view (archive.py): tenant -> the generation it writes
        self.health = StoreHealth(Path(settings.qdrant_path or settings.data_dir))
        if self.data_dir.is_dir():
            archive_file.sweep(self.data_dir)          # a killed import's or export's scratch file

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
        if method == "upsert":
            for point in kwargs["points"]:      # every point is written into its tenant's generation
                if point.payload and "tenant_id" in point.payload:
                    gen = (await self._tenant(point.payload["tenant_id"])).gen
                    if gen:
                        point.payload[GEN] = gen
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
        if not self._q.cluster:         # one process holds a local folder: no import of another runs
            await self.drop_unserved()
        await self.recover()
        await self.backfill_text_hashes()

    async def recover(self) -> int:
        """Finish the writes a killed replica left pending (writes.py); run once by `_ensure`."""
        raise NotImplementedError

    async def backfill_text_hashes(self) -> int:
        """Hash the texts of points stored without one (writes.py); run once by `_ensure`."""
        raise NotImplementedError

    async def drop_unserved(self, tenant_id: str | None = None) -> int:
        """Delete the points of generations no longer or not yet served (archive.py)."""
        raise NotImplementedError

    async def _tenant(self, tenant_id: str) -> Tenant:
        """The generation of the tenant this store reads and writes (module docstring)."""
        gen = self._pinned.get(tenant_id)
        if gen is None:
            now = time.monotonic()
            held = self._serving.get(tenant_id)
            if held is not None and held[0] > now:
                gen = held[1]
            else:
                gen = await self._serving_generation(tenant_id)
                held = self._serving.get(tenant_id)
                if held is not None and held[0] > time.monotonic():     # a switch set it meanwhile: newer
                    gen = held[1]
                else:
                    self._serving[tenant_id] = (now + GENERATION_TTL_S, gen)
        return Tenant(tenant_id, gen)

    async def _scope(self, tenant_id: str, f: Any = None, *extra: qm.Condition) -> qm.Filter:
        """The tenant's current entries that the SearchFilters `f` allow, in its generation (filters.Tenant)."""
        return (await self._tenant(tenant_id)).scope(f, *extra)

    async def _all(self, tenant_id: str, *extra: qm.Condition) -> qm.Filter:
        """Every point of the tenant in its generation (and `extra`)."""
        return (await self._tenant(tenant_id)).all(*extra)

    async def _serving_generation(self, tenant_id: str) -> int:
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.generation_point(tenant_id)], with_payload=["serving"])
        return int(got[0].payload.get("serving") or 0) if got else 0

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
        t = await self._tenant(tenant_id)
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.tenant_point(t.key)], with_payload=False)
        return bool(got)

    async def _require_tenant(self, tenant_id: str) -> None:
        if not await self._tenant_exists(tenant_id):
            raise NotFound(f"tenant '{tenant_id}' has no knowledge store: nothing has been ingested for it")

    async def _records(self, tenant_id: str, artifact_ids: Sequence[str]) -> dict[str, dict]:
        t = await self._tenant(tenant_id)
        got = await self._call("retrieve", collection_name=self._names.artifacts,
                               ids=[layout.artifact_point(t.key, a) for a in artifact_ids], with_payload=True)
        return {p.payload["artifact_id"]: p.payload for p in got}

    async def _current_chunks(self, tenant_id: str, artifact_ids: Sequence[str]) -> list[qm.Record]:
        if not artifact_ids:
            return []
        t = await self._tenant(tenant_id)
        return await self._scroll(self._chunk_args(tenant_id), t.scope(None, qm.FieldCondition(
            key="artifact_id", match=qm.MatchAny(any=list(artifact_ids)))),
            payload=["artifact_id", "dl", "tl", "version"], vectors=[layout.SPARSE])

    def data_id(self, tenant_id: str) -> str:
        """The generation served, as last read ("" = generation 0: never replaced by an import)."""
        held = self._serving.get(tenant_id)
        return str(held[1]) if held is not None and held[1] else ""

    def list_tenants(self) -> list[str]:
        """Every tenant with data in its served generation (synchronous, as the embedded store's)."""
        def read(client) -> list[str]:
            points, _ = client.scroll(self._names.term_stats, scroll_filter=qm.Filter(must=[
                qm.FieldCondition(key="kind", match=qm.MatchAny(any=["tenant", "generation"]))]), limit=100_000,
                with_payload=["kind", "tenant_id", "tenant", "serving", GEN])
            serving = {p.payload["tenant"]: int(p.payload.get("serving") or 0) for p in points
                       if p.payload.get("kind") == "generation"}
            return sorted(p.payload["tenant_id"] for p in points if p.payload.get("kind") == "tenant"
                          and int(p.payload.get(GEN) or 0) == serving.get(p.payload["tenant_id"], 0))
        try:
            return self._q._sync(read, "list tenants")
        except ValueError:          # local mode: the collection does not exist yet
            return []


def sparse_of(point: Any) -> qm.SparseVector:
    """A point's sparse (BM25) vector; empty when it has none."""
    vector = point.vector or {}
    got = vector.get(layout.SPARSE) if isinstance(vector, dict) else None
    return got if got is not None else qm.SparseVector(indices=[], values=[])
