"""protobuf <-> KnowledgeStore core types. The only KnowledgeStore module (with grpc_api and
client) that imports generated code."""
from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from ranking.features import MAX_POSITIONS
from ranking.profile import RankingProfile
from services.knowledge_store.models import Problem, StoreStatus, TenantCheck
from services.knowledge_store.personas import Persona
from shared import records as m
from shared.errors import InvalidArgument, UpstreamFailed

_FUSION = {pb.FUSION_METHOD_CONVEX: "convex", pb.FUSION_METHOD_RRF: "rrf",
           pb.FUSION_METHOD_CONVEX_MINMAX: "convex_minmax", pb.FUSION_METHOD_ADAPTIVE: "adaptive"}
_FUSION_PB = {v: k for k, v in _FUSION.items()}
_RECENCY = {pb.RECENCY_MODE_AUTO: "auto", pb.RECENCY_MODE_ALWAYS: "always", pb.RECENCY_MODE_NEVER: "never"}
_RECENCY_PB = {v: k for k, v in _RECENCY.items()}


def fusion_from_pb(value: int) -> str:
    return _FUSION.get(value, "")


def fusion_to_pb(value: str) -> int:
    return _FUSION_PB.get(value, pb.FUSION_METHOD_UNSPECIFIED)


def recency_from_pb(value: int) -> str:
    return _RECENCY.get(value, "")


def recency_to_pb(value: str) -> int:
    return _RECENCY_PB.get(value, pb.RECENCY_MODE_UNSPECIFIED)


def artifact_from_pb(a: pb.ArtifactMetadata) -> m.ArtifactMeta:
    return m.ArtifactMeta(**m.artifact_values(a))


def artifact_to_pb(a: m.ArtifactMeta) -> pb.ArtifactMetadata:
    return pb.ArtifactMetadata(**m.artifact_values(a))


def document_from_pb(d: ks_pb.Document) -> m.DocumentIn:
    return m.DocumentIn(artifact=artifact_from_pb(d.artifact), content=d.content,
                        content_type=d.content_type or "text/plain", truncated=d.truncated)


def document_to_pb(d: m.DocumentIn) -> ks_pb.Document:
    return ks_pb.Document(artifact=artifact_to_pb(d.artifact), content=d.content, content_type=d.content_type,
                          truncated=d.truncated)


def filters_from_pb(f: pb.KnowledgeSearchFilters) -> m.SearchFilters:
    return m.SearchFilters(**m.artifact_values(f, m.FILTER_FIELDS))


def phrases_to_pb(keywords: m.Keywords, extra_keywords: Sequence[str] = ()) -> dict[str, Any]:
    """A keyword call's phrases as the request's `keywords` and `extra_keywords` fields."""
    first, extra = m.query_phrases(keywords, extra_keywords).wire()
    return {"keywords": first, "extra_keywords": extra}


def phrases_from_pb(request: Any) -> m.QueryPhrases:
    """The phrases of a request with `keywords` and `extra_keywords` fields (checked by the
    store's keyword rules, keywords.py)."""
    return m.QueryPhrases.from_wire(request.keywords, list(request.extra_keywords))


def filters_to_pb(f: m.SearchFilters) -> pb.KnowledgeSearchFilters:
    return pb.KnowledgeSearchFilters(**m.artifact_values(f, m.FILTER_FIELDS))


def summary_to_pb(a: m.ArtifactSummary) -> pb.ArtifactMetadataSummary:
    return pb.ArtifactMetadataSummary(**m.artifact_values(a, m.SUMMARY_FIELDS))


def summary_from_pb(a: pb.ArtifactMetadataSummary) -> m.ArtifactSummary:
    return m.ArtifactSummary(**m.artifact_values(a, m.SUMMARY_FIELDS))


