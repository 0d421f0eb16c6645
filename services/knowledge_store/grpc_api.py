"""KnowledgeStore gRPC adapter: decode, call the core, encode. No logic lives here."""
from __future__ import annotations


from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from services.knowledge_store import convert
from services.knowledge_store.core import KnowledgeStore
from shared.errors import InvalidArgument, NotFound
from shared.grpc_errors import translate_errors

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}


class KnowledgeStoreServicer(ks_grpc.KnowledgeStoreServicer):
    def __init__(self, store: KnowledgeStore) -> None:
        self._store = store

    @translate_errors
    async def IngestDocuments(self, request, context):
        report = await self._store.ingest(
            request.tenant_id, request.persona_id, [convert.document_from_pb(d) for d in request.documents]
        )
        return convert.ingest_report_to_pb(report)

    @translate_errors
    async def DeleteArtifacts(self, request, context):
        artifacts, entries = await self._store.delete(request.tenant_id, list(request.artifact_ids))
        return ks_pb.DeleteArtifactsResponse(artifacts_deleted=artifacts, entries_deleted=entries)

    @translate_errors
    async def SearchPersonaKnowledgeByVector(self, request, context):
        vectors = [list(v.values) for v in request.query_vectors]
        filters = convert.filters_from_pb(request.filters)
        if request.candidates_only:
            columns = await self._store.candidates_by_vector(request.tenant_id, vectors, request.top_k, filters,
                                                             top_hits=request.top_hits)
            return ks_pb.VectorSearchResponse(per_query_columns=[convert.columns_to_pb(c) for c in columns])
        per_query = await self._store.search_by_vector(request.tenant_id, vectors, request.top_k, filters)
        return ks_pb.VectorSearchResponse(
            per_query=[ks_pb.VectorHits(hits=[convert.hit_to_pb(h) for h in hits])
                       for hits in per_query],
        )

    @translate_errors
    async def SearchPersonaKnowledgeByFilters(self, request, context):
        args = (request.tenant_id, request.keywords, list(request.extra_keywords), request.top_k,
                convert.filters_from_pb(request.filters))
        if request.candidates_only:
            columns, terms = await self._store.candidates_by_filters(*args, top_hits=request.top_hits)
            return ks_pb.FilterSearchResponse(columns=convert.columns_to_pb(columns), query_terms=terms)
        hits, terms = await self._store.search_by_filters(*args)
        return ks_pb.FilterSearchResponse(hits=[convert.hit_to_pb(h) for h in hits],
                                          query_terms=terms)

    @translate_errors
    async def GetTenantStats(self, request, context):
        return convert.stats_to_pb(await self._store.stats(request.tenant_id))

    @translate_errors
    async def ConfigureTenantIndex(self, request, context):
        kind, vectors = await self._store.configure_index(
            request.tenant_id, request.index_kind,
            **{k: v for k, v in {"hnsw_m": request.hnsw_m, "hnsw_ef_search": request.hnsw_ef_search,
                                 "ivf_nlist": request.ivf_nlist, "ivf_nprobe": request.ivf_nprobe}.items() if v},
        )
        return ks_pb.ConfigureTenantIndexResponse(index_kind=kind, vectors=vectors)

    @translate_errors
    async def GetEntries(self, request, context):
        hits = await self._store.get_entries(request.tenant_id, list(request.entry_ids))
        return ks_pb.GetEntriesResponse(entries=[convert.hit_to_pb(h) for h in hits])

    @translate_errors
    async def PutRankingProfile(self, request, context):
        return convert.profile_to_pb(await self._store.put_profile(convert.profile_from_pb(request)))

    @translate_errors
    async def GetRankingProfile(self, request, context):
        profile = await self._store.get_profile(request.tenant_id, request.persona_id, request.name, request.version)
        if profile is None:
            raise NotFound(f"no ranking profile '{request.name or 'default'}' for tenant '{request.tenant_id}'"
                           + (f" persona '{request.persona_id}'" if request.persona_id else ""))
        return convert.profile_to_pb(profile)

    @translate_errors
    async def ListRankingProfiles(self, request, context):
        profiles = await self._store.list_profiles(request.tenant_id, request.persona_id)
        return pb.ListRankingProfilesResponse(profiles=[convert.profile_to_pb(p) for p in profiles])

    @translate_errors
    async def RecordFeedback(self, request, context):
        target = _TARGETS.get(request.target)
        if target is None:
            raise InvalidArgument("target", "must be FEEDBACK_TARGET_ENTRY or FEEDBACK_TARGET_ARTIFACT")
        ack = await self._store.record_feedback(request.tenant_id, target, request.target_id, request.helpful,
                                                request.user_id)
        return convert.feedback_ack_to_pb(ack)
