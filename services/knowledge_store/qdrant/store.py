"""QdrantKnowledgeStore: the KnowledgeStore facade (backend.StoreBackend) on a Qdrant cluster.

The same validation, document preparation, keyword rules and profile rules as the embedded
backend (the front: validation.py, preparation.py, keywords.py, profiles.py); only storage and
search differ. Nothing lives in the process: artifacts, entries, term statistics, profiles and
feedback are Qdrant points (layout.py), so several replicas serve the same tenants and any of
them can be killed. The class is composed by concern:

    base.py        connection, collections, shards, scrolls, records
    statistics.py  the tenant's term statistics (df, N, total length): deltas, recount
    writes.py      ingest and delete: the commit point, the flip, recovery of killed writes
    consistency.py the check of a tenant (records, points, vector hashes, statistics) and repair
    search.py      vector, keyword (sparse BM25 + quoted phrases), listing, by id
    feedback_log.py  the search log, votes on federated sources
    topics.py      the reads of topics (clustered as on the embedded backend, ../topics.py)
    this module    stats, profiles, personas, feedback, status; what the backend does not serve

Eventually consistent (beyond the term statistics, statistics.py): profile versions are
"max + 1": two replicas storing the same profile at the same instant may both write version
n+1 (the last wins).
"""
from __future__ import annotations

import base64
import time
from dataclasses import replace
from typing import Literal

from qdrant_client import models as qm

from ranking.profile import RankingProfile
from services.knowledge_store import personas, profiles, ranking_models, validation
from services.knowledge_store.keywords import DEFAULT_BM25_WEIGHTS
from services.knowledge_store.models import Embedder, StoreStatus
from services.knowledge_store.personas import Persona
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.archive import Archiving
from services.knowledge_store.qdrant.base import BACKEND
from services.knowledge_store.qdrant.feedback_log import FeedbackLog
from services.knowledge_store.qdrant.search import Searches
from services.knowledge_store.qdrant.topics import QdrantTopicSource
from services.knowledge_store.qdrant.writes import Writes
from services.knowledge_store.topics import Topics
from services.knowledge_store.topics import answer as topic_answer
from shared.errors import INT32_MAX, check_int
from shared.errors import InvalidArgument, NotFound, Unimplemented
from shared.records import FeedbackAck, SearchFilters, SourceStats, TenantStats
from shared.settings import KnowledgeStoreSettings