#: An entry's fields (the record's, in order; the proto's PersonaKnowledgeEntry has the same, all scalar),
#: read off either at once: per hit, so no per-field loop.
_ENTRY_FIELDS = tuple(f.name for f in dataclasses.fields(m.Entry))
_entry_values = operator.attrgetter(*_ENTRY_FIELDS)


def entry_to_pb(e: m.Entry) -> pb.PersonaKnowledgeEntry:
    return pb.PersonaKnowledgeEntry(**dict(zip(_ENTRY_FIELDS, _entry_values(e))))


def entry_from_pb(e: pb.PersonaKnowledgeEntry) -> m.Entry:
    return m.Entry(*_entry_values(e))


def hit_to_pb(h: m.Hit) -> ks_pb.ScoredEntry:
    return ks_pb.ScoredEntry(entry=entry_to_pb(h.entry), artifact=summary_to_pb(h.artifact),
                             score=h.score, rank=h.rank)


def hit_from_pb(h: ks_pb.ScoredEntry) -> m.Hit:
    return m.Hit(entry=entry_from_pb(h.entry), artifact=summary_from_pb(h.artifact), score=h.score, rank=h.rank)


def query_vectors_from_pb(vectors) -> list[np.ndarray]:
    """One float32 row per FloatVector, lengths unchecked (the core's validation names a wrong
    one); straight into numpy, not through a list of Python floats (~5× faster per query)."""
    return [np.asarray(v.values, np.float32) for v in vectors]


def columns_to_pb(c: m.CandidateColumns) -> ks_pb.CandidateColumns:
    return ks_pb.CandidateColumns(
        entry_ids=c.entry_ids, artifact_ids=c.artifact_ids, scores=c.scores.tolist(),
        timestamps_unix=c.timestamps_unix.tolist(), richness=c.richness.tolist(),
        reputation_prior=c.reputation_prior.tolist(), feedback_helpful=c.feedback_helpful.tolist(),
        feedback_unhelpful=c.feedback_unhelpful.tolist(),
        row_ids=c.row_ids.tolist())


def columns_from_pb(c: ks_pb.CandidateColumns) -> m.CandidateColumns:
    n = len(c.entry_ids)
    columns = (c.artifact_ids, c.scores, c.timestamps_unix, c.richness, c.reputation_prior,
               c.feedback_helpful, c.feedback_unhelpful)
    if any(len(col) != n for col in columns) or len(c.row_ids) not in (0, n):
        raise UpstreamFailed(f"candidate columns of different lengths: {[n, *map(len, columns), len(c.row_ids)]}")
    return m.CandidateColumns(
        entry_ids=tuple(c.entry_ids), artifact_ids=tuple(c.artifact_ids),
        scores=np.fromiter(c.scores, np.float32, n), timestamps_unix=np.fromiter(c.timestamps_unix, np.int64, n),
        richness=np.fromiter(c.richness, np.float32, n),
        reputation_prior=np.fromiter(c.reputation_prior, np.float32, n),
        feedback_helpful=np.fromiter(c.feedback_helpful, np.int32, n),
        feedback_unhelpful=np.fromiter(c.feedback_unhelpful, np.int32, n),
        row_ids=np.fromiter(c.row_ids, np.int64, len(c.row_ids)))


def retrieval_request_to_pb(r: m.RetrievalRequest) -> ks_pb.RetrieveRequest:
    vectors = [] if r.vectors is None else [ks_pb.FloatVector(values=row.tolist())
                                            for row in np.atleast_2d(np.asarray(r.vectors, np.float32))]
    return ks_pb.RetrieveRequest(
        tenant_id=r.tenant_id, **phrases_to_pb(r.phrases), top_k=r.top_k, filters=filters_to_pb(r.filters),
        query_vectors=vectors, keyword_leg=r.keyword, complete_scores=r.complete,
        complete_row_ids=np.asarray(r.complete_rows, np.int64).tolist(), hits=r.hits,
        feedback_expansion=r.feedback_expansion)


