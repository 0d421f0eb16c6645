"""The KnowledgeStore's in-process client: what `KnowledgeStoreClient` (client.py) does over gRPC,
done by calling the store in the same process (`nucleus up --mode single`).

Same signatures, same typed records, same errors (`shared.errors`), same policy: each call
makes the verified caller the gRPC servicer would have seen (`shared.auth.inprocess`: the
calling service and the end user it works for), holds it to its tenant and groups with
`caller_policy` exactly as `grpc_api.py` does, and runs the store's code with that caller
(`verified_caller()` inside reads it). Each call is one INTERNAL span named as the RPC
(`nucleus.v1.KnowledgeStore/<Method>`) and runs under the call's deadline.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

import numpy as np
from opentelemetry.trace import TracerProvider

from ranking.profile import RankingProfile
from services.knowledge_store import caller_policy as policy
from services.knowledge_store import ranking_models
from services.knowledge_store.backend import (
    StoreBackend,
    candidates_by_both_legs,
    keyword_candidates,
    keyword_hits,
    terms_of,
    vector_candidates_with_completion,
    vectors_of,
)
from services.knowledge_store.field_signals import field_signals
from services.knowledge_store.models import StoreStatus
from services.knowledge_store.personas import Persona
from shared import records as m
from shared.auth.inprocess import InProcessCaller, in_process_call
from shared.errors import InvalidArgument, NotFound
from shared.identity import Principal
from shared.records import Keywords

SERVICE = "KnowledgeStore"
RPC_SERVICE = "nucleus.v1.KnowledgeStore"
CALLEE = "knowledge_store"


class InProcessKnowledgeStoreClient:
    """A KnowledgeSource (services/rag_pipeline/ports.py) over a store in this process."""

    def __init__(self, store: StoreBackend, caller: InProcessCaller, *, timeout_s: float = 10.0,
                 ingest_timeout_s: float = 600.0, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer_provider = tracer_provider         # None: the process's (tests pass their own)
        self._store = store
        self._caller = caller
        self.timeout_s = timeout_s
        self.ingest_timeout_s = ingest_timeout_s

    async def close(self) -> None:
        """The store belongs to the KnowledgeStore service, which closes it."""

    def _call(self, method: str, timeout_s: float | None) -> AbstractAsyncContextManager[Principal | None]:
        return in_process_call(self._caller, service=SERVICE, rpc_service=RPC_SERVICE, callee=CALLEE, method=method,
                               timeout_s=timeout_s or self.timeout_s, tracer_provider=self._tracer_provider)

    # -- writes --------------------------------------------------------------------------------
    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[m.DocumentIn], *,
                     commit_valid: bool = False) -> m.IngestReport:
        async with self._call("IngestDocuments", self.ingest_timeout_s) as p:
            return await self._store.ingest(policy.write(p, tenant_id, "ingest"), persona_id, list(documents),
                                            commit_valid=commit_valid)

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        async with self._call("DeleteArtifacts", None) as p:
            return await self._store.delete(policy.write(p, tenant_id, "delete"), list(artifact_ids))

    # -- retrieval -----------------------------------------------------------------------------
    async def candidates_by_vector_with_completion(
            self, tenant_id: str, vectors: np.ndarray, top_k: int, filters: m.SearchFilters, *, keywords: Keywords,
            extra_keywords: Sequence[str] = (), complete_rows: Sequence[int] | np.ndarray = (),
            feedback_expansion: str = "",
            timeout_s: float | None = None) -> tuple[list[m.CandidateColumns], m.ScoreCompletion]:
        async with self._call("SearchPersonaKnowledgeByVector", timeout_s) as p:
            tenant, scoped = policy.read_scope(p, tenant_id, filters)
            return await vector_candidates_with_completion(
                self._store, tenant, _rows(vectors), top_k, scoped, keywords=keywords,
                extra_keywords=list(extra_keywords), complete_rows=list(np.asarray(complete_rows, np.int64).tolist()),
                feedback_expansion=feedback_expansion)

    async def candidates_by_both_legs(
            self, tenant_id: str, vectors: np.ndarray, top_k: int, filters: m.SearchFilters, *, keywords: Keywords,
            extra_keywords: Sequence[str] = (), feedback_expansion: str = "", timeout_s: float | None = None,
    ) -> tuple[m.CandidateColumns, list[str], list[m.CandidateColumns], m.ScoreCompletion]:
        async with self._call("SearchPersonaKnowledgeByVector", timeout_s) as p:
            tenant, scoped = policy.read_scope(p, tenant_id, filters)
            return await candidates_by_both_legs(self._store, tenant, _rows(vectors), top_k, scoped,
                                                 keywords=keywords, extra_keywords=list(extra_keywords),
                                                 feedback_expansion=feedback_expansion)

    async def candidates_by_filters(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                                    filters: m.SearchFilters, *, top_hits: int = 0, feedback_expansion: str = "",
                                    timeout_s: float | None = None) -> tuple[m.CandidateColumns, list[str]]:
        async with self._call("SearchPersonaKnowledgeByFilters", timeout_s) as p:
            tenant, scoped = policy.read_scope(p, tenant_id, filters)
            return await keyword_candidates(self._store, tenant, keywords, list(extra_keywords), top_k, scoped,
                                            top_hits=top_hits, feedback_expansion=feedback_expansion)

    async def search_by_filters(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                                filters: m.SearchFilters, *, feedback_expansion: str = "",
                                timeout_s: float | None = None) -> tuple[list[m.Hit], list[str]]:
        async with self._call("SearchPersonaKnowledgeByFilters", timeout_s) as p:
            tenant, scoped = policy.read_scope(p, tenant_id, filters)
            return await keyword_hits(self._store, tenant, keywords, list(extra_keywords), top_k, scoped,
                                      feedback_expansion=feedback_expansion)

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                          timeout_s: float | None = None) -> list[m.Hit]:
        async with self._call("GetEntries", timeout_s) as p:
            tenant = policy.read_tenant(p, tenant_id)
            return policy.visible(p, await self._store.get_entries(tenant, list(entry_ids)))

    async def get_entries_with_vectors(self, tenant_id: str, entry_ids: Sequence[str], *,
                                       timeout_s: float | None = None) -> tuple[list[m.Hit], list[np.ndarray | None]]:
        async with self._call("GetEntries", timeout_s) as p:
            tenant = policy.read_tenant(p, tenant_id)
            hits = policy.visible(p, await self._store.get_entries(tenant, list(entry_ids)))
            return hits, await vectors_of(self._store, tenant, hits)

    async def get_peer_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                               timeout_s: float | None = None) -> m.PeerEntries:
        async with self._call("GetEntries", timeout_s) as p:
            tenant = policy.read_tenant(p, tenant_id)
            hits = policy.visible(p, await self._store.get_entries(tenant, list(entry_ids)))
            return m.PeerEntries(hits, await vectors_of(self._store, tenant, hits),
                                 await terms_of(self._store, tenant, hits))

    async def get_field_signals(self, tenant_id: str, entry_ids: Sequence[str], query: str,
                                query_vector: np.ndarray, *, timeout_s: float | None = None) -> m.FieldSignals:
        async with self._call("GetFieldSignals", timeout_s) as p:       # as grpc_api.GetFieldSignals
            tenant = policy.read_tenant(p, tenant_id)
            return await field_signals(self._store, tenant, list(entry_ids), query, query_vector,
                                       may_see=lambda groups: policy.may_see(p, groups))

    async def score_keywords(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str] | m.AnalysedText], *,
                             timeout_s: float | None = None) -> m.KeywordScores:
        async with self._call("ScoreKeywords", timeout_s) as p:
            return await self._store.score_keywords(policy.read_tenant(p, tenant_id), keywords, list(extra_keywords),
                                                    [t if isinstance(t, m.AnalysedText) else (t[0], t[1])
                                                     for t in texts])

    async def topics(self, tenant_id: str, filters: m.SearchFilters, kind: str, *, k: int = 0, max_terms: int = 0,
                     examples: int = 0, period: str = "", date_field: str = "", topic_id: int | None = None,
                     query_vector: np.ndarray | None = None, limit: int = 0, max_points: int = 0,
                     timeout_s: float | None = None) -> dict:
        async with self._call("GetTopics", timeout_s) as p:
            tenant, scoped = policy.read_scope(p, tenant_id, filters)
            vector = np.asarray(query_vector, np.float32).ravel().tolist() if query_vector is not None else []
            return await self._store.topics(        # the defaults grpc_api.GetTopics applies
                tenant, scoped, kind or "topics", k=k, max_terms=max_terms or 8,
                examples=0 if examples < 0 else (examples or 3), period=period or "month",
                date_field=date_field or "created", topic_id=topic_id, query_vector=vector or None,
                limit=limit or 10, max_points=max_points or 2_000)

    # -- tenant metadata, profiles, personas, feedback -----------------------------------------
    async def stats(self, tenant_id: str) -> m.TenantStats:
        async with self._call("GetTenantStats", None) as p:
            return await self._store.stats(policy.metadata_read(p, tenant_id))

    async def store_status(self) -> StoreStatus:
        """The store's condition (GetStoreStatus): all of it for operators, one tenant's for its admin."""
        async with self._call("GetStoreStatus", None) as p:
            return policy.status_view(p, self._store.status)

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        async with self._call("PutRankingProfile", None) as p:
            tenant = policy.profile_write(p, profile.tenant_id, profile.is_default, profile.name)
            return await self._store.put_profile(replace(profile, tenant_id=tenant))

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile:
        async with self._call("GetRankingProfile", None) as p:
            tenant = policy.metadata_read(p, tenant_id)
            profile = await self._store.get_profile(tenant, persona_id, name, version)
            if profile is None:
                raise NotFound(f"no ranking profile '{name or 'default'}' for tenant '{tenant}'"
                               + (f" persona '{persona_id}'" if persona_id else ""))
            return profile

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        async with self._call("ListRankingProfiles", None) as p:
            return await self._store.list_profiles(policy.metadata_read(p, tenant_id), persona_id)

    async def put_ranking_model(self, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]:
        async with self._call("PutRankingModel", None) as p:
            return await self._store.put_ranking_model(policy.write(p, tenant_id, "storing a ranking model"),
                                                       raw, profile)

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes:
        async with self._call("GetRankingModel", None) as p:
            tenant = policy.metadata_read(p, tenant_id)
            return ranking_models.served(await self._store.get_ranking_model(tenant, sha256), tenant, sha256)

    async def put_persona(self, persona: Persona) -> Persona:
        async with self._call("PutPersona", None) as p:
            tenant = policy.write(p, persona.tenant_id, "changing a persona")
            return await self._store.put_persona(replace(persona, tenant_id=tenant))

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        async with self._call("GetPersona", None) as p:
            return await self._store.get_persona(policy.metadata_read(p, tenant_id), persona_id)

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        async with self._call("ListPersonas", None) as p:
            return await self._store.list_personas(policy.metadata_read(p, tenant_id))

    async def record_feedback(self, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str, *, search_id: str = "") -> m.FeedbackAck:
        async with self._call("RecordFeedback", None) as p:
            if target not in ("entry", "artifact"):      # as grpc_api.RecordFeedback
                raise InvalidArgument("target", "must be FEEDBACK_TARGET_ENTRY or FEEDBACK_TARGET_ARTIFACT")
            tenant = policy.read_tenant(p, tenant_id)
            return await self._store.record_feedback(tenant, target, target_id, helpful,
                                                     policy.feedback_user(p, user_id), search_id=search_id)

    async def record_search(self, record: m.SearchLogRecord) -> None:
        async with self._call("RecordSearch", None) as p:
            await self._store.record_search(policy.search_record(p, record))

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> m.SourceVotes:
        async with self._call("RecordSourceFeedback", None) as p:
            return await self._store.record_source_feedback(policy.read_tenant(p, tenant_id), source_id, target_id,
                                                            helpful, policy.feedback_user(p, user_id),
                                                            search_id=search_id)

    async def source_votes(self, tenant_id: str) -> list[m.SourceVotes]:
        async with self._call("GetSourceVotes", None) as p:
            return await self._store.source_votes(policy.read_tenant(p, tenant_id))


def _rows(vectors: np.ndarray) -> list[np.ndarray]:
    """One float32 row per query vector, as the gRPC adapter hands them to the store."""
    return [np.asarray(row, np.float32) for row in np.atleast_2d(np.asarray(vectors, np.float32))]


__all__ = ["InProcessKnowledgeStoreClient"]
