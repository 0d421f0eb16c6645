"""Per-tenant administration: statistics, the integrity check, and choosing the index kind.

`verify_integrity` states the store's invariant: entries in SQLite = vectors in FAISS = FTS5
keyword rows (both in-memory indexes are derived from SQLite, see tenants.py and writes.py).
`configure_index` persists the index configuration in the tenant's meta table, then builds
the new index from SQLite outside the exclusive lock and swaps it in, as a rebuild does. Also
the tenants' list and the lifecycle counters and index totals of the KnowledgeStore's /metrics.
"""
from __future__ import annotations

import asyncio

from services.knowledge_store import validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.vector_index import IndexConfig
from services.knowledge_store.embedded.writes import Evicted
from services.knowledge_store.models import INDEX_KINDS
from shared.errors import InvalidArgument
from shared.records import TenantStats


class Maintenance:
    """The store's administration of its tenants (a mixin of core.KnowledgeStore: `self._tenants`
    is the store's)."""

    _tenants: Tenants

    def list_tenants(self) -> list[str]:
        return self._tenants.ids()

    @property
    def counters(self) -> dict[str, int]:
        """Tenant lifecycle events since the process started (opened_loaded / _replayed / _rebuilt,
        saved, evicted), for the KnowledgeStore's /metrics."""
        return dict(self._tenants.counters)

    def index_totals(self) -> dict[str, tuple[int, int]]:
        """Index kind -> (open tenants, live vectors), for the KnowledgeStore's /metrics."""
        totals: dict[str, tuple[int, int]] = {}
        for kind, vectors in self._tenants.open_indexes():
            tenants, live = totals.get(kind, (0, 0))
            totals[kind] = (tenants + 1, live + vectors)
        return totals

    async def stats(self, tenant_id: str) -> TenantStats:
        tenant = await self._tenants.get(tenant_id)

        def read() -> TenantStats:
            with tenant.rw.read(), tenant.db.read() as conn:
                c = storage.entries.counts(conn)
                sources = storage.entries.source_stats(conn)
                index = tenant.index
                return TenantStats(tenant_id=tenant_id, artifacts=c["artifacts"], entries=c["records"],
                                   vectors=index.ntotal, keyword_docs=c["keyword_docs"], sources=tuple(sources),
                                   last_indexed_unix=c["last_indexed_unix"], index_kind=index.kind,
                                   dimension=index.dimension,
                                   hnsw_ef_search=index.ef_search if index.kind == "hnsw" else 0,
                                   hnsw_recall=index.depth.recall if index.depth is not None else 0.0)

        return await asyncio.to_thread(read)

    async def verify_integrity(self, tenant_id: str) -> dict[str, int]:
        """{"records", "vectors", "keyword_docs"}: entries in SQLite, vectors in FAISS, FTS5 rows."""
        tenant = await self._tenants.get(tenant_id)

        def read() -> dict[str, int]:
            with tenant.rw.read(), tenant.db.read() as conn:
                c = storage.entries.counts(conn)
                return {"records": c["records"], "vectors": tenant.index.ntotal, "keyword_docs": c["keyword_docs"]}

        return await asyncio.to_thread(read)

    async def configure_index(self, tenant_id: str, kind: str, *, hnsw_m: int = 32, hnsw_ef_search: int = 64,
                              ivf_nlist: int = 0, ivf_nprobe: int = 8) -> tuple[str, int]:
        """Choose the tenant's index kind (persisted) and rebuild it from SQLite.

        Returns (kind now serving searches, vectors). IVF serves as flat until the tenant has
        enough vectors to train it (see vector_index.py).
        """
        tenants = self._tenants
        validation.tenant_id(tenant_id)
        if kind not in INDEX_KINDS:
            raise InvalidArgument("index_kind", f"{kind!r} is not one of {', '.join(INDEX_KINDS)}")
        for name, value, lo, hi in (("hnsw_m", hnsw_m, 4, 256), ("hnsw_ef_search", hnsw_ef_search, 1, 65_536),
                                    ("ivf_nlist", ivf_nlist, 0, 1 << 20), ("ivf_nprobe", ivf_nprobe, 1, 1 << 20)):
            if not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidArgument(name, f"must be in {lo}..{hi}, got {value!r}")
        config = IndexConfig(kind=kind, hnsw_m=hnsw_m, hnsw_ef_search=hnsw_ef_search, ivf_nlist=ivf_nlist,
                             ivf_nprobe=ivf_nprobe)
        tenant = await tenants.get(tenant_id, create=True)

        def configure() -> tuple[str, int]:
            with tenant.write_lock:
                if tenant.evicted:
                    raise Evicted
                with tenant.db.write("index configuration") as conn:
                    storage.db.set_meta(conn, "index_config", config.to_json())
                    conn.execute("COMMIT")
                with tenant.db.guard("index rebuild"):
                    fresh = tenants.build_index(conn, config)
                with tenant.rw.write():
                    tenant.index = fresh
                    tenant.allowed.clear()
                tenant.unsaved = -1
                tenants.note_write(tenant, 0)
                return fresh.kind, fresh.ntotal

        while True:
            async with tenant.writer_queue():
                try:
                    return await asyncio.to_thread(configure)
                except Evicted:                     # reopened under the new configuration's files
                    tenant = await tenants.get(tenant_id, create=True)
