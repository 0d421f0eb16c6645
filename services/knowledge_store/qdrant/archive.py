"""The qdrant backend's primitives of the tenant archive (../archive.py).

    listing    (artifact id, its current entry ids) after an artifact id, in id order (the
               tenant's records are scrolled and sorted: Qdrant has no range on keywords)
    put        prepared artifacts with their stored vectors through the ingest's own write path
               (writes.py `_write`: points, commit record, flip), then their feedback counters
    stage      an import writes into the tenant itself, which must hold nothing: Qdrant has no
               transaction across points and no way to switch a tenant's points over at once, so
               `replace` is UNIMPLEMENTED here (delete the tenant's documents first, or import
               into another tenant); on a failure every point of the tenant is removed again
               (`discard_tenant`: also what `nucleus migrate` runs before redoing an import a
               kill -9 cut short)
    user data  the per-user votes, the search log and the votes on federated sources (the
               `votes`, `searches` and `source_votes` collections) as archive records in key
               order (searches by time, then id: as the embedded backend), and written back
               as the same points their writes make (removed with the tenant's other points on
               a failure)
    fingerprint  the tenant's embedding model fingerprint (../fingerprints.py): a point of its
               own in the term statistics collection (the tenant point is rewritten whole by
               every write)
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from qdrant_client import models as qm

from services.knowledge_store.qdrant import filters as qf
from services.knowledge_store.qdrant import layout
from shared.errors import FailedPrecondition, Unimplemented


class Archiving:
    """Mixed into QdrantKnowledgeStore (store.py)."""

    async def archive_listing(self, tenant_id: str, after: str, limit: int) -> list[tuple[str, list[str]]]:
        await self._ensure()
        records = await self._scroll({"collection_name": self._names.artifacts},
                                     qm.Filter(must=[qf.tenant(tenant_id)]), payload=["artifact_id"])
        ids = sorted(a for a in (r.payload["artifact_id"] for r in records) if a > after)[:limit]
        if not ids:
            return []
        out: dict[str, list[tuple[int, str]]] = {a: [] for a in ids}
        for p in await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id, None, qm.FieldCondition(
                key="artifact_id", match=qm.MatchAny(any=ids))), payload=["artifact_id", "entry_id", "chunk_index"]):
            out[p.payload["artifact_id"]].append((p.payload["chunk_index"], p.payload["entry_id"]))
        return [(a, [e for _, e in sorted(entries)]) for a, entries in out.items()]

    async def put_archived(self, tenant_id: str, items: Sequence[tuple]) -> None:
        await self._ensure()
        by_persona: dict[str, list[tuple]] = {}
        for item in items:
            by_persona.setdefault(item[0], []).append(item)
        for persona, group in by_persona.items():
            await self._write(tenant_id, persona, [p for _, p, _, _, _ in group],
                              np.concatenate([v for _, _, v, _, _ in group]), [t for _, _, _, t, _ in group])
        for _, p, _, _, (helpful, unhelpful) in items:
            if helpful or unhelpful:
                await self._call("set_payload", collection_name=self._names.artifacts, wait=True,
                                 payload={"feedback_helpful": helpful, "feedback_unhelpful": unhelpful},
                                 points=[layout.artifact_point(tenant_id, p.meta.artifact_id)])

    async def user_data(self, tenant_id: str, kind: str) -> list[dict]:
        await self._ensure()
        collection, fields, key, _ = self._user_kind(kind)
        points = await self._scroll({"collection_name": collection}, qm.Filter(must=[qf.tenant(tenant_id)]))
        out = [{"kind": kind, **{f: p.payload.get(f) for f in fields}} for p in points]
        for r in out:
            if "helpful" in r:
                r["helpful"] = bool(r["helpful"])
        # searches by time (their write order), then id; votes by key
        return sorted(out, key=lambda r: (r.get("created_unix", 0), *(r[k] for k in key)))

    async def put_user_data(self, tenant_id: str, kind: str, records: Sequence[dict]) -> None:
        await self._ensure()
        collection, fields, key, point = self._user_kind(kind)
        await self._call("upsert", collection_name=collection, wait=True, points=[qm.PointStruct(
            id=point(tenant_id, *(r[k] for k in key)), vector={},
            payload={"tenant_id": tenant_id, **{f: r[f] for f in fields}}) for r in records])

    def _user_kind(self, kind: str) -> tuple:
        """(collection, payload fields, key fields, point id of the key) of a user data kind."""
        return {"vote": (self._names.votes, ("artifact_id", "user_id", "helpful", "target", "target_id",
                                             "updated_unix"), ("artifact_id", "user_id"), layout.vote_point),
                "search": (self._names.searches, ("search_id", "user_id", "created_unix", "query_sha256", "items"),
                           ("search_id",), layout.search_point),
                "source_vote": (self._names.source_votes, ("source_id", "user_id", "helpful", "target_id",
                                                           "updated_unix"), ("source_id", "user_id"),
                                layout.source_vote_point)}[kind]

    async def import_stage(self, tenant_id: str, replace: bool) -> _Stage:
        if replace:
            raise Unimplemented("import --replace is not served by the qdrant backend: Qdrant cannot switch a "
                                "tenant's points over to new ones at once, so a failure part-way would leave a mix; "
                                "import into an empty tenant (docs/SCALE.md, \"Tenant archives\")")
        await self._ensure()
        for collection in (self._names.artifacts, self._names.profiles, self._names.personas):
            got, _ = await self._call("scroll", collection_name=collection, limit=1, with_payload=False,
                                      scroll_filter=qm.Filter(must=[qf.tenant(tenant_id)]))
            if got:
                raise FailedPrecondition(f"tenant '{tenant_id}' already holds data: the qdrant backend imports into "
                                         "an empty tenant only (import --as-tenant another tenant)")
        return _Stage(self, tenant_id)

    async def discard_tenant(self, tenant_id: str) -> None:
        """Every point of the tenant removed."""
        await self._ensure()
        mine = qm.Filter(must=[qf.tenant(tenant_id)])
        await self._call("delete", collection_name=self._names.chunks, wait=True, points_selector=qm.FilterSelector(
            filter=mine, shard_key=self._shard(tenant_id)))
        for collection in self._names.payload_only():
            await self._call("delete", collection_name=collection, wait=True,
                             points_selector=qm.FilterSelector(filter=mine))

    async def tenant_fingerprint(self, tenant_id: str) -> str:
        await self._ensure()
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.point_id("fingerprint", tenant_id)], with_payload=["fingerprint"])
        return str(got[0].payload.get("fingerprint", "")) if got else ""

    async def set_tenant_fingerprint(self, tenant_id: str, fingerprint: str) -> None:
        await self._ensure()
        await self._call("upsert", collection_name=self._names.term_stats, wait=True, points=[qm.PointStruct(
            id=layout.point_id("fingerprint", tenant_id), vector={},
            payload={"tenant_id": tenant_id, "kind": "fingerprint", "fingerprint": fingerprint})])


class _Stage:
    def __init__(self, store, tenant_id: str) -> None:
        self.store, self._tenant_id = store, tenant_id

    async def commit(self) -> None:
        await self.store.resaturate(self._tenant_id)       # the sparse vectors with the final average length

    async def abort(self) -> None:
        """Every point of the tenant removed (it held none before the import)."""
        await self.store.discard_tenant(self._tenant_id)
