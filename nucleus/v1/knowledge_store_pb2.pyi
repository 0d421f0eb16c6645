from nucleus.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExportTenantRequest(_message.Message):
    __slots__ = ("tenant_id", "backup_key")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    BACKUP_KEY_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    backup_key: bytes
    def __init__(self, tenant_id: _Optional[str] = ..., backup_key: _Optional[bytes] = ...) -> None: ...

class ArchiveChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ImportTenantOptions(_message.Message):
    __slots__ = ("backup_key", "as_tenant", "replace", "keep_groups", "with_user_data", "reembed")
    BACKUP_KEY_FIELD_NUMBER: _ClassVar[int]
    AS_TENANT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    KEEP_GROUPS_FIELD_NUMBER: _ClassVar[int]
    WITH_USER_DATA_FIELD_NUMBER: _ClassVar[int]
    REEMBED_FIELD_NUMBER: _ClassVar[int]
    backup_key: bytes
    as_tenant: str
    replace: bool
    keep_groups: bool
    with_user_data: bool
    reembed: bool
    def __init__(self, backup_key: _Optional[bytes] = ..., as_tenant: _Optional[str] = ..., replace: _Optional[bool] = ..., keep_groups: _Optional[bool] = ..., with_user_data: _Optional[bool] = ..., reembed: _Optional[bool] = ...) -> None: ...

class ImportTenantRequest(_message.Message):
    __slots__ = ("options", "data")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    options: ImportTenantOptions
    data: bytes
    def __init__(self, options: _Optional[_Union[ImportTenantOptions, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ImportTenantResponse(_message.Message):
    __slots__ = ("tenant_id", "artifacts", "entries", "profiles", "personas", "user_records")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    PERSONAS_FIELD_NUMBER: _ClassVar[int]
    USER_RECORDS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    artifacts: int
    entries: int
    profiles: int
    personas: int
    user_records: int
    def __init__(self, tenant_id: _Optional[str] = ..., artifacts: _Optional[int] = ..., entries: _Optional[int] = ..., profiles: _Optional[int] = ..., personas: _Optional[int] = ..., user_records: _Optional[int] = ...) -> None: ...

class BackupTenantsRequest(_message.Message):
    __slots__ = ("tenant_ids", "directory", "final_directory")
    TENANT_IDS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    FINAL_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    tenant_ids: _containers.RepeatedScalarFieldContainer[str]
    directory: str
    final_directory: str
    def __init__(self, tenant_ids: _Optional[_Iterable[str]] = ..., directory: _Optional[str] = ..., final_directory: _Optional[str] = ...) -> None: ...

class TenantSnapshot(_message.Message):
    __slots__ = ("tenant_id", "file", "sha256", "bytes", "entries", "seq", "database_id", "point_unix")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    POINT_UNIX_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    file: str
    sha256: str
    bytes: int
    entries: int
    seq: int
    database_id: str
    point_unix: float
    def __init__(self, tenant_id: _Optional[str] = ..., file: _Optional[str] = ..., sha256: _Optional[str] = ..., bytes: _Optional[int] = ..., entries: _Optional[int] = ..., seq: _Optional[int] = ..., database_id: _Optional[str] = ..., point_unix: _Optional[float] = ...) -> None: ...

class BackupTenantsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[TenantSnapshot]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[TenantSnapshot, _Mapping]]] = ...) -> None: ...