def retrieval_request_from_pb(q: ks_pb.RetrieveRequest) -> m.RetrievalRequest:
    return m.RetrievalRequest(
        tenant_id=q.tenant_id, phrases=phrases_from_pb(q), top_k=q.top_k, filters=filters_from_pb(q.filters),
        vectors=query_vectors_from_pb(q.query_vectors) if q.query_vectors else None, keyword=q.keyword_leg,
        complete=q.complete_scores, complete_rows=tuple(q.complete_row_ids), hits=q.hits,
        feedback_expansion=q.feedback_expansion)


def retrieval_to_pb(r: m.Retrieval) -> ks_pb.RetrieveResponse:
    response = ks_pb.RetrieveResponse(keyword_query_terms=r.terms, degraded=r.degraded, data_id=r.data_id)
    if r.keyword is not None:
        response.keyword_columns.CopyFrom(columns_to_pb(r.keyword))
    response.dense_columns.extend(columns_to_pb(c) for c in r.dense or ())
    if r.completion is not None:
        response.completion.CopyFrom(completion_to_pb(r.completion))
    response.keyword_hits.extend(hit_to_pb(h) for h in r.keyword_hits or ())
    response.dense_hits.extend(ks_pb.VectorHits(hits=[hit_to_pb(h) for h in hits]) for hits in r.dense_hits or ())
    return response


def retrieval_from_pb(q: m.RetrievalRequest, r: ks_pb.RetrieveResponse) -> m.Retrieval:
    """The answer to `q`: a leg `q` did not ask for is None."""
    dense = q.vectors is not None
    return m.Retrieval(
        keyword=columns_from_pb(r.keyword_columns) if q.keyword and not q.hits else None,
        terms=tuple(r.keyword_query_terms),
        dense=tuple(columns_from_pb(c) for c in r.dense_columns) if dense and not q.hits else None,
        completion=completion_from_pb(r.completion) if q.complete else None,
        keyword_hits=tuple(hit_from_pb(h) for h in r.keyword_hits) if q.keyword and q.hits else None,
        dense_hits=tuple(tuple(hit_from_pb(h) for h in v.hits) for v in r.dense_hits) if dense and q.hits else None,
        degraded=r.degraded, data_id=r.data_id)


def completion_to_pb(c: m.ScoreCompletion) -> ks_pb.ScoreCompletion:
    stats = c.keyword_stats
    return ks_pb.ScoreCompletion(row_ids=c.row_ids.tolist(), dense=c.dense.tolist(), bm25=c.bm25.tolist(),
                                 query_terms=stats.terms, document_frequency=stats.document_frequency,
                                 keyword_entries=stats.entries)


def completion_from_pb(c: ks_pb.ScoreCompletion) -> m.ScoreCompletion:
    n = len(c.row_ids)
    if len(c.dense) != n or len(c.bm25) != n or len(c.document_frequency) != len(c.query_terms):
        raise UpstreamFailed(f"score completion columns of different lengths: rows {n}, dense {len(c.dense)}, "
                             f"bm25 {len(c.bm25)}, terms {len(c.query_terms)}, "
                             f"document frequencies {len(c.document_frequency)}")
    return m.ScoreCompletion(
        row_ids=np.fromiter(c.row_ids, np.int64, n), dense=np.fromiter(c.dense, np.float32, n),
        bm25=np.fromiter(c.bm25, np.float32, n),
        keyword_stats=m.KeywordStats(tuple(c.query_terms), tuple(c.document_frequency), c.keyword_entries))


def external_text_to_pb(t: tuple[str, str] | m.AnalysedText) -> ks_pb.ExternalText:
    if isinstance(t, m.AnalysedText):
        return ks_pb.ExternalText(analyser=t.analyser, title_terms=t.title_terms, body_terms=t.body_terms,
                                  richness=t.richness)
    title, text = t
    return ks_pb.ExternalText(title=title, text=text)


