"""Async client of the KnowledgeStore gRPC service returning core types. Used by RAGPipeline,
the CLI and the benchmarks. Every call has a deadline; errors arrive as `shared.errors`."""
from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import AsyncIterable, AsyncIterator, Sequence

import grpc

import numpy as np

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from ranking.profile import RankingProfile
from services.knowledge_store import convert
from services.knowledge_store.archive import ImportReport
from services.knowledge_store.front import idempotent_methods
from services.knowledge_store.models import StoreStatus, TenantCheck
from services.knowledge_store.personas import Persona
from shared import records as m
from shared.errors import DeadlineExceeded
from shared.grpc_client import aio_channel, call
from shared.grpc_errors import from_grpc_error
from shared.records import Keywords

SERVICE = "KnowledgeStore"
_TARGET_PB = {"entry": pb.FEEDBACK_TARGET_ENTRY, "artifact": pb.FEEDBACK_TARGET_ARTIFACT}


class KnowledgeStoreClient:
    def __init__(self, target: str, *, timeout_s: float = 10.0, ingest_timeout_s: float = 600.0,
                 interceptors: list | None = None, tls_ca_file: Path | None = None) -> None:
        self._channel = aio_channel(target, interceptors, tls_ca_file=tls_ca_file, idempotent=idempotent_methods())
        self._stub = ks_grpc.KnowledgeStoreStub(self._channel)
        self.timeout_s = timeout_s
        self.ingest_timeout_s = ingest_timeout_s
        self._data_ids: dict[str, str] = {}      # tenant -> the data id its last read answered with

    async def close(self) -> None:
        await self._channel.close()

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[m.DocumentIn], *,
                     commit_valid: bool = False, key: str = "") -> m.IngestReport:
        """IngestDocuments with `key` (a fresh one when not given): the channel's retry of a request
        that already committed is answered its report and writes nothing."""
        request = convert.ingest_request_to_pb(tenant_id, persona_id, documents, commit_valid,
                                               key or uuid.uuid4().hex)
        response = await call(self._stub.IngestDocuments, request, timeout=self.ingest_timeout_s, service=SERVICE)
        return convert.ingest_report_from_pb(response)

    async def ingest_stream(self, tenant_id: str, persona_id: str, documents: Sequence[m.DocumentIn], *,
                            commit_valid: bool = False, key: str = ""
                            ) -> AsyncIterator[m.IngestProgress | m.IngestReport]:
        """IngestDocumentsStream: progress while the entries are embedded, then the report. The
        ingest deadline bounds the wait for each message, not the whole stream: a big file's
        ingest runs as long as it makes progress (a 150,000-row sheet embeds for ~14 minutes),
        and one that goes quiet that long is cancelled as DeadlineExceeded."""
        stream = self._stub.IngestDocumentsStream(
            convert.ingest_request_to_pb(tenant_id, persona_id, documents, commit_valid, key or uuid.uuid4().hex))
        try:
            while True:
                try:
                    event = await asyncio.wait_for(stream.read(), self.ingest_timeout_s)
                except TimeoutError:                  # the call is cancelled below
                    raise DeadlineExceeded(f"{SERVICE} sent no progress of the ingest for "
                                           f"{self.ingest_timeout_s:.0f} s") from None
                if event is grpc.aio.EOF:
                    return
                yield convert.ingest_event_from_pb(event)
        except grpc.RpcError as err:
            raise from_grpc_error(err, service=SERVICE) from None
        finally:
            stream.cancel()                     # a consumer that stopped early ends the call (no-op when done)

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        response = await call(self._stub.DeleteArtifacts, ks_pb.DeleteArtifactsRequest(
            tenant_id=tenant_id, artifact_ids=list(artifact_ids)), timeout=self.timeout_s, service=SERVICE)
        return response.artifacts_deleted, response.entries_deleted

    async def retrieve(self, request: m.RetrievalRequest, *, timeout_s: float | None = None) -> m.Retrieval:
        """One retrieval (Retrieve): the keyword leg, the dense leg or both (m.RetrievalRequest)."""
        response = await call(self._stub.Retrieve, convert.retrieval_request_to_pb(request),
                              timeout=timeout_s or self.timeout_s, service=SERVICE)
        self._data_ids[request.tenant_id] = response.data_id
        return convert.retrieval_from_pb(request, response)

    def data_id(self, tenant_id: str) -> str:
        """The tenant's data id (StoreBackend.data_id) the last Retrieve or GetEntries answered with."""
        return self._data_ids.get(tenant_id, "")

    async def stats(self, tenant_id: str) -> m.TenantStats:
        response = await call(self._stub.GetTenantStats, ks_pb.TenantStatsRequest(tenant_id=tenant_id),
                              timeout=self.timeout_s, service=SERVICE)
        return convert.stats_from_pb(response)

    async def configure_index(self, tenant_id: str, kind: str, **params: int) -> tuple[str, int]:
        response = await call(self._stub.ConfigureTenantIndex,
                              ks_pb.ConfigureTenantIndexRequest(tenant_id=tenant_id, index_kind=kind, **params),
                              timeout=self.ingest_timeout_s, service=SERVICE)
        return response.index_kind, response.vectors

    async def put_ranking_model(self, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]:
        response = await call(self._stub.PutRankingModel, ks_pb.PutRankingModelRequest(
            tenant_id=tenant_id, model=raw, profile=convert.profile_to_pb(profile) if profile else None),
            timeout=self.timeout_s, service=SERVICE)
        return response.model_sha256, (convert.profile_from_pb(response.profile)
                                       if response.HasField("profile") else None)

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes:
        """The model's bytes; NotFound when the tenant has no model of that hash."""
        response = await call(self._stub.GetRankingModel, ks_pb.GetRankingModelRequest(
            tenant_id=tenant_id, model_sha256=sha256), timeout=self.timeout_s, service=SERVICE)
        return bytes(response.model)

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                          timeout_s: float | None = None) -> list[m.Hit]:
        response = await call(self._stub.GetEntries, ks_pb.GetEntriesRequest(
            tenant_id=tenant_id, entry_ids=list(entry_ids)), timeout=timeout_s or self.timeout_s, service=SERVICE)
        self._data_ids[tenant_id] = response.data_id
        return [convert.hit_from_pb(h) for h in response.entries]

    async def get_entries_with_vectors(self, tenant_id: str, entry_ids: Sequence[str], *,
                                       timeout_s: float | None = None) -> tuple[list[m.Hit], list[np.ndarray | None]]:
        """`get_entries`, and each entry's stored unit vector (None when the index holds none)."""
        response = await call(self._stub.GetEntries, ks_pb.GetEntriesRequest(
            tenant_id=tenant_id, entry_ids=list(entry_ids), include_vectors=True),
            timeout=timeout_s or self.timeout_s, service=SERVICE)
        vectors = [np.asarray(v.values, np.float32) if len(v.values) else None for v in response.vectors]
        return [convert.hit_from_pb(h) for h in response.entries], vectors

    async def get_peer_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                               timeout_s: float | None = None) -> m.PeerEntries:
        """`get_entries`, each entry's stored unit vector and its analysed terms (one GetEntries)."""
        response = await call(self._stub.GetEntries, ks_pb.GetEntriesRequest(
            tenant_id=tenant_id, entry_ids=list(entry_ids), include_vectors=True, include_terms=True),
            timeout=timeout_s or self.timeout_s, service=SERVICE)
        return convert.peer_entries_from_pb(response)

    async def get_field_signals(self, tenant_id: str, entry_ids: Sequence[str], query: str,
                                query_vector: np.ndarray, *, timeout_s: float | None = None) -> m.FieldSignals:
        """The per-field signals of these entries for `query` (GetFieldSignals; rows parallel to
        `entry_ids`, an entry the caller may not see a not-found row)."""
        ids = list(entry_ids)
        response = await call(self._stub.GetFieldSignals, ks_pb.GetFieldSignalsRequest(
            tenant_id=tenant_id, entry_ids=ids, query=query,
            query_vector=ks_pb.FloatVector(values=convert.query_vector_values(query_vector))),
            timeout=timeout_s or self.timeout_s, service=SERVICE)
        return convert.field_signals_from_pb(response, len(ids))

    async def score_keywords(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str] | m.AnalysedText], *,
                             timeout_s: float | None = None) -> m.KeywordScores:
        """BM25 of the keyword phrases for (title, text) pairs the store does not hold (or such
        texts already analysed), with the tenant's term statistics, and their richness (remote
        hits on the local scale)."""
        request = ks_pb.ScoreKeywordsRequest(tenant_id=tenant_id, **convert.phrases_to_pb(keywords, extra_keywords),
                                             texts=[convert.external_text_to_pb(t) for t in texts])
        response = await call(self._stub.ScoreKeywords, request, timeout=timeout_s or self.timeout_s, service=SERVICE)
        return convert.keyword_scores_from_pb(response, len(texts))

    async def topics(self, tenant_id: str, filters: m.SearchFilters, kind: str, *, k: int = 0, max_terms: int = 0,
                     examples: int = 0, period: str = "", date_field: str = "", topic_id: int | None = None,
                     query_vector: np.ndarray | None = None, limit: int = 0, max_points: int = 0,
                     timeout_s: float | None = None) -> dict:
        """The tenant's topics as the caller sees them (GetTopics): the JSON answer as a dict,
        {"status": "computing", "progress", ...} while they are being computed."""
        request = ks_pb.TopicsRequest(tenant_id=tenant_id, filters=convert.filters_to_pb(filters), kind=kind, k=k,
                                      max_terms=max_terms, examples=examples, period=period, date_field=date_field,
                                      limit=limit, max_points=max_points)
        if topic_id is not None:
            request.topic_id = topic_id
        if query_vector is not None:
            request.query_vector.CopyFrom(
                ks_pb.FloatVector(values=np.asarray(query_vector, np.float32).ravel().tolist()))
        response = await call(self._stub.GetTopics, request, timeout=timeout_s or self.timeout_s, service=SERVICE)
        return json.loads(response.result_json)

    async def put_persona(self, persona: Persona) -> Persona:
        response = await call(self._stub.PutPersona, convert.persona_to_pb(persona), timeout=self.timeout_s,
                              service=SERVICE)
        return convert.persona_from_pb(response)

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        response = await call(self._stub.GetPersona, pb.GetPersonaRequest(tenant_id=tenant_id, persona_id=persona_id),
                              timeout=self.timeout_s, service=SERVICE)
        return convert.persona_from_pb(response)

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        response = await call(self._stub.ListPersonas, pb.ListPersonasRequest(tenant_id=tenant_id),
                              timeout=self.timeout_s, service=SERVICE)
        return [convert.persona_from_pb(p) for p in response.personas]

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        response = await call(self._stub.PutRankingProfile, convert.profile_to_pb(profile),
                              timeout=self.timeout_s, service=SERVICE)
        return convert.profile_from_pb(response)

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile:
        response = await call(self._stub.GetRankingProfile, pb.GetRankingProfileRequest(
            tenant_id=tenant_id, persona_id=persona_id, name=name, version=version),
            timeout=self.timeout_s, service=SERVICE)
        return convert.profile_from_pb(response)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        response = await call(self._stub.ListRankingProfiles, pb.ListRankingProfilesRequest(
            tenant_id=tenant_id, persona_id=persona_id), timeout=self.timeout_s, service=SERVICE)
        return [convert.profile_from_pb(p) for p in response.profiles]

    async def record_feedback(self, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str, *, search_id: str = "") -> m.FeedbackAck:
        response = await call(self._stub.RecordFeedback, pb.Feedback(
            tenant_id=tenant_id, target=_TARGET_PB.get(target, pb.FEEDBACK_TARGET_UNSPECIFIED),
            target_id=target_id, helpful=helpful, user_id=user_id, search_id=search_id),
            timeout=self.timeout_s, service=SERVICE)
        return convert.feedback_ack_from_pb(response)

    async def record_search(self, record: m.SearchLogRecord) -> None:
        await call(self._stub.RecordSearch, convert.search_log_to_pb(record), timeout=self.timeout_s,
                   service=SERVICE)

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> m.SourceVotes:
        response = await call(self._stub.RecordSourceFeedback, ks_pb.SourceFeedback(
            tenant_id=tenant_id, source_id=source_id, target_id=target_id, helpful=helpful, user_id=user_id,
            search_id=search_id), timeout=self.timeout_s, service=SERVICE)
        return convert.source_votes_from_pb(response)

    async def source_votes(self, tenant_id: str) -> list[m.SourceVotes]:
        response = await call(self._stub.GetSourceVotes, ks_pb.GetSourceVotesRequest(tenant_id=tenant_id),
                              timeout=self.timeout_s, service=SERVICE)
        return [convert.source_votes_from_pb(v) for v in response.sources]

    async def store_status(self) -> StoreStatus:
        """The store's condition: "ok" or "degraded", each tenant's storage problem (operators)."""
        response = await call(self._stub.GetStoreStatus, ks_pb.StoreStatusRequest(), timeout=self.timeout_s,
                              service=SERVICE)
        return convert.store_status_from_pb(response)

    async def check_tenant(self, tenant_id: str, *, repair: bool = True) -> TenantCheck:
        """The full consistency check of a tenant, repairing what it can when `repair` (operators)."""
        response = await call(self._stub.CheckTenant, ks_pb.CheckTenantRequest(tenant_id=tenant_id, repair=repair),
                              timeout=self.ingest_timeout_s, service=SERVICE)
        return convert.tenant_check_from_pb(response)

    async def backup_tenants(self, tenant_ids: Sequence[str], directory: str, final_directory: str = "",
                             *, timeout_s: float | None = None) -> list[dict]:
        """Online snapshots of tenants (every tenant when empty) into `directory` on the store's
        host (operators, embedded backend): one dict per tenant (file, sha256, bytes, entries, seq,
        database_id, point_unix)."""
        response = await call(self._stub.BackupTenants, ks_pb.BackupTenantsRequest(
            tenant_ids=list(tenant_ids), directory=directory, final_directory=final_directory),
            timeout=timeout_s or self.ingest_timeout_s, service=SERVICE)
        return [convert.snapshot_from_pb(s) for s in response.snapshots]

    async def restore_tenant(self, tenant_id: str, file: str, sha256: str, *,
                             timeout_s: float | None = None) -> tuple[dict, float]:
        """Replace a tenant's database by a verified snapshot file (operators, embedded backend):
        (what is now served, seconds the tenant was unavailable)."""
        response = await call(self._stub.RestoreTenant, ks_pb.RestoreTenantRequest(
            tenant_id=tenant_id, file=file, sha256=sha256), timeout=timeout_s or self.ingest_timeout_s,
            service=SERVICE)
        return convert.snapshot_from_pb(response.restored), response.unavailable_seconds

    async def export_tenant(self, tenant_id: str, backup_key: bytes, *, timeout_s: float | None = None
                            ) -> AsyncIterator[bytes]:
        """ExportTenant (operators): the tenant's archive file, MAC'd with `backup_key`, in chunks."""
        stream = self._stub.ExportTenant(ks_pb.ExportTenantRequest(tenant_id=tenant_id, backup_key=backup_key),
                                         timeout=timeout_s or self.ingest_timeout_s)
        try:
            async for chunk in stream:
                yield chunk.data
        except grpc.RpcError as err:
            raise from_grpc_error(err, service=SERVICE) from None

    async def import_tenant(self, chunks: AsyncIterable[bytes], backup_key: bytes, *, as_tenant: str = "",
                            replace: bool = False, keep_groups: bool = False, with_user_data: bool = False,
                            reembed: bool = False, timeout_s: float | None = None) -> ImportReport:
        """ImportTenant (operators): the archive's `chunks` streamed in, verified with `backup_key`
        (the key of the stack that made it) and imported all or nothing; its counts."""
        async def requests() -> AsyncIterator[ks_pb.ImportTenantRequest]:
            yield ks_pb.ImportTenantRequest(options=ks_pb.ImportTenantOptions(
                backup_key=backup_key, as_tenant=as_tenant, replace=replace, keep_groups=keep_groups,
                with_user_data=with_user_data, reembed=reembed))
            async for chunk in chunks:
                yield ks_pb.ImportTenantRequest(data=chunk)

        try:
            r = await self._stub.ImportTenant(requests(), timeout=timeout_s or self.ingest_timeout_s)
        except grpc.RpcError as err:
            raise from_grpc_error(err, service=SERVICE) from None
        return ImportReport(r.tenant_id, r.artifacts, r.entries, r.profiles, r.personas, r.user_records)