class RestoreTenantRequest(_message.Message):
    __slots__ = ("tenant_id", "file", "sha256")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    file: str
    sha256: str
    def __init__(self, tenant_id: _Optional[str] = ..., file: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class RestoreTenantResponse(_message.Message):
    __slots__ = ("restored", "unavailable_seconds")
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    restored: TenantSnapshot
    unavailable_seconds: float
    def __init__(self, restored: _Optional[_Union[TenantSnapshot, _Mapping]] = ..., unavailable_seconds: _Optional[float] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("artifact", "content", "content_type", "truncated")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    artifact: _common_pb2.ArtifactMetadata
    content: str
    content_type: str
    truncated: str
    def __init__(self, artifact: _Optional[_Union[_common_pb2.ArtifactMetadata, _Mapping]] = ..., content: _Optional[str] = ..., content_type: _Optional[str] = ..., truncated: _Optional[str] = ...) -> None: ...

class IngestDocumentsRequest(_message.Message):
    __slots__ = ("tenant_id", "persona_id", "documents", "commit_valid", "idempotency_key")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_VALID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    commit_valid: bool
    idempotency_key: str
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., commit_valid: _Optional[bool] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class IngestResult(_message.Message):
    __slots__ = ("artifact_id", "entries_written", "entries_replaced", "index")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_REPLACED_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    entries_written: int
    entries_replaced: int
    index: int
    def __init__(self, artifact_id: _Optional[str] = ..., entries_written: _Optional[int] = ..., entries_replaced: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class IngestRejection(_message.Message):
    __slots__ = ("index", "artifact_id", "field", "reason")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    index: int
    artifact_id: str
    field: str
    reason: str
    def __init__(self, index: _Optional[int] = ..., artifact_id: _Optional[str] = ..., field: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class IngestDocumentsResponse(_message.Message):
    __slots__ = ("results", "total_entries", "embed_seconds", "commit_seconds", "rejected")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    EMBED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[IngestResult]
    total_entries: int
    embed_seconds: float
    commit_seconds: float
    rejected: _containers.RepeatedCompositeFieldContainer[IngestRejection]
    def __init__(self, results: _Optional[_Iterable[_Union[IngestResult, _Mapping]]] = ..., total_entries: _Optional[int] = ..., embed_seconds: _Optional[float] = ..., commit_seconds: _Optional[float] = ..., rejected: _Optional[_Iterable[_Union[IngestRejection, _Mapping]]] = ...) -> None: ...

class IngestProgress(_message.Message):
    __slots__ = ("entries_embedded", "entries_expected")
    ENTRIES_EMBEDDED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    entries_embedded: int
    entries_expected: int
    def __init__(self, entries_embedded: _Optional[int] = ..., entries_expected: _Optional[int] = ...) -> None: ...

class IngestEvent(_message.Message):
    __slots__ = ("progress", "report")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    progress: IngestProgress
    report: IngestDocumentsResponse
    def __init__(self, progress: _Optional[_Union[IngestProgress, _Mapping]] = ..., report: _Optional[_Union[IngestDocumentsResponse, _Mapping]] = ...) -> None: ...

class DeleteArtifactsRequest(_message.Message):
    __slots__ = ("tenant_id", "artifact_ids")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant_id: _Optional[str] = ..., artifact_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteArtifactsResponse(_message.Message):
    __slots__ = ("artifacts_deleted", "entries_deleted")
    ARTIFACTS_DELETED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_DELETED_FIELD_NUMBER: _ClassVar[int]
    artifacts_deleted: int
    entries_deleted: int
    def __init__(self, artifacts_deleted: _Optional[int] = ..., entries_deleted: _Optional[int] = ...) -> None: ...

class FloatVector(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class VectorSearchRequest(_message.Message):
    __slots__ = ("tenant_id", "query_vectors", "top_k", "filters")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTORS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    query_vectors: _containers.RepeatedCompositeFieldContainer[FloatVector]
    top_k: int
    filters: _common_pb2.KnowledgeSearchFilters
    def __init__(self, tenant_id: _Optional[str] = ..., query_vectors: _Optional[_Iterable[_Union[FloatVector, _Mapping]]] = ..., top_k: _Optional[int] = ..., filters: _Optional[_Union[_common_pb2.KnowledgeSearchFilters, _Mapping]] = ...) -> None: ...

class RetrieveRequest(_message.Message):
    __slots__ = ("tenant_id", "keywords", "extra_keywords", "top_k", "filters", "query_vectors", "keyword_leg", "complete_scores", "complete_row_ids", "hits", "feedback_expansion")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTORS_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_LEG_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_SCORES_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_ROW_IDS_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_EXPANSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    keywords: str
    extra_keywords: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    filters: _common_pb2.KnowledgeSearchFilters
    query_vectors: _containers.RepeatedCompositeFieldContainer[FloatVector]
    keyword_leg: bool
    complete_scores: bool
    complete_row_ids: _containers.RepeatedScalarFieldContainer[int]
    hits: bool
    feedback_expansion: str
    def __init__(self, tenant_id: _Optional[str] = ..., keywords: _Optional[str] = ..., extra_keywords: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., filters: _Optional[_Union[_common_pb2.KnowledgeSearchFilters, _Mapping]] = ..., query_vectors: _Optional[_Iterable[_Union[FloatVector, _Mapping]]] = ..., keyword_leg: _Optional[bool] = ..., complete_scores: _Optional[bool] = ..., complete_row_ids: _Optional[_Iterable[int]] = ..., hits: _Optional[bool] = ..., feedback_expansion: _Optional[str] = ...) -> None: ...

class RetrieveResponse(_message.Message):
    __slots__ = ("keyword_columns", "keyword_query_terms", "dense_columns", "completion", "keyword_hits", "dense_hits", "degraded", "data_id")
    KEYWORD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_QUERY_TERMS_FIELD_NUMBER: _ClassVar[int]
    DENSE_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_HITS_FIELD_NUMBER: _ClassVar[int]
    DENSE_HITS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DATA_ID_FIELD_NUMBER: _ClassVar[int]
    keyword_columns: CandidateColumns
    keyword_query_terms: _containers.RepeatedScalarFieldContainer[str]
    dense_columns: _containers.RepeatedCompositeFieldContainer[CandidateColumns]
    completion: ScoreCompletion
    keyword_hits: _containers.RepeatedCompositeFieldContainer[ScoredEntry]
    dense_hits: _containers.RepeatedCompositeFieldContainer[VectorHits]
    degraded: str
    data_id: str
    def __init__(self, keyword_columns: _Optional[_Union[CandidateColumns, _Mapping]] = ..., keyword_query_terms: _Optional[_Iterable[str]] = ..., dense_columns: _Optional[_Iterable[_Union[CandidateColumns, _Mapping]]] = ..., completion: _Optional[_Union[ScoreCompletion, _Mapping]] = ..., keyword_hits: _Optional[_Iterable[_Union[ScoredEntry, _Mapping]]] = ..., dense_hits: _Optional[_Iterable[_Union[VectorHits, _Mapping]]] = ..., degraded: _Optional[str] = ..., data_id: _Optional[str] = ...) -> None: ...

class ScoreCompletion(_message.Message):
    __slots__ = ("row_ids", "dense", "bm25", "query_terms", "document_frequency", "keyword_entries")
    ROW_IDS_FIELD_NUMBER: _ClassVar[int]
    DENSE_FIELD_NUMBER: _ClassVar[int]
    BM25_FIELD_NUMBER: _ClassVar[int]
    QUERY_TERMS_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    row_ids: _containers.RepeatedScalarFieldContainer[int]
    dense: _containers.RepeatedScalarFieldContainer[float]
    bm25: _containers.RepeatedScalarFieldContainer[float]
    query_terms: _containers.RepeatedScalarFieldContainer[str]
    document_frequency: _containers.RepeatedScalarFieldContainer[int]
    keyword_entries: int
    def __init__(self, row_ids: _Optional[_Iterable[int]] = ..., dense: _Optional[_Iterable[float]] = ..., bm25: _Optional[_Iterable[float]] = ..., query_terms: _Optional[_Iterable[str]] = ..., document_frequency: _Optional[_Iterable[int]] = ..., keyword_entries: _Optional[int] = ...) -> None: ...

class CandidateColumns(_message.Message):
    __slots__ = ("entry_ids", "artifact_ids", "scores", "timestamps_unix", "richness", "reputation_prior", "feedback_helpful", "feedback_unhelpful", "row_ids")
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_UNIX_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_PRIOR_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_HELPFUL_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_UNHELPFUL_FIELD_NUMBER: _ClassVar[int]
    ROW_IDS_FIELD_NUMBER: _ClassVar[int]
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    scores: _containers.RepeatedScalarFieldContainer[float]
    timestamps_unix: _containers.RepeatedScalarFieldContainer[int]
    richness: _containers.RepeatedScalarFieldContainer[float]
    reputation_prior: _containers.RepeatedScalarFieldContainer[float]
    feedback_helpful: _containers.RepeatedScalarFieldContainer[int]
    feedback_unhelpful: _containers.RepeatedScalarFieldContainer[int]
    row_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, entry_ids: _Optional[_Iterable[str]] = ..., artifact_ids: _Optional[_Iterable[str]] = ..., scores: _Optional[_Iterable[float]] = ..., timestamps_unix: _Optional[_Iterable[int]] = ..., richness: _Optional[_Iterable[float]] = ..., reputation_prior: _Optional[_Iterable[float]] = ..., feedback_helpful: _Optional[_Iterable[int]] = ..., feedback_unhelpful: _Optional[_Iterable[int]] = ..., row_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ScoredEntry(_message.Message):
    __slots__ = ("entry", "artifact", "score", "rank")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    entry: _common_pb2.PersonaKnowledgeEntry
    artifact: _common_pb2.ArtifactMetadataSummary
    score: float
    rank: int
    def __init__(self, entry: _Optional[_Union[_common_pb2.PersonaKnowledgeEntry, _Mapping]] = ..., artifact: _Optional[_Union[_common_pb2.ArtifactMetadataSummary, _Mapping]] = ..., score: _Optional[float] = ..., rank: _Optional[int] = ...) -> None: ...

class VectorHits(_message.Message):
    __slots__ = ("hits",)
    HITS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[ScoredEntry]
    def __init__(self, hits: _Optional[_Iterable[_Union[ScoredEntry, _Mapping]]] = ...) -> None: ...

class VectorSearchResponse(_message.Message):
    __slots__ = ("per_query", "index_kind")
    PER_QUERY_FIELD_NUMBER: _ClassVar[int]
    INDEX_KIND_FIELD_NUMBER: _ClassVar[int]
    per_query: _containers.RepeatedCompositeFieldContainer[VectorHits]
    index_kind: str
    def __init__(self, per_query: _Optional[_Iterable[_Union[VectorHits, _Mapping]]] = ..., index_kind: _Optional[str] = ...) -> None: ...

class FilterSearchRequest(_message.Message):
    __slots__ = ("tenant_id", "keywords", "extra_keywords", "top_k", "filters", "feedback_expansion")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_EXPANSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    keywords: str
    extra_keywords: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    filters: _common_pb2.KnowledgeSearchFilters
    feedback_expansion: str
    def __init__(self, tenant_id: _Optional[str] = ..., keywords: _Optional[str] = ..., extra_keywords: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., filters: _Optional[_Union[_common_pb2.KnowledgeSearchFilters, _Mapping]] = ..., feedback_expansion: _Optional[str] = ...) -> None: ...

class FilterSearchResponse(_message.Message):
    __slots__ = ("hits", "query_terms")
    HITS_FIELD_NUMBER: _ClassVar[int]
    QUERY_TERMS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[ScoredEntry]
    query_terms: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hits: _Optional[_Iterable[_Union[ScoredEntry, _Mapping]]] = ..., query_terms: _Optional[_Iterable[str]] = ...) -> None: ...

class TenantStatsRequest(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class SourceStats(_message.Message):
    __slots__ = ("source_id", "source_type", "artifacts", "entries", "last_indexed_unix", "visibility_groups", "tags")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEXED_UNIX_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    source_type: str
    artifacts: int
    entries: int
    last_indexed_unix: int
    visibility_groups: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, source_id: _Optional[str] = ..., source_type: _Optional[str] = ..., artifacts: _Optional[int] = ..., entries: _Optional[int] = ..., last_indexed_unix: _Optional[int] = ..., visibility_groups: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ...) -> None: ...

class TenantStats(_message.Message):
    __slots__ = ("tenant_id", "artifacts", "entries", "vectors", "keyword_docs", "sources", "last_indexed_unix", "index_kind", "dimension")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_DOCS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEXED_UNIX_FIELD_NUMBER: _ClassVar[int]
    INDEX_KIND_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    artifacts: int
    entries: int
    vectors: int
    keyword_docs: int
    sources: _containers.RepeatedCompositeFieldContainer[SourceStats]
    last_indexed_unix: int
    index_kind: str
    dimension: int
    def __init__(self, tenant_id: _Optional[str] = ..., artifacts: _Optional[int] = ..., entries: _Optional[int] = ..., vectors: _Optional[int] = ..., keyword_docs: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[SourceStats, _Mapping]]] = ..., last_indexed_unix: _Optional[int] = ..., index_kind: _Optional[str] = ..., dimension: _Optional[int] = ...) -> None: ...

class ConfigureTenantIndexRequest(_message.Message):
    __slots__ = ("tenant_id", "index_kind", "hnsw_m", "hnsw_ef_search", "ivf_nlist", "ivf_nprobe")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_KIND_FIELD_NUMBER: _ClassVar[int]
    HNSW_M_FIELD_NUMBER: _ClassVar[int]
    HNSW_EF_SEARCH_FIELD_NUMBER: _ClassVar[int]
    IVF_NLIST_FIELD_NUMBER: _ClassVar[int]
    IVF_NPROBE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    index_kind: str
    hnsw_m: int
    hnsw_ef_search: int
    ivf_nlist: int
    ivf_nprobe: int
    def __init__(self, tenant_id: _Optional[str] = ..., index_kind: _Optional[str] = ..., hnsw_m: _Optional[int] = ..., hnsw_ef_search: _Optional[int] = ..., ivf_nlist: _Optional[int] = ..., ivf_nprobe: _Optional[int] = ...) -> None: ...

class ConfigureTenantIndexResponse(_message.Message):
    __slots__ = ("index_kind", "vectors")
    INDEX_KIND_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    index_kind: str
    vectors: int
    def __init__(self, index_kind: _Optional[str] = ..., vectors: _Optional[int] = ...) -> None: ...

class GetEntriesRequest(_message.Message):
    __slots__ = ("tenant_id", "entry_ids", "include_vectors", "include_terms")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VECTORS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TERMS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    include_vectors: bool
    include_terms: bool
    def __init__(self, tenant_id: _Optional[str] = ..., entry_ids: _Optional[_Iterable[str]] = ..., include_vectors: _Optional[bool] = ..., include_terms: _Optional[bool] = ...) -> None: ...

class GetEntriesResponse(_message.Message):
    __slots__ = ("entries", "vectors", "terms", "data_id")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    DATA_ID_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ScoredEntry]
    vectors: _containers.RepeatedCompositeFieldContainer[FloatVector]
    terms: _containers.RepeatedCompositeFieldContainer[EntryTerms]
    data_id: str
    def __init__(self, entries: _Optional[_Iterable[_Union[ScoredEntry, _Mapping]]] = ..., vectors: _Optional[_Iterable[_Union[FloatVector, _Mapping]]] = ..., terms: _Optional[_Iterable[_Union[EntryTerms, _Mapping]]] = ..., data_id: _Optional[str] = ...) -> None: ...

class EntryTerms(_message.Message):
    __slots__ = ("title", "body")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    title: str
    body: str
    def __init__(self, title: _Optional[str] = ..., body: _Optional[str] = ...) -> None: ...

class GetFieldSignalsRequest(_message.Message):
    __slots__ = ("tenant_id", "entry_ids", "query", "query_vector")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    entry_ids: _containers.RepeatedScalarFieldContainer[str]
    query: str
    query_vector: FloatVector
    def __init__(self, tenant_id: _Optional[str] = ..., entry_ids: _Optional[_Iterable[str]] = ..., query: _Optional[str] = ..., query_vector: _Optional[_Union[FloatVector, _Mapping]] = ...) -> None: ...

class GetFieldSignalsResponse(_message.Message):
    __slots__ = ("query_terms", "idf", "avg_title_length", "avg_body_length", "avg_doc_length", "found", "title_tf", "body_tf", "title_length", "body_length", "dense_title", "chunk_position", "title_positions", "body_positions")
    QUERY_TERMS_FIELD_NUMBER: _ClassVar[int]
    IDF_FIELD_NUMBER: _ClassVar[int]
    AVG_TITLE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    AVG_BODY_LENGTH_FIELD_NUMBER: _ClassVar[int]
    AVG_DOC_LENGTH_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    TITLE_TF_FIELD_NUMBER: _ClassVar[int]
    BODY_TF_FIELD_NUMBER: _ClassVar[int]
    TITLE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    BODY_LENGTH_FIELD_NUMBER: _ClassVar[int]
    DENSE_TITLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_POSITION_FIELD_NUMBER: _ClassVar[int]
    TITLE_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    BODY_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    query_terms: _containers.RepeatedScalarFieldContainer[str]
    idf: _containers.RepeatedScalarFieldContainer[float]
    avg_title_length: float
    avg_body_length: float
    avg_doc_length: float
    found: _containers.RepeatedScalarFieldContainer[bool]
    title_tf: _containers.RepeatedScalarFieldContainer[float]
    body_tf: _containers.RepeatedScalarFieldContainer[float]
    title_length: _containers.RepeatedScalarFieldContainer[float]
    body_length: _containers.RepeatedScalarFieldContainer[float]
    dense_title: _containers.RepeatedScalarFieldContainer[float]
    chunk_position: _containers.RepeatedScalarFieldContainer[float]
    title_positions: FieldPositions
    body_positions: FieldPositions
    def __init__(self, query_terms: _Optional[_Iterable[str]] = ..., idf: _Optional[_Iterable[float]] = ..., avg_title_length: _Optional[float] = ..., avg_body_length: _Optional[float] = ..., avg_doc_length: _Optional[float] = ..., found: _Optional[_Iterable[bool]] = ..., title_tf: _Optional[_Iterable[float]] = ..., body_tf: _Optional[_Iterable[float]] = ..., title_length: _Optional[_Iterable[float]] = ..., body_length: _Optional[_Iterable[float]] = ..., dense_title: _Optional[_Iterable[float]] = ..., chunk_position: _Optional[_Iterable[float]] = ..., title_positions: _Optional[_Union[FieldPositions, _Mapping]] = ..., body_positions: _Optional[_Union[FieldPositions, _Mapping]] = ...) -> None: ...

class FieldPositions(_message.Message):
    __slots__ = ("width", "rows", "positions", "terms")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    width: int
    rows: _containers.RepeatedScalarFieldContainer[int]
    positions: _containers.RepeatedScalarFieldContainer[int]
    terms: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, width: _Optional[int] = ..., rows: _Optional[_Iterable[int]] = ..., positions: _Optional[_Iterable[int]] = ..., terms: _Optional[_Iterable[int]] = ...) -> None: ...

class StoreStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoreProblem(_message.Message):
    __slots__ = ("tenant_id", "kind", "message", "since_unix")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    kind: str
    message: str
    since_unix: int
    def __init__(self, tenant_id: _Optional[str] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., since_unix: _Optional[int] = ...) -> None: ...

class StoreStatus(_message.Message):
    __slots__ = ("state", "data_dir", "read_only", "free_bytes", "total_bytes", "problems", "repaired_rows", "open_tenants", "open_tenant_bytes", "memory_budget_bytes", "tenants", "scrub")
    STATE_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_ROWS_FIELD_NUMBER: _ClassVar[int]
    OPEN_TENANTS_FIELD_NUMBER: _ClassVar[int]
    OPEN_TENANT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    SCRUB_FIELD_NUMBER: _ClassVar[int]
    state: str
    data_dir: str
    read_only: bool
    free_bytes: int
    total_bytes: int
    problems: _containers.RepeatedCompositeFieldContainer[StoreProblem]
    repaired_rows: int
    open_tenants: int
    open_tenant_bytes: int
    memory_budget_bytes: int
    tenants: _containers.RepeatedCompositeFieldContainer[OpenTenant]
    scrub: str
    def __init__(self, state: _Optional[str] = ..., data_dir: _Optional[str] = ..., read_only: _Optional[bool] = ..., free_bytes: _Optional[int] = ..., total_bytes: _Optional[int] = ..., problems: _Optional[_Iterable[_Union[StoreProblem, _Mapping]]] = ..., repaired_rows: _Optional[int] = ..., open_tenants: _Optional[int] = ..., open_tenant_bytes: _Optional[int] = ..., memory_budget_bytes: _Optional[int] = ..., tenants: _Optional[_Iterable[_Union[OpenTenant, _Mapping]]] = ..., scrub: _Optional[str] = ...) -> None: ...