def external_text_from_pb(t: ks_pb.ExternalText) -> tuple[str, str] | m.AnalysedText:
    """A text to score: analysed when it names an analyser (the store checks it is its own)."""
    if t.analyser:
        return m.AnalysedText(t.analyser, t.title_terms, t.body_terms, float(t.richness))
    return (t.title, t.text)


def peer_entries_from_pb(r: ks_pb.GetEntriesResponse) -> m.PeerEntries:
    hits = [hit_from_pb(h) for h in r.entries]
    if len(r.vectors) != len(hits) or len(r.terms) != len(hits):
        raise UpstreamFailed(f"entries {len(hits)}, vectors {len(r.vectors)} and terms {len(r.terms)} differ")
    return m.PeerEntries(hits, [np.asarray(v.values, np.float32) if len(v.values) else None for v in r.vectors],
                         [(t.title, t.body) if t.title or t.body else None for t in r.terms])


def query_vector_values(vector) -> list[float]:
    """One query vector as the wire's values (InvalidArgument naming `query_vector` unless 1-D)."""
    arr = np.asarray(vector, np.float32)
    if arr.ndim != 1:
        raise InvalidArgument("query_vector", f"expected one vector, got shape {arr.shape}")
    return arr.tolist()


def field_signals_to_pb(f: m.FieldSignals) -> ks_pb.GetFieldSignalsResponse:
    """FieldSignals on the wire: matrices flat (row-major), positions sparse (the hits only)."""
    return ks_pb.GetFieldSignalsResponse(
        query_terms=list(f.query_terms), idf=f.idf.tolist(), avg_title_length=f.avg_length[0],
        avg_body_length=f.avg_length[1], avg_doc_length=f.avg_length[2], found=f.found.tolist(),
        title_tf=f.title_tf.ravel().tolist(), body_tf=f.body_tf.ravel().tolist(),
        title_length=f.title_length.tolist(), body_length=f.body_length.tolist(),
        dense_title=f.dense_title.tolist(), chunk_position=f.chunk_position.tolist(),
        title_positions=_positions_to_pb(f.title_positions), body_positions=_positions_to_pb(f.body_positions))


def _positions_to_pb(matrix: np.ndarray) -> ks_pb.FieldPositions:
    rows, cols = np.nonzero(matrix >= 0)
    return ks_pb.FieldPositions(width=int(matrix.shape[1]), rows=rows.tolist(), positions=cols.tolist(),
                                terms=matrix[rows, cols].tolist())


def field_signals_from_pb(r: ks_pb.GetFieldSignalsResponse, expected: int) -> m.FieldSignals:
    """The answer for `expected` entry ids, its sizes checked (UpstreamFailed otherwise)."""
    n, t = expected, len(r.query_terms)
    sizes = {"found": (len(r.found), n), "idf": (len(r.idf), t), "title_tf": (len(r.title_tf), n * t),
             "body_tf": (len(r.body_tf), n * t), "title_length": (len(r.title_length), n),
             "body_length": (len(r.body_length), n), "dense_title": (len(r.dense_title), n),
             "chunk_position": (len(r.chunk_position), n)}
    wrong = [f"{name} {got} (expected {want})" for name, (got, want) in sizes.items() if got != want]
    if wrong:
        raise UpstreamFailed(f"field signals of {n} entries and {t} terms have wrong sizes: {', '.join(wrong)}")
    f32 = np.float32
    return m.FieldSignals(
        query_terms=tuple(r.query_terms), idf=np.asarray(r.idf, f32),
        avg_length=(float(r.avg_title_length), float(r.avg_body_length), float(r.avg_doc_length)),
        found=np.asarray(r.found, bool), title_tf=np.asarray(r.title_tf, f32).reshape(n, t),
        body_tf=np.asarray(r.body_tf, f32).reshape(n, t), title_length=np.asarray(r.title_length, f32),
        body_length=np.asarray(r.body_length, f32), title_positions=_positions_from_pb(r.title_positions, n, t),
        body_positions=_positions_from_pb(r.body_positions, n, t), dense_title=np.asarray(r.dense_title, f32),
        chunk_position=np.asarray(r.chunk_position, f32))


