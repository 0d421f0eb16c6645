"""The search log and votes on federated sources as Qdrant points (layout.py: `searches`,
`source_votes`); the rules are the front's (../search_log.py). The votes that named a search
keep its id in the `feedback` log's payload. Pruning: once in PRUNE_EVERY writes per replica,
the tenant's searches older than the retention are deleted, then the oldest beyond the cap.
"""
from __future__ import annotations

import time

from qdrant_client import models as qm

from services.knowledge_store import search_log, validation
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.base import QdrantBase
from shared.records import SearchLogItem, SearchLogRecord, SourceVotes


class FeedbackLog(QdrantBase):
    """The search log and source votes of QdrantKnowledgeStore (module docstring)."""

    _logged = 0

    async def record_search(self, r: SearchLogRecord) -> None:
        search_log.record(r)
        await self._ensure()
        await self._require_tenant(r.tenant_id)
        t = await self._tenant(r.tenant_id)
        await self._call("upsert", collection_name=self._names.searches, wait=True, points=[qm.PointStruct(
            id=layout.search_point(t.key, r.search_id), vector={},
            payload={"tenant_id": r.tenant_id, "search_id": r.search_id, "user_id": r.user_id,
                     "created_unix": r.created_unix, "query_sha256": r.query_sha256,
                     "items": [[i.entry_id, i.artifact_id, i.rank] for i in r.items]})])
        self._logged += 1
        if self._logged % search_log.PRUNE_EVERY == 0:
            await self._prune_searches(r.tenant_id)

    async def _prune_searches(self, tenant_id: str) -> None:
        oldest = int(time.time()) - search_log.SEARCH_RETENTION_S
        await self._call("delete", collection_name=self._names.searches, wait=True, points_selector=qm.FilterSelector(
            filter=qm.Filter(must=[*(await self._tenant(tenant_id)).conditions(),
                                   qm.FieldCondition(key="created_unix", range=qm.Range(lt=oldest))])))
        flt = await self._all(tenant_id)
        count = (await self._call("count", collection_name=self._names.searches, count_filter=flt, exact=True)).count
        if count <= search_log.MAX_SEARCHES_PER_TENANT:
            return
        points = await self._scroll({"collection_name": self._names.searches}, flt, payload=["created_unix"])
        points.sort(key=lambda p: int(p.payload.get("created_unix", 0)))
        excess = [p.id for p in points[:count - search_log.MAX_SEARCHES_PER_TENANT]]
        await self._call("delete", collection_name=self._names.searches, wait=True,
                         points_selector=qm.PointIdsList(points=excess))

    async def _search_record(self, tenant_id: str, search_id: str) -> SearchLogRecord | None:
        t = await self._tenant(tenant_id)
        got = await self._call("retrieve", collection_name=self._names.searches,
                               ids=[layout.search_point(t.key, search_id)], with_payload=True)
        if not got or got[0].payload.get("tenant_id") != tenant_id:
            return None
        p = got[0].payload
        return SearchLogRecord(tenant_id, search_id, p.get("user_id", ""), int(p.get("created_unix", 0)),
                               p.get("query_sha256", ""),
                               tuple(SearchLogItem(str(e), str(a), int(k)) for e, a, k in p.get("items", [])))

    async def _check_search_vote(self, tenant_id: str, search_id: str, user_id: str, target_id: str) -> None:
        """InvalidArgument naming `search_id` unless the vote may name that search (search_log.py)."""
        search_log.search_id(search_id)
        search_log.check_vote(await self._search_record(tenant_id, search_id), search_id, user_id, target_id,
                              int(time.time()))

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> SourceVotes:
        validation.tenant_id(tenant_id)
        search_log.source_vote(source_id, target_id, user_id)
        await self._ensure()
        now = int(time.time())
        if search_id:
            await self._check_search_vote(tenant_id, search_id, user_id, target_id)
        t = await self._tenant(tenant_id)
        vote = {"tenant_id": tenant_id, "source_id": source_id, "user_id": user_id, "helpful": bool(helpful),
                "target_id": target_id, "updated_unix": now}
        await self._call("upsert", collection_name=self._names.source_votes, wait=True, points=[qm.PointStruct(
            id=layout.source_vote_point(t.key, source_id, user_id), vector={}, payload=vote)])
        if search_id:
            await self._call("upsert", collection_name=self._names.feedback, wait=True, points=[qm.PointStruct(
                id=layout.point_id("feedback", t.key, target_id, user_id, time.time_ns()), vector={},
                payload={**vote, "target": "source", "search_id": search_id, "comment": "", "created_unix": now})])
        return next(iter(await self._source_counts(tenant_id, source_id)), SourceVotes(source_id, 0, 0))

    async def source_votes(self, tenant_id: str) -> list[SourceVotes]:
        validation.tenant_id(tenant_id)
        await self._ensure()
        return await self._source_counts(tenant_id)

    async def _source_counts(self, tenant_id: str, source_id: str | None = None) -> list[SourceVotes]:
        """Each source's votes in the tenant; of `source_id` only when given (its indexed field)."""
        must = (await self._tenant(tenant_id)).conditions()
        if source_id is not None:
            must.append(qm.FieldCondition(key="source_id", match=qm.MatchValue(value=source_id)))
        points = await self._scroll({"collection_name": self._names.source_votes}, qm.Filter(must=must),
                                    payload=["source_id", "helpful"])
        counts: dict[str, list[int]] = {}
        for p in points:
            counts.setdefault(p.payload["source_id"], [0, 0])[0 if p.payload.get("helpful") else 1] += 1
        return [SourceVotes(s, g, b) for s, (g, b) in sorted(counts.items())]


__all__ = ["FeedbackLog"]