class OpenTenant(_message.Message):
    __slots__ = ("tenant_id", "bytes")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    bytes: int
    def __init__(self, tenant_id: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class CheckTenantRequest(_message.Message):
    __slots__ = ("tenant_id", "repair")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    REPAIR_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    repair: bool
    def __init__(self, tenant_id: _Optional[str] = ..., repair: _Optional[bool] = ...) -> None: ...

class TenantCheck(_message.Message):
    __slots__ = ("tenant_id", "entries", "vectors", "keyword_rows", "vectors_indexed", "keyword_rows_indexed", "missing_vectors", "malformed_vectors", "missing_keyword_rows", "orphan_vectors", "orphan_keyword_rows", "entries_without_artifact", "integrity_errors", "repaired_vectors", "repaired_keyword_rows", "removed_orphans", "deferred", "consistent", "corrupt_rows", "unverified_rows", "missing_entries", "changed_vectors", "keyword_stats_off")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_ROWS_FIELD_NUMBER: _ClassVar[int]
    VECTORS_INDEXED_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_ROWS_INDEXED_FIELD_NUMBER: _ClassVar[int]
    MISSING_VECTORS_FIELD_NUMBER: _ClassVar[int]
    MALFORMED_VECTORS_FIELD_NUMBER: _ClassVar[int]
    MISSING_KEYWORD_ROWS_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_VECTORS_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_KEYWORD_ROWS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_WITHOUT_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    INTEGRITY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_VECTORS_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_KEYWORD_ROWS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_ORPHANS_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    CONSISTENT_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_ROWS_FIELD_NUMBER: _ClassVar[int]
    UNVERIFIED_ROWS_FIELD_NUMBER: _ClassVar[int]
    MISSING_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CHANGED_VECTORS_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_STATS_OFF_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    entries: int
    vectors: int
    keyword_rows: int
    vectors_indexed: int
    keyword_rows_indexed: int
    missing_vectors: int
    malformed_vectors: int
    missing_keyword_rows: int
    orphan_vectors: int
    orphan_keyword_rows: int
    entries_without_artifact: int
    integrity_errors: _containers.RepeatedScalarFieldContainer[str]
    repaired_vectors: int
    repaired_keyword_rows: int
    removed_orphans: int
    deferred: str
    consistent: bool
    corrupt_rows: int
    unverified_rows: int
    missing_entries: int
    changed_vectors: int
    keyword_stats_off: int
    def __init__(self, tenant_id: _Optional[str] = ..., entries: _Optional[int] = ..., vectors: _Optional[int] = ..., keyword_rows: _Optional[int] = ..., vectors_indexed: _Optional[int] = ..., keyword_rows_indexed: _Optional[int] = ..., missing_vectors: _Optional[int] = ..., malformed_vectors: _Optional[int] = ..., missing_keyword_rows: _Optional[int] = ..., orphan_vectors: _Optional[int] = ..., orphan_keyword_rows: _Optional[int] = ..., entries_without_artifact: _Optional[int] = ..., integrity_errors: _Optional[_Iterable[str]] = ..., repaired_vectors: _Optional[int] = ..., repaired_keyword_rows: _Optional[int] = ..., removed_orphans: _Optional[int] = ..., deferred: _Optional[str] = ..., consistent: _Optional[bool] = ..., corrupt_rows: _Optional[int] = ..., unverified_rows: _Optional[int] = ..., missing_entries: _Optional[int] = ..., changed_vectors: _Optional[int] = ..., keyword_stats_off: _Optional[int] = ...) -> None: ...

class ExternalText(_message.Message):
    __slots__ = ("title", "text", "analyser", "title_terms", "body_terms", "richness")
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ANALYSER_FIELD_NUMBER: _ClassVar[int]
    TITLE_TERMS_FIELD_NUMBER: _ClassVar[int]
    BODY_TERMS_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_FIELD_NUMBER: _ClassVar[int]
    title: str
    text: str
    analyser: str
    title_terms: str
    body_terms: str
    richness: float
    def __init__(self, title: _Optional[str] = ..., text: _Optional[str] = ..., analyser: _Optional[str] = ..., title_terms: _Optional[str] = ..., body_terms: _Optional[str] = ..., richness: _Optional[float] = ...) -> None: ...

class ScoreKeywordsRequest(_message.Message):
    __slots__ = ("tenant_id", "keywords", "extra_keywords", "texts")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_KEYWORDS_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    keywords: str
    extra_keywords: _containers.RepeatedScalarFieldContainer[str]
    texts: _containers.RepeatedCompositeFieldContainer[ExternalText]
    def __init__(self, tenant_id: _Optional[str] = ..., keywords: _Optional[str] = ..., extra_keywords: _Optional[_Iterable[str]] = ..., texts: _Optional[_Iterable[_Union[ExternalText, _Mapping]]] = ...) -> None: ...

class ScoreKeywordsResponse(_message.Message):
    __slots__ = ("bm25", "richness", "query_terms", "document_frequency", "keyword_entries", "chunk_texts", "chunk_owner")
    BM25_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_FIELD_NUMBER: _ClassVar[int]
    QUERY_TERMS_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_TEXTS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_OWNER_FIELD_NUMBER: _ClassVar[int]
    bm25: _containers.RepeatedScalarFieldContainer[float]
    richness: _containers.RepeatedScalarFieldContainer[float]
    query_terms: _containers.RepeatedScalarFieldContainer[str]
    document_frequency: _containers.RepeatedScalarFieldContainer[int]
    keyword_entries: int
    chunk_texts: _containers.RepeatedScalarFieldContainer[str]
    chunk_owner: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, bm25: _Optional[_Iterable[float]] = ..., richness: _Optional[_Iterable[float]] = ..., query_terms: _Optional[_Iterable[str]] = ..., document_frequency: _Optional[_Iterable[int]] = ..., keyword_entries: _Optional[int] = ..., chunk_texts: _Optional[_Iterable[str]] = ..., chunk_owner: _Optional[_Iterable[int]] = ...) -> None: ...