def _positions_from_pb(p: ks_pb.FieldPositions, n: int, t: int) -> np.ndarray:
    rows, cols, terms = (np.asarray(p.rows, np.int64), np.asarray(p.positions, np.int64),
                         np.asarray(p.terms, np.int32))
    width = int(p.width)
    if not (len(rows) == len(cols) == len(terms)) or width < 0 or width > MAX_POSITIONS or (len(rows) and (
            rows.min() < 0 or rows.max() >= n or cols.min() < 0 or cols.max() >= width
            or terms.min() < 0 or terms.max() >= t)):
        raise UpstreamFailed(f"field signals: positions out of range ({len(rows)} rows, {len(cols)} positions, "
                             f"{len(terms)} terms, width {width}, {n} entries, {t} terms)")
    out = np.full((n, width), -1, np.int32)
    out[rows, cols] = terms
    return out


def keyword_scores_to_pb(k: m.KeywordScores) -> ks_pb.ScoreKeywordsResponse:
    stats = k.keyword_stats
    owners = [i for i, pieces in enumerate(k.chunks) for _ in pieces]
    return ks_pb.ScoreKeywordsResponse(bm25=k.bm25.tolist(), richness=k.richness.tolist(), query_terms=stats.terms,
                                       document_frequency=stats.document_frequency,
                                       keyword_entries=stats.entries,
                                       chunk_texts=[t for pieces in k.chunks for t in pieces], chunk_owner=owners)


def keyword_scores_from_pb(r: ks_pb.ScoreKeywordsResponse, expected: int) -> m.KeywordScores:
    if len(r.bm25) != expected or len(r.richness) != expected or len(r.document_frequency) != len(r.query_terms):
        raise UpstreamFailed(f"keyword scores of different lengths: texts {expected}, bm25 {len(r.bm25)}, "
                             f"richness {len(r.richness)}, terms {len(r.query_terms)}, "
                             f"document frequencies {len(r.document_frequency)}")
    if len(r.chunk_texts) != len(r.chunk_owner) or any(not 0 <= o < expected for o in r.chunk_owner):
        raise UpstreamFailed(f"keyword scores: {len(r.chunk_texts)} chunk texts for {len(r.chunk_owner)} owners "
                             f"of {expected} texts")
    chunks: list[list[str]] = [[] for _ in range(expected)]
    for text, owner in zip(r.chunk_texts, r.chunk_owner):
        chunks[owner].append(text)
    return m.KeywordScores(bm25=np.fromiter(r.bm25, np.float32, expected),
                           richness=np.fromiter(r.richness, np.float32, expected),
                           keyword_stats=m.KeywordStats(tuple(r.query_terms), tuple(r.document_frequency),
                                                        r.keyword_entries),
                           chunks=tuple(tuple(c) for c in chunks) if r.chunk_texts else ())


def ingest_report_to_pb(r: m.IngestReport) -> ks_pb.IngestDocumentsResponse:
    return ks_pb.IngestDocumentsResponse(
        results=[ks_pb.IngestResult(artifact_id=x.artifact_id, entries_written=x.entries_written,
                                    entries_replaced=x.entries_replaced, index=x.index) for x in r.results],
        total_entries=r.total_entries, embed_seconds=r.embed_seconds, commit_seconds=r.commit_seconds,
        rejected=[ks_pb.IngestRejection(index=x.index, artifact_id=x.artifact_id, field=x.field, reason=x.reason)
                  for x in r.rejected],
    )


