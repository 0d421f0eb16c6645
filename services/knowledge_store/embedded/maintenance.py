"""Per-tenant administration: statistics, the integrity check, and choosing the index kind.

`verify_integrity` states the store's invariant: entries in SQLite = vectors in FAISS = FTS5
keyword rows (both in-memory indexes are derived from SQLite, see tenants.py and writes.py).
`configure_index` persists the index configuration in the tenant's meta table, then builds
the new index from SQLite outside the exclusive lock and swaps it in, as a rebuild does.
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


async def stats(tenants: Tenants, tenant_id: str) -> TenantStats:
    tenant = await tenants.get(tenant_id)

    def read() -> TenantStats:
        with tenant.rw.read(), tenant.db.read() as conn:
            c = storage.entries.counts(conn)
            sources = storage.entries.source_stats(conn)
            index = tenant.index
            return TenantStats(tenant_id=tenant_id, artifacts=c["artifacts"], entries=c["records"],
                               vectors=index.ntotal, keyword_docs=c["keyword_docs"], sources=tuple(sources),
                               last_indexed_unix=c["last_indexed_unix"], index_kind=index.kind,
                               dimension=index.dimension, hnsw_ef_search=index.ef_search if index.kind == "hnsw" else 0,
                               hnsw_recall=index.depth.recall if index.depth is not None else 0.0)

    return await asyncio.to_thread(read)


async def verify_integrity(tenants: Tenants, tenant_id: str) -> dict[str, int]:
    tenant = await tenants.get(tenant_id)

    def read() -> dict[str, int]:
        with tenant.rw.read(), tenant.db.read() as conn:
            c = storage.entries.counts(conn)
            return {"records": c["records"], "vectors": tenant.index.ntotal, "keyword_docs": c["keyword_docs"]}

    return await asyncio.to_thread(read)


async def configure_index(tenants: Tenants, tenant_id: str, kind: str, *, hnsw_m: int, hnsw_ef_search: int,
                          ivf_nlist: int, ivf_nprobe: int) -> tuple[str, int]:
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