class TopicsRequest(_message.Message):
    __slots__ = ("tenant_id", "filters", "kind", "k", "max_terms", "examples", "period", "date_field", "topic_id", "query_vector", "limit", "max_points")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MAX_TERMS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_POINTS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    filters: _common_pb2.KnowledgeSearchFilters
    kind: str
    k: int
    max_terms: int
    examples: int
    period: str
    date_field: str
    topic_id: int
    query_vector: FloatVector
    limit: int
    max_points: int
    def __init__(self, tenant_id: _Optional[str] = ..., filters: _Optional[_Union[_common_pb2.KnowledgeSearchFilters, _Mapping]] = ..., kind: _Optional[str] = ..., k: _Optional[int] = ..., max_terms: _Optional[int] = ..., examples: _Optional[int] = ..., period: _Optional[str] = ..., date_field: _Optional[str] = ..., topic_id: _Optional[int] = ..., query_vector: _Optional[_Union[FloatVector, _Mapping]] = ..., limit: _Optional[int] = ..., max_points: _Optional[int] = ...) -> None: ...

class TopicsResponse(_message.Message):
    __slots__ = ("status", "progress", "result_json")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    status: str
    progress: float
    result_json: str
    def __init__(self, status: _Optional[str] = ..., progress: _Optional[float] = ..., result_json: _Optional[str] = ...) -> None: ...