def ingest_report_from_pb(r: ks_pb.IngestDocumentsResponse) -> m.IngestReport:
    return m.IngestReport(
        results=tuple(m.IngestResult(artifact_id=x.artifact_id, entries_written=x.entries_written,
                                     entries_replaced=x.entries_replaced, index=x.index) for x in r.results),
        total_entries=r.total_entries, embed_seconds=r.embed_seconds, commit_seconds=r.commit_seconds,
        rejected=tuple(m.IngestRejection(x.index, x.artifact_id, x.field, x.reason) for x in r.rejected),
    )


def ingest_request_to_pb(tenant_id: str, persona_id: str, documents: Sequence[m.DocumentIn],
                         commit_valid: bool, key: str) -> ks_pb.IngestDocumentsRequest:
    return ks_pb.IngestDocumentsRequest(tenant_id=tenant_id, persona_id=persona_id, commit_valid=commit_valid,
                                        documents=[document_to_pb(d) for d in documents], idempotency_key=key)


def ingest_event_to_pb(e: m.IngestProgress | m.IngestReport) -> ks_pb.IngestEvent:
    if isinstance(e, m.IngestProgress):
        return ks_pb.IngestEvent(progress=ks_pb.IngestProgress(entries_embedded=e.entries_embedded,
                                                               entries_expected=e.entries_expected))
    return ks_pb.IngestEvent(report=ingest_report_to_pb(e))


def ingest_event_from_pb(e: ks_pb.IngestEvent) -> m.IngestProgress | m.IngestReport:
    if e.HasField("progress"):
        return m.IngestProgress(e.progress.entries_embedded, e.progress.entries_expected)
    return ingest_report_from_pb(e.report)


def stats_to_pb(s: m.TenantStats) -> ks_pb.TenantStats:
    return ks_pb.TenantStats(
        tenant_id=s.tenant_id, artifacts=s.artifacts, entries=s.entries, vectors=s.vectors,
        keyword_docs=s.keyword_docs, last_indexed_unix=s.last_indexed_unix, index_kind=s.index_kind,
        dimension=s.dimension,
        sources=[ks_pb.SourceStats(source_id=x.source_id, source_type=x.source_type, artifacts=x.artifacts,
                                   entries=x.entries, last_indexed_unix=x.last_indexed_unix,
                                   visibility_groups=list(x.visibility_groups), tags=list(x.tags))
                 for x in s.sources],
    )


def stats_from_pb(s: ks_pb.TenantStats) -> m.TenantStats:
    return m.TenantStats(
        tenant_id=s.tenant_id, artifacts=s.artifacts, entries=s.entries, vectors=s.vectors,
        keyword_docs=s.keyword_docs, last_indexed_unix=s.last_indexed_unix, index_kind=s.index_kind,
        dimension=s.dimension,
        sources=tuple(m.SourceStats(source_id=x.source_id, source_type=x.source_type, artifacts=x.artifacts,
                                    entries=x.entries, last_indexed_unix=x.last_indexed_unix,
                                    visibility_groups=tuple(x.visibility_groups), tags=tuple(x.tags))
                      for x in s.sources),
    )


def profile_to_pb(p: RankingProfile) -> pb.RankingProfile:
    return pb.RankingProfile(
        tenant_id=p.tenant_id, persona_id=p.persona_id, name=p.name, version=p.version,
        relevancy_weight=p.relevancy_weight, recency_weight=p.recency_weight,
        richness_weight=p.richness_weight, reputation_weight=p.reputation_weight,
        fusion_method=fusion_to_pb(p.fusion_method), dense_weight=p.dense_weight,
        recency_mode=recency_to_pb(p.recency_mode), recency_half_life_days=p.recency_half_life_days,
        reputation_prior_strength=p.reputation_prior_strength, updated_unix=p.updated_unix,
        is_default=p.is_default, reranker=p.reranker, rerank_top_n=p.rerank_top_n, rerank_weight=p.rerank_weight,
        model_sha256=p.model_sha256, feature_version=p.feature_version, feedback_expansion=p.feedback_expansion,
        fold_duplicates=p.fold_duplicates,
    )


