"""KnowledgeStore gRPC adapter: decode, call the core, encode. No logic lives here.

With authentication on, every call arrives with a verified caller (`verified_caller()`, set by
the auth interceptor); `caller_policy` holds it to its tenant and groups before the core runs."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from services.knowledge_store import caller_policy as policy
from services.knowledge_store import convert, ranking_models
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
from shared.errors import InvalidArgument, NotFound, Unimplemented
from shared.grpc_errors import translate_errors
from shared.identity import verified_caller

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}


class KnowledgeStoreServicer(ks_grpc.KnowledgeStoreServicer):
    def __init__(self, store: StoreBackend) -> None:
        self._store = store

    @translate_errors
    async def IngestDocuments(self, request, context):
        tenant = policy.write(verified_caller(), request.tenant_id, "ingest")
        report = await self._store.ingest(
            tenant, request.persona_id, [convert.document_from_pb(d) for d in request.documents],
            commit_valid=request.commit_valid)
        return convert.ingest_report_to_pb(report)

    @translate_errors
    async def DeleteArtifacts(self, request, context):
        tenant = policy.write(verified_caller(), request.tenant_id, "delete")
        artifacts, entries = await self._store.delete(tenant, list(request.artifact_ids))
        return ks_pb.DeleteArtifactsResponse(artifacts_deleted=artifacts, entries_deleted=entries)

    @translate_errors
    async def SearchPersonaKnowledgeByVector(self, request, context):
        vectors = convert.query_vectors_from_pb(request.query_vectors)
        tenant, filters = policy.read_scope(verified_caller(), request.tenant_id,
                                            convert.filters_from_pb(request.filters))
        if request.candidates_only and request.complete_scores and request.include_keyword_leg:
            if request.complete_row_ids:
                raise InvalidArgument("complete_row_ids", "must be empty with include_keyword_leg (the "
                                                          "keyword leg's rows are completed in the call)")
            keyword, terms, columns, completion = await candidates_by_both_legs(
                self._store, tenant, vectors, request.top_k, filters, keywords=convert.phrases_from_pb(request),
                feedback_expansion=request.feedback_expansion)
            response = ks_pb.VectorSearchResponse(per_query_columns=[convert.columns_to_pb(c) for c in columns],
                                                  completion=convert.completion_to_pb(completion),
                                                  keyword_columns=convert.columns_to_pb(keyword),
                                                  keyword_query_terms=terms)
            response.keyword_columns.SetInParent()        # present even when the leg found nothing
            return response
        if request.candidates_only and request.complete_scores:
            columns, completion = await vector_candidates_with_completion(
                self._store, tenant, vectors, request.top_k, filters, keywords=convert.phrases_from_pb(request),
                complete_rows=list(request.complete_row_ids), feedback_expansion=request.feedback_expansion)
            return ks_pb.VectorSearchResponse(per_query_columns=[convert.columns_to_pb(c) for c in columns],
                                              completion=convert.completion_to_pb(completion))
        if request.candidates_only:
            columns = await self._store.candidates_by_vector(tenant, vectors, request.top_k, filters,
                                                             top_hits=request.top_hits)
            return ks_pb.VectorSearchResponse(per_query_columns=[convert.columns_to_pb(c) for c in columns])
        per_query = await self._store.search_by_vector(tenant, vectors, request.top_k, filters)
        return ks_pb.VectorSearchResponse(
            per_query=[ks_pb.VectorHits(hits=[convert.hit_to_pb(h) for h in hits])
                       for hits in per_query],
        )

    @translate_errors
    async def SearchPersonaKnowledgeByFilters(self, request, context):
        tenant, filters = policy.read_scope(verified_caller(), request.tenant_id,
                                            convert.filters_from_pb(request.filters))
        args = (self._store, tenant, convert.phrases_from_pb(request), (), request.top_k, filters)
        if request.candidates_only:
            columns, terms = await keyword_candidates(*args, top_hits=request.top_hits,
                                                      feedback_expansion=request.feedback_expansion)
            return ks_pb.FilterSearchResponse(columns=convert.columns_to_pb(columns), query_terms=terms)
        hits, terms = await keyword_hits(*args, feedback_expansion=request.feedback_expansion)
        return ks_pb.FilterSearchResponse(hits=[convert.hit_to_pb(h) for h in hits],
                                          query_terms=terms)

    @translate_errors
    async def GetTenantStats(self, request, context):
        return convert.stats_to_pb(await self._store.stats(policy.metadata_read(verified_caller(), request.tenant_id)))

    @translate_errors
    async def ConfigureTenantIndex(self, request, context):
        kind, vectors = await self._store.configure_index(
            policy.write(verified_caller(), request.tenant_id, "index settings"), request.index_kind,
            **{k: v for k, v in {"hnsw_m": request.hnsw_m, "hnsw_ef_search": request.hnsw_ef_search,
                                 "ivf_nlist": request.ivf_nlist, "ivf_nprobe": request.ivf_nprobe}.items() if v},
        )
        return ks_pb.ConfigureTenantIndexResponse(index_kind=kind, vectors=vectors)

    @translate_errors
    async def GetEntries(self, request, context):
        caller = verified_caller()
        tenant = policy.read_tenant(caller, request.tenant_id)
        hits = policy.visible(caller, await self._store.get_entries(tenant, list(request.entry_ids)))
        response = ks_pb.GetEntriesResponse(entries=[convert.hit_to_pb(h) for h in hits])
        if request.include_vectors and hits:    # the vectors of exactly the entries the caller may see
            response.vectors.extend(ks_pb.FloatVector(values=v.tolist() if v is not None else [])
                                    for v in await vectors_of(self._store, tenant, hits))
        if request.include_terms and hits:      # and their analysed terms
            response.terms.extend(ks_pb.EntryTerms(title=t[0], body=t[1]) if t else ks_pb.EntryTerms()
                                  for t in await terms_of(self._store, tenant, hits))
        return response

    @translate_errors
    async def GetFieldSignals(self, request, context):
        caller = verified_caller()              # as GetEntries: the caller's tenant, the entries it may see
        tenant = policy.read_tenant(caller, request.tenant_id)
        signals = await field_signals(
            self._store, tenant, list(request.entry_ids), request.query, list(request.query_vector.values),
            may_see=lambda groups: policy.may_see(caller, groups))
        return convert.field_signals_to_pb(signals)

    @translate_errors
    async def ScoreKeywords(self, request, context):
        tenant = policy.read_tenant(verified_caller(), request.tenant_id)
        scores = await self._store.score_keywords(tenant, convert.phrases_from_pb(request), (),
                                                  [convert.external_text_from_pb(t) for t in request.texts])
        return convert.keyword_scores_to_pb(scores)

    @translate_errors
    async def PutRankingProfile(self, request, context):
        profile = convert.profile_from_pb(request)
        profile = replace(profile, tenant_id=policy.profile_write(verified_caller(), profile.tenant_id,
                                                                  profile.is_default, profile.name))
        return convert.profile_to_pb(await self._store.put_profile(profile))

    @translate_errors
    async def GetRankingProfile(self, request, context):
        tenant = policy.metadata_read(verified_caller(), request.tenant_id)
        profile = await self._store.get_profile(tenant, request.persona_id, request.name, request.version)
        if profile is None:
            raise NotFound(f"no ranking profile '{request.name or 'default'}' for tenant '{tenant}'"
                           + (f" persona '{request.persona_id}'" if request.persona_id else ""))
        return convert.profile_to_pb(profile)

    @translate_errors
    async def ListRankingProfiles(self, request, context):
        profiles = await self._store.list_profiles(policy.metadata_read(verified_caller(), request.tenant_id),
                                                   request.persona_id)
        return pb.ListRankingProfilesResponse(profiles=[convert.profile_to_pb(p) for p in profiles])

    @translate_errors
    async def PutRankingModel(self, request, context):
        tenant = policy.write(verified_caller(), request.tenant_id, "storing a ranking model")
        profile = convert.profile_from_pb(request.profile) if request.HasField("profile") else None
        sha, stored = await self._store.put_ranking_model(tenant, request.model, profile)
        return ks_pb.PutRankingModelResponse(model_sha256=sha,
                                             profile=convert.profile_to_pb(stored) if stored else None)

    @translate_errors
    async def GetRankingModel(self, request, context):
        tenant = policy.metadata_read(verified_caller(), request.tenant_id)
        raw = ranking_models.served(await self._store.get_ranking_model(tenant, request.model_sha256), tenant,
                                    request.model_sha256)
        return ks_pb.RankingModel(model_sha256=request.model_sha256, model=raw)

    @translate_errors
    async def RecordFeedback(self, request, context):
        target = _TARGETS.get(request.target)
        if target is None:
            raise InvalidArgument("target", "must be FEEDBACK_TARGET_ENTRY or FEEDBACK_TARGET_ARTIFACT")
        caller = verified_caller()
        tenant = policy.read_tenant(caller, request.tenant_id)
        ack = await self._store.record_feedback(tenant, target, request.target_id, request.helpful,
                                                policy.feedback_user(caller, request.user_id),
                                                search_id=request.search_id)
        return convert.feedback_ack_to_pb(ack)

    @translate_errors
    async def RecordSearch(self, request, context):
        await self._store.record_search(policy.search_record(verified_caller(), convert.search_log_from_pb(request)))
        return ks_pb.RecordSearchResponse()

    @translate_errors
    async def RecordSourceFeedback(self, request, context):
        caller = verified_caller()
        votes = await self._store.record_source_feedback(
            policy.read_tenant(caller, request.tenant_id), request.source_id, request.target_id, request.helpful,
            policy.feedback_user(caller, request.user_id), search_id=request.search_id)
        return convert.source_votes_to_pb(votes)

    @translate_errors
    async def GetSourceVotes(self, request, context):
        votes = await self._store.source_votes(policy.read_tenant(verified_caller(), request.tenant_id))
        return ks_pb.GetSourceVotesResponse(sources=[convert.source_votes_to_pb(v) for v in votes])

    @translate_errors
    async def GetStoreStatus(self, request, context):
        return convert.store_status_to_pb(policy.status_view(verified_caller(), self._store.status))

    @translate_errors
    async def CheckTenant(self, request, context):
        tenant = policy.write(verified_caller(), request.tenant_id, "a consistency check")
        return convert.tenant_check_to_pb(await self._store.check_tenant(tenant, repair=request.repair))

    @translate_errors
    async def GetTopics(self, request, context):
        tenant, filters = policy.read_scope(verified_caller(), request.tenant_id,
                                            convert.filters_from_pb(request.filters))
        vector = list(request.query_vector.values) if request.HasField("query_vector") else []
        answer = await self._store.topics(
            tenant, filters, request.kind or "topics", k=request.k, max_terms=request.max_terms or 8,
            examples=0 if request.examples < 0 else (request.examples or 3), period=request.period or "month",
            date_field=request.date_field or "created",
            topic_id=request.topic_id if request.HasField("topic_id") else None,
            query_vector=vector or None, limit=request.limit or 10, max_points=request.max_points or 2_000)
        return ks_pb.TopicsResponse(status=answer["status"], progress=float(answer.get("progress", 1.0)),
                                    result_json=convert.topics_json(answer))

    @translate_errors
    async def PutPersona(self, request, context):
        persona = convert.persona_from_pb(request)
        tenant = policy.write(verified_caller(), persona.tenant_id, "changing a persona")
        return convert.persona_to_pb(await self._store.put_persona(replace(persona, tenant_id=tenant)))

    @translate_errors
    async def GetPersona(self, request, context):
        tenant = policy.metadata_read(verified_caller(), request.tenant_id)
        return convert.persona_to_pb(await self._store.get_persona(tenant, request.persona_id))

    @translate_errors
    async def ListPersonas(self, request, context):
        tenant = policy.metadata_read(verified_caller(), request.tenant_id)
        personas = await self._store.list_personas(tenant)
        return pb.ListPersonasResponse(personas=[convert.persona_to_pb(p) for p in personas])

    def _embedded_only(self, name: str):
        method = getattr(self._store, name, None)
        if method is None:
            raise Unimplemented(f"{name.replace('_', ' ')} is the embedded backend's; on the Qdrant backend use "
                                "Qdrant's snapshots (docs/OPERATIONS.md, \"Backups\")")
        return method

    @translate_errors
    async def BackupTenants(self, request, context):
        policy.operator_only(verified_caller(), "a backup")
        snapshots = await self._embedded_only("backup")(list(request.tenant_ids), Path(request.directory),
                                                        Path(request.final_directory or request.directory))
        return ks_pb.BackupTenantsResponse(snapshots=[convert.snapshot_to_pb(s) for s in snapshots])

    @translate_errors
    async def RestoreTenant(self, request, context):
        policy.operator_only(verified_caller(), "a restore")
        restored, seconds = await self._embedded_only("restore_tenant")(request.tenant_id, Path(request.file),
                                                                       request.sha256)
        return ks_pb.RestoreTenantResponse(restored=convert.snapshot_to_pb(restored), unavailable_seconds=seconds)