class SearchLogItem(_message.Message):
    __slots__ = ("entry_id", "artifact_id", "rank")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    artifact_id: str
    rank: int
    def __init__(self, entry_id: _Optional[str] = ..., artifact_id: _Optional[str] = ..., rank: _Optional[int] = ...) -> None: ...

class SearchLogRecord(_message.Message):
    __slots__ = ("tenant_id", "search_id", "user_id", "created_unix", "query_sha256", "items")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    QUERY_SHA256_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    search_id: str
    user_id: str
    created_unix: int
    query_sha256: str
    items: _containers.RepeatedCompositeFieldContainer[SearchLogItem]
    def __init__(self, tenant_id: _Optional[str] = ..., search_id: _Optional[str] = ..., user_id: _Optional[str] = ..., created_unix: _Optional[int] = ..., query_sha256: _Optional[str] = ..., items: _Optional[_Iterable[_Union[SearchLogItem, _Mapping]]] = ...) -> None: ...

class RecordSearchResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SourceFeedback(_message.Message):
    __slots__ = ("tenant_id", "source_id", "target_id", "helpful", "user_id", "search_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    HELPFUL_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    source_id: str
    target_id: str
    helpful: bool
    user_id: str
    search_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., source_id: _Optional[str] = ..., target_id: _Optional[str] = ..., helpful: _Optional[bool] = ..., user_id: _Optional[str] = ..., search_id: _Optional[str] = ...) -> None: ...