def profile_from_pb(p: pb.RankingProfile) -> RankingProfile:
    defaults = RankingProfile(tenant_id=p.tenant_id)
    return RankingProfile(
        tenant_id=p.tenant_id, persona_id=p.persona_id, name=p.name or "default", version=p.version,
        relevancy_weight=p.relevancy_weight, recency_weight=p.recency_weight,
        richness_weight=p.richness_weight, reputation_weight=p.reputation_weight,
        fusion_method=fusion_from_pb(p.fusion_method) or defaults.fusion_method,
        dense_weight=p.dense_weight if p.HasField("dense_weight") else defaults.dense_weight,
        recency_mode=recency_from_pb(p.recency_mode) or defaults.recency_mode,
        recency_half_life_days=p.recency_half_life_days or defaults.recency_half_life_days,
        reputation_prior_strength=p.reputation_prior_strength or defaults.reputation_prior_strength,
        updated_unix=p.updated_unix, is_default=p.is_default, reranker=p.reranker,
        rerank_top_n=p.rerank_top_n or defaults.rerank_top_n,
        rerank_weight=p.rerank_weight if p.HasField("rerank_weight") else defaults.rerank_weight,
        model_sha256=p.model_sha256, feature_version=p.feature_version, feedback_expansion=p.feedback_expansion,
        fold_duplicates=p.fold_duplicates,
    )


def feedback_ack_to_pb(a: m.FeedbackAck, reputation: float = 0.0) -> pb.FeedbackAck:
    return pb.FeedbackAck(artifact_id=a.artifact_id, feedback_helpful=a.feedback_helpful,
                          feedback_unhelpful=a.feedback_unhelpful, reputation=reputation,
                          reputation_prior=a.reputation_prior)


def feedback_ack_from_pb(a: pb.FeedbackAck) -> m.FeedbackAck:
    return m.FeedbackAck(artifact_id=a.artifact_id, feedback_helpful=a.feedback_helpful,
                         feedback_unhelpful=a.feedback_unhelpful, reputation_prior=a.reputation_prior)


def store_status_to_pb(s: StoreStatus) -> ks_pb.StoreStatus:
    return ks_pb.StoreStatus(
        state=s.state, data_dir=s.data_dir, read_only=s.read_only, free_bytes=s.free_bytes,
        total_bytes=s.total_bytes, repaired_rows=s.repaired_rows, open_tenants=s.open_tenants,
        open_tenant_bytes=s.open_tenant_bytes, memory_budget_bytes=s.memory_budget_bytes,
        tenants=[ks_pb.OpenTenant(tenant_id=t, bytes=b) for t, b in s.tenants], scrub=s.scrub,
        problems=[ks_pb.StoreProblem(tenant_id=p.tenant_id, kind=p.kind, message=p.message,
                                     since_unix=p.since_unix) for p in s.problems])


def store_status_from_pb(s: ks_pb.StoreStatus) -> StoreStatus:
    return StoreStatus(
        state=s.state, data_dir=s.data_dir, read_only=s.read_only, free_bytes=s.free_bytes,
        total_bytes=s.total_bytes, repaired_rows=s.repaired_rows, open_tenants=s.open_tenants,
        open_tenant_bytes=s.open_tenant_bytes, memory_budget_bytes=s.memory_budget_bytes,
        tenants=tuple((t.tenant_id, t.bytes) for t in s.tenants), scrub=s.scrub,
        problems=tuple(Problem(p.tenant_id, p.kind, p.message, p.since_unix) for p in s.problems))


_CHECK_COUNTS = ("entries", "vectors", "keyword_rows", "vectors_indexed", "keyword_rows_indexed", "missing_vectors",
                 "malformed_vectors", "missing_keyword_rows", "orphan_vectors", "orphan_keyword_rows",
                 "entries_without_artifact", "repaired_vectors", "repaired_keyword_rows", "removed_orphans",
                 "corrupt_rows", "unverified_rows", "missing_entries", "changed_vectors", "keyword_stats_off")


