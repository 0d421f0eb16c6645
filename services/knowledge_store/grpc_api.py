"""KnowledgeStore gRPC adapter: decode, call the front (front.py) as the verified caller, encode.

With authentication on, every call arrives with a verified caller (`verified_caller()`, set by
the auth interceptor); the front holds it to its tenant and groups before the backend runs."""
from __future__ import annotations

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from services.knowledge_store import convert
from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.front import StoreFront
from shared.errors import InvalidArgument
from shared.grpc_errors import translate_errors
from shared.identity import verified_caller
from shared.records import RetrievalRequest

_TARGETS = {pb.FEEDBACK_TARGET_ENTRY: "entry", pb.FEEDBACK_TARGET_ARTIFACT: "artifact"}


class KnowledgeStoreServicer(ks_grpc.KnowledgeStoreServicer):
    def __init__(self, store: StoreBackend) -> None:
        self._front = StoreFront(store)

    @translate_errors
    async def IngestDocuments(self, request, context):
        report = await self._front.ingest(verified_caller(), request.tenant_id, request.persona_id,
                                          [convert.document_from_pb(d) for d in request.documents],
                                          commit_valid=request.commit_valid, key=request.idempotency_key)
        return convert.ingest_report_to_pb(report)

    @translate_errors
    async def IngestDocumentsStream(self, request, context):
        async for event in self._front.ingest_stream(
                verified_caller(), request.tenant_id, request.persona_id,
                [convert.document_from_pb(d) for d in request.documents], commit_valid=request.commit_valid,
                key=request.idempotency_key):
            yield convert.ingest_event_to_pb(event)

    @translate_errors
    async def DeleteArtifacts(self, request, context):
        artifacts, entries = await self._front.delete(verified_caller(), request.tenant_id, list(request.artifact_ids))
        return ks_pb.DeleteArtifactsResponse(artifacts_deleted=artifacts, entries_deleted=entries)

    @translate_errors
    async def Retrieve(self, request, context):
        answer = await self._front.retrieve(verified_caller(), convert.retrieval_request_from_pb(request))
        return convert.retrieval_to_pb(answer)

    @translate_errors
    async def SearchPersonaKnowledgeByVector(self, request, context):
        answer = await self._front.retrieve(verified_caller(), RetrievalRequest(
            request.tenant_id, top_k=request.top_k, filters=convert.filters_from_pb(request.filters),
            vectors=convert.query_vectors_from_pb(request.query_vectors), hits=True))
        return ks_pb.VectorSearchResponse(per_query=[ks_pb.VectorHits(hits=[convert.hit_to_pb(h) for h in hits])
                                                     for hits in answer.dense_hits])

    @translate_errors
    async def SearchPersonaKnowledgeByFilters(self, request, context):
        answer = await self._front.retrieve(verified_caller(), RetrievalRequest(
            request.tenant_id, convert.phrases_from_pb(request), request.top_k,
            convert.filters_from_pb(request.filters), keyword=True, hits=True,
            feedback_expansion=request.feedback_expansion))
        return ks_pb.FilterSearchResponse(hits=[convert.hit_to_pb(h) for h in answer.keyword_hits],
                                          query_terms=answer.terms)

    @translate_errors
    async def GetTenantStats(self, request, context):
        return convert.stats_to_pb(await self._front.stats(verified_caller(), request.tenant_id))

    @translate_errors
    async def ConfigureTenantIndex(self, request, context):
        kind, vectors = await self._front.configure_index(
            verified_caller(), request.tenant_id, request.index_kind, hnsw_m=request.hnsw_m,
            hnsw_ef_search=request.hnsw_ef_search, ivf_nlist=request.ivf_nlist, ivf_nprobe=request.ivf_nprobe)
        return ks_pb.ConfigureTenantIndexResponse(index_kind=kind, vectors=vectors)

    @translate_errors
    async def GetEntries(self, request, context):
        caller, ids = verified_caller(), list(request.entry_ids)
        if not (request.include_vectors or request.include_terms):
            hits = await self._front.get_entries(caller, request.tenant_id, ids)
            return ks_pb.GetEntriesResponse(entries=[convert.hit_to_pb(h) for h in hits],
                                            data_id=self._front.data_id(caller, request.tenant_id))
        peer = await self._front.get_peer_entries(caller, request.tenant_id, ids)
        response = ks_pb.GetEntriesResponse(entries=[convert.hit_to_pb(h) for h in peer.hits])
        if request.include_vectors:     # the vectors of exactly the entries the caller may see
            response.vectors.extend(ks_pb.FloatVector(values=v.tolist() if v is not None else [])
                                    for v in peer.vectors)
        if request.include_terms:       # and their analysed terms
            response.terms.extend(ks_pb.EntryTerms(title=t[0], body=t[1]) if t else ks_pb.EntryTerms()
                                  for t in peer.terms)
        return response

    @translate_errors
    async def GetFieldSignals(self, request, context):
        signals = await self._front.get_field_signals(verified_caller(), request.tenant_id, list(request.entry_ids),
                                                      request.query, list(request.query_vector.values))
        return convert.field_signals_to_pb(signals)

    @translate_errors
    async def ScoreKeywords(self, request, context):
        scores = await self._front.score_keywords(verified_caller(), request.tenant_id,
                                                  convert.phrases_from_pb(request), (),
                                                  [convert.external_text_from_pb(t) for t in request.texts])
        return convert.keyword_scores_to_pb(scores)

    @translate_errors
    async def PutRankingProfile(self, request, context):
        return convert.profile_to_pb(await self._front.put_profile(verified_caller(), convert.profile_from_pb(request)))

    @translate_errors
    async def GetRankingProfile(self, request, context):
        profile = await self._front.get_profile(verified_caller(), request.tenant_id, request.persona_id,
                                                request.name, request.version)
        return convert.profile_to_pb(profile)

    @translate_errors
    async def ListRankingProfiles(self, request, context):
        profiles = await self._front.list_profiles(verified_caller(), request.tenant_id, request.persona_id)
        return pb.ListRankingProfilesResponse(profiles=[convert.profile_to_pb(p) for p in profiles])

    @translate_errors
    async def PutRankingModel(self, request, context):
        profile = convert.profile_from_pb(request.profile) if request.HasField("profile") else None
        sha, stored = await self._front.put_ranking_model(verified_caller(), request.tenant_id, request.model, profile)
        return ks_pb.PutRankingModelResponse(model_sha256=sha,
                                             profile=convert.profile_to_pb(stored) if stored else None)

    @translate_errors
    async def GetRankingModel(self, request, context):
        raw = await self._front.get_ranking_model(verified_caller(), request.tenant_id, request.model_sha256)
        return ks_pb.RankingModel(model_sha256=request.model_sha256, model=raw)

    @translate_errors
    async def RecordFeedback(self, request, context):
        ack = await self._front.record_feedback(
            verified_caller(), request.tenant_id, _TARGETS.get(request.target, ""), request.target_id,
            request.helpful, request.user_id, search_id=request.search_id)
        return convert.feedback_ack_to_pb(ack)

    @translate_errors
    async def RecordSearch(self, request, context):
        await self._front.record_search(verified_caller(), convert.search_log_from_pb(request))
        return ks_pb.RecordSearchResponse()

    @translate_errors
    async def RecordSourceFeedback(self, request, context):
        votes = await self._front.record_source_feedback(
            verified_caller(), request.tenant_id, request.source_id, request.target_id, request.helpful,
            request.user_id, search_id=request.search_id)
        return convert.source_votes_to_pb(votes)

    @translate_errors
    async def GetSourceVotes(self, request, context):
        votes = await self._front.source_votes(verified_caller(), request.tenant_id)
        return ks_pb.GetSourceVotesResponse(sources=[convert.source_votes_to_pb(v) for v in votes])

    @translate_errors
    async def GetStoreStatus(self, request, context):
        return convert.store_status_to_pb(await self._front.store_status(verified_caller()))

    @translate_errors
    async def CheckTenant(self, request, context):
        check = await self._front.check_tenant(verified_caller(), request.tenant_id, repair=request.repair)
        return convert.tenant_check_to_pb(check)

    @translate_errors
    async def GetTopics(self, request, context):
        answer = await self._front.topics(
            verified_caller(), request.tenant_id, convert.filters_from_pb(request.filters), request.kind,
            k=request.k, max_terms=request.max_terms, examples=request.examples, period=request.period,
            date_field=request.date_field, topic_id=request.topic_id if request.HasField("topic_id") else None,
            query_vector=list(request.query_vector.values) if request.HasField("query_vector") else None,
            limit=request.limit, max_points=request.max_points)
        return ks_pb.TopicsResponse(status=answer["status"], progress=float(answer.get("progress", 1.0)),
                                    result_json=convert.topics_json(answer))

    @translate_errors
    async def PutPersona(self, request, context):
        return convert.persona_to_pb(await self._front.put_persona(verified_caller(), convert.persona_from_pb(request)))

    @translate_errors
    async def GetPersona(self, request, context):
        return convert.persona_to_pb(await self._front.get_persona(verified_caller(), request.tenant_id,
                                                                   request.persona_id))

    @translate_errors
    async def ListPersonas(self, request, context):
        personas = await self._front.list_personas(verified_caller(), request.tenant_id)
        return pb.ListPersonasResponse(personas=[convert.persona_to_pb(p) for p in personas])

    @translate_errors
    async def BackupTenants(self, request, context):
        snapshots = await self._front.backup_tenants(verified_caller(), list(request.tenant_ids), request.directory,
                                                     request.final_directory)
        return ks_pb.BackupTenantsResponse(snapshots=[convert.snapshot_to_pb(s) for s in snapshots])

    @translate_errors
    async def RestoreTenant(self, request, context):
        restored, seconds = await self._front.restore_tenant(verified_caller(), request.tenant_id, request.file,
                                                             request.sha256)
        return ks_pb.RestoreTenantResponse(restored=convert.snapshot_to_pb(restored), unavailable_seconds=seconds)

    @translate_errors
    async def ExportTenant(self, request, context):
        async for chunk in self._front.export_tenant(verified_caller(), request.tenant_id, request.backup_key):
            yield ks_pb.ArchiveChunk(data=chunk)

    @translate_errors
    async def ImportTenant(self, request_iterator, context):
        messages = aiter(request_iterator)
        first = await anext(messages, None)
        if first is None or first.WhichOneof("part") != "options":
            raise InvalidArgument("options", "the first ImportTenant message carries the options, then the data")
        o = first.options

        async def chunks():
            async for message in messages:
                if message.WhichOneof("part") != "data":
                    raise InvalidArgument("options", "only the first ImportTenant message carries options")
                yield message.data

        report = await self._front.import_tenant(verified_caller(), chunks(), o.backup_key, as_tenant=o.as_tenant,
                                                 replace=o.replace, keep_groups=o.keep_groups,
                                                 with_user_data=o.with_user_data, reembed=o.reembed)
        return ks_pb.ImportTenantResponse(tenant_id=report.tenant_id, artifacts=report.artifacts,
                                          entries=report.entries, profiles=report.profiles, personas=report.personas,
                                          user_records=report.user_records)