class SourceVotes(_message.Message):
    __slots__ = ("source_id", "helpful", "unhelpful")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    HELPFUL_FIELD_NUMBER: _ClassVar[int]
    UNHELPFUL_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    helpful: int
    unhelpful: int
    def __init__(self, source_id: _Optional[str] = ..., helpful: _Optional[int] = ..., unhelpful: _Optional[int] = ...) -> None: ...

class GetSourceVotesRequest(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class GetSourceVotesResponse(_message.Message):
    __slots__ = ("sources",)
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[SourceVotes]
    def __init__(self, sources: _Optional[_Iterable[_Union[SourceVotes, _Mapping]]] = ...) -> None: ...

class PutRankingModelRequest(_message.Message):
    __slots__ = ("tenant_id", "model", "profile")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    model: bytes
    profile: _common_pb2.RankingProfile
    def __init__(self, tenant_id: _Optional[str] = ..., model: _Optional[bytes] = ..., profile: _Optional[_Union[_common_pb2.RankingProfile, _Mapping]] = ...) -> None: ...

class PutRankingModelResponse(_message.Message):
    __slots__ = ("model_sha256", "profile")
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    model_sha256: str
    profile: _common_pb2.RankingProfile
    def __init__(self, model_sha256: _Optional[str] = ..., profile: _Optional[_Union[_common_pb2.RankingProfile, _Mapping]] = ...) -> None: ...

class GetRankingModelRequest(_message.Message):
    __slots__ = ("tenant_id", "model_sha256")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    model_sha256: str
    def __init__(self, tenant_id: _Optional[str] = ..., model_sha256: _Optional[str] = ...) -> None: ...

class RankingModel(_message.Message):
    __slots__ = ("model_sha256", "model")
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model_sha256: str
    model: bytes
    def __init__(self, model_sha256: _Optional[str] = ..., model: _Optional[bytes] = ...) -> None: ...