def tenant_check_to_pb(c: TenantCheck) -> ks_pb.TenantCheck:
    return ks_pb.TenantCheck(tenant_id=c.tenant_id, integrity_errors=list(c.integrity_errors), deferred=c.deferred,
                             consistent=c.consistent, **{name: getattr(c, name) for name in _CHECK_COUNTS})


def tenant_check_from_pb(c: ks_pb.TenantCheck) -> TenantCheck:
    return TenantCheck(tenant_id=c.tenant_id, integrity_errors=tuple(c.integrity_errors), deferred=c.deferred,
                       **{name: getattr(c, name) for name in _CHECK_COUNTS})


def persona_to_pb(p: Persona) -> pb.Persona:
    return pb.Persona(tenant_id=p.tenant_id, persona_id=p.persona_id, display_name=p.display_name,
                      system_prompt=p.system_prompt, allowed_tools=list(p.allowed_tools),
                      allowed_sources=list(p.allowed_sources), llm_model=p.llm_model,
                      updated_unix=p.updated_unix, tools_disabled=p.tools_disabled)


def persona_from_pb(m_: pb.Persona) -> Persona:
    return Persona(tenant_id=m_.tenant_id, persona_id=m_.persona_id, display_name=m_.display_name,
                   system_prompt=m_.system_prompt, allowed_tools=tuple(m_.allowed_tools),
                   allowed_sources=tuple(m_.allowed_sources), llm_model=m_.llm_model, updated_unix=m_.updated_unix,
                   tools_disabled=m_.tools_disabled)


def topics_json(answer: dict[str, Any]) -> str:
    """A topic answer (any backend's `topics`) as the compact JSON GetTopics carries."""
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False)


_SNAPSHOT_FIELDS = ("tenant_id", "file", "sha256", "bytes", "entries", "seq", "database_id", "point_unix")


def snapshot_to_pb(s: Any) -> ks_pb.TenantSnapshot:
    """A tenant snapshot (embedded/backup.py's TenantSnapshot, or the dict `snapshot_from_pb` makes)."""
    get = s.get if isinstance(s, dict) else lambda name: getattr(s, name)
    return ks_pb.TenantSnapshot(**{name: get(name) for name in _SNAPSHOT_FIELDS})


def snapshot_from_pb(s: ks_pb.TenantSnapshot) -> dict[str, Any]:
    """A snapshot as the plain dict a backup manifest records."""
    return {name: getattr(s, name) for name in _SNAPSHOT_FIELDS}


def search_log_to_pb(r: m.SearchLogRecord) -> ks_pb.SearchLogRecord:
    return ks_pb.SearchLogRecord(tenant_id=r.tenant_id, search_id=r.search_id, user_id=r.user_id,
                                 created_unix=r.created_unix, query_sha256=r.query_sha256,
                                 items=[ks_pb.SearchLogItem(entry_id=i.entry_id, artifact_id=i.artifact_id, rank=i.rank)
                                        for i in r.items])


def search_log_from_pb(r: ks_pb.SearchLogRecord) -> m.SearchLogRecord:
    return m.SearchLogRecord(r.tenant_id, r.search_id, r.user_id, r.created_unix, r.query_sha256,
                             tuple(m.SearchLogItem(i.entry_id, i.artifact_id, i.rank) for i in r.items))


def source_votes_to_pb(v: m.SourceVotes) -> ks_pb.SourceVotes:
    return ks_pb.SourceVotes(source_id=v.source_id, helpful=v.helpful, unhelpful=v.unhelpful)


def source_votes_from_pb(v: ks_pb.SourceVotes) -> m.SourceVotes:
    return m.SourceVotes(v.source_id, v.helpful, v.unhelpful)