class QdrantKnowledgeStore(Searches, Writes, FeedbackLog, Archiving):
    """The KnowledgeStore on Qdrant (module docstring); every method is tenant-scoped."""

    backend = BACKEND

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder, *,
                 bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS) -> None:
        super().__init__(settings, embedder, bm25_weights)
        self._topics = Topics(QdrantTopicSource(self), settings.dimension)

    # -- stats, index configuration, consistency, health -------------------------------------

    async def stats(self, tenant_id: str) -> TenantStats:
        validation.tenant_id(tenant_id)
        await self._ensure()
        await self._require_tenant(tenant_id)
        entries = (await self._call("count", **self._chunk_args(tenant_id), count_filter=await self._scope(tenant_id),
                                    exact=True)).count
        records = await self._scroll({"collection_name": self._names.artifacts}, await self._all(tenant_id),
                                     payload=["source_id", "source_type", "entries", "indexed_unix",
                                              "visibility_groups", "tags"])
        sources: dict[tuple[str, str], list[dict]] = {}
        for r in records:
            sources.setdefault((r.payload.get("source_id", ""), r.payload.get("source_type", "")), []).append(r.payload)
        out = tuple(SourceStats(
            source_id=sid, source_type=stype, artifacts=len(rs), entries=sum(int(r.get("entries", 0)) for r in rs),
            last_indexed_unix=max(int(r.get("indexed_unix", 0)) for r in rs),
            visibility_groups=tuple(sorted({g for r in rs for g in r.get("visibility_groups", [])})),
            tags=tuple(sorted({t for r in rs for t in r.get("tags", [])})))
            for (sid, stype), rs in sorted(sources.items()))
        return TenantStats(tenant_id=tenant_id, artifacts=len(records), entries=entries, vectors=entries,
                           keyword_docs=entries, sources=out,
                           last_indexed_unix=max((int(r.payload.get("indexed_unix", 0)) for r in records), default=0),
                           index_kind=BACKEND, dimension=self._settings.dimension)

    async def verify_integrity(self, tenant_id: str) -> dict[str, int]:
        s = await self.stats(tenant_id)
        return {"records": s.entries, "vectors": s.vectors, "keyword_docs": s.keyword_docs}

    async def configure_index(self, tenant_id: str, kind: str, **_: int) -> tuple[str, int]:
        raise Unimplemented("ConfigureTenantIndex is not served by the qdrant backend: Qdrant chooses and "
                            "builds its own HNSW index (set it on the collection); index kinds are the embedded "
                            "backend's")

    async def settle_repairs(self, timeout_s: float = 30.0) -> None:
        return None

    def status(self) -> StoreStatus:
        base = self.health.status(0)
        return StoreStatus(state=base.state, data_dir=f"qdrant:{self._q.where}", read_only=False,
                           free_bytes=base.free_bytes if not self._q.cluster else -1,
                           total_bytes=base.total_bytes if not self._q.cluster else -1, problems=base.problems,
                           repaired_rows=0, open_tenants=0)

    # -- ranking profiles --------------------------------------------------------------------

    async def _profile_rows(self, tenant_id: str, persona_id: str | None = None) -> list[tuple]:
        must = (await self._tenant(tenant_id)).conditions()
        if persona_id is not None:
            must.append(qm.FieldCondition(key="persona_id", match=qm.MatchValue(value=persona_id)))
        points = await self._scroll({"collection_name": self._names.profiles}, qm.Filter(must=must))
        return [profiles.upgrade_row(p.payload["row"]) for p in points]      # a point stored before: defaults

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        """put_ranking_profile: no model fields; the new version keeps the model of the one before."""
        ranking_models.refuse_model_fields(profile)
        return await self._put_profile(profile, tuned=False)

    async def _put_profile(self, profile: RankingProfile, *, tuned: bool) -> RankingProfile:
        validation.profile(profile)
        await self._ensure()
        tenant_id = profile.tenant_id
        rows = await self._profile_rows(tenant_id, profile.persona_id)
        if not tuned:
            profile = profiles.keep_model(rows, profile)
        version = profiles.next_version(rows, profile.persona_id, profile.name)
        row = profiles.row_of(profile, version, int(time.time()), time.time_ns())
        t = await self._tenant(tenant_id)
        await self._call("upsert", collection_name=self._names.profiles, wait=True, points=[qm.PointStruct(
            id=layout.profile_point(t.key, profile.persona_id, profile.name, version), vector={},
            payload={"tenant_id": tenant_id, "persona_id": profile.persona_id, "name": profile.name,
                     "version": version, "row": list(row)})])
        if not await self._tenant_exists(tenant_id):
            await self._put_tenant(tenant_id, 0, 0.0)
        stored = await self.get_profile(tenant_id, profile.persona_id, profile.name, version)
        assert stored is not None
        return stored

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile | None:
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        check_int("version", version, 0, INT32_MAX)
        await self._ensure()
        rows = await self._profile_rows(tenant_id)
        return profiles.get_profile(rows, tenant_id, persona_id, name or "", version)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        await self._ensure()
        rows = await self._profile_rows(tenant_id)
        return profiles.list_profiles(rows, tenant_id, persona_id)

    async def put_ranking_model(self, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]:
        """The embedded backend's contract: the model once by its sha256 (a deterministic point:
        storing it again rewrites the same point), written before the profile version naming it."""
        validation.tenant_id(tenant_id)
        sha, version = ranking_models.check_model(raw)
        await self._ensure()
        t = await self._tenant(tenant_id)
        await self._call("upsert", collection_name=self._names.models, wait=True, points=[qm.PointStruct(
            id=layout.model_point(t.key, sha), vector={},
            payload={"tenant_id": tenant_id, "sha256": sha, "feature_version": version,
                     "model": base64.b64encode(bytes(raw)).decode("ascii"), "created_unix": int(time.time())})])
        if profile is None:
            return sha, None
        return sha, await self._put_profile(ranking_models.tuned(replace(profile, tenant_id=tenant_id), sha, version),
                                            tuned=True)

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes | None:
        validation.tenant_id(tenant_id)
        ranking_models.model_sha256(sha256)
        await self._ensure()
        t = await self._tenant(tenant_id)
        points = await self._call("retrieve", collection_name=self._names.models,
                                  ids=[layout.model_point(t.key, sha256)], with_payload=True)
        if not points or points[0].payload.get("tenant_id") != tenant_id:
            return None
        return base64.b64decode(points[0].payload["model"])

    # -- personas ----------------------------------------------------------------------------

    async def put_persona(self, persona: Persona) -> Persona:
        """Store a persona agent's settings (replacing earlier ones); returns them as stored."""
        persona = replace(personas.check(persona), updated_unix=int(time.time()))
        await self._ensure()
        t = await self._tenant(persona.tenant_id)
        await self._call("upsert", collection_name=self._names.personas, wait=True, points=[qm.PointStruct(
            id=layout.persona_point(t.key, persona.persona_id), vector={},
            payload={"tenant_id": persona.tenant_id, "persona_id": persona.persona_id, "json": persona.to_json()})])
        if not await self._tenant_exists(persona.tenant_id):
            await self._put_tenant(persona.tenant_id, 0, 0.0)
        return persona

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        validation.tenant_id(tenant_id)
        if not persona_id:
            raise InvalidArgument("persona_id", "is required")
        validation.persona_id(persona_id)
        await self._ensure()
        t = await self._tenant(tenant_id)
        got = await self._call("retrieve", collection_name=self._names.personas,
                               ids=[layout.persona_point(t.key, persona_id)], with_payload=True)
        if not got:
            raise NotFound(f"persona '{persona_id}' does not exist for tenant '{tenant_id}'")
        return Persona.from_json(tenant_id, got[0].payload["json"])

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        validation.tenant_id(tenant_id)
        await self._ensure()
        points = await self._scroll({"collection_name": self._names.personas}, await self._all(tenant_id))
        return sorted((Persona.from_json(tenant_id, p.payload["json"]) for p in points), key=lambda p: p.persona_id)

    # -- topics ------------------------------------------------------------------------------

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, **params) -> dict:
        """The embedded backend's topics, from the tenant's points (topics.py: the reads)."""
        validation.tenant_id(tenant_id)
        return await topic_answer(self._topics, tenant_id, filters, kind, **params)

    # -- feedback ----------------------------------------------------------------------------

    async def record_feedback(self, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                              helpful: bool, user_id: str, *, comment: str = "",
                              search_id: str = "") -> FeedbackAck:
        validation.tenant_id(tenant_id)
        validation.feedback(target, target_id, user_id, comment)
        await self._ensure()
        if search_id:           # checked first: a refused vote writes nothing
            await self._check_search_vote(tenant_id, search_id, user_id, target_id)
        await self._require_tenant(tenant_id)
        artifact_id = target_id if target == "artifact" else target_id.rsplit("#", 1)[0]
        record = (await self._records(tenant_id, [artifact_id])).get(artifact_id)
        if record is not None and target == "entry":
            found = await self._call("count", **self._chunk_args(tenant_id), exact=True, count_filter=await self._scope(
                tenant_id, None, qm.FieldCondition(key="entry_id", match=qm.MatchValue(value=target_id))))
            record = record if found.count else None
        if record is None:
            raise NotFound(f"{target} '{target_id}' not found in tenant '{tenant_id}'")
        now = int(time.time())
        t = await self._tenant(tenant_id)
        vote = {"tenant_id": tenant_id, "artifact_id": artifact_id, "user_id": user_id, "helpful": bool(helpful),
                "target": target, "target_id": target_id, "updated_unix": now}
        await self._call("upsert", collection_name=self._names.votes, wait=True, points=[qm.PointStruct(
            id=layout.vote_point(t.key, artifact_id, user_id), vector={}, payload=vote)])
        await self._call("upsert", collection_name=self._names.feedback, wait=True, points=[qm.PointStruct(
            id=layout.point_id("feedback", t.key, artifact_id, user_id, time.time_ns()), vector={},
            payload={**vote, "comment": comment, "created_unix": now, "search_id": search_id})])
        counts = []
        for value in (True, False):
            votes = qm.Filter(must=[*t.conditions(),
                                    qm.FieldCondition(key="artifact_id", match=qm.MatchValue(value=artifact_id)),
                                    qm.FieldCondition(key="helpful", match=qm.MatchValue(value=value))])
            counts.append((await self._call("count", collection_name=self._names.votes, exact=True,
                                            count_filter=votes)).count)
        await self._call("set_payload", collection_name=self._names.artifacts, wait=True,
                         payload={"feedback_helpful": counts[0], "feedback_unhelpful": counts[1]},
                         points=[layout.artifact_point(t.key, artifact_id)])
        return FeedbackAck(artifact_id, counts[0], counts[1], float(record.get("reputation_prior", 0.0)))

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._q.close()
