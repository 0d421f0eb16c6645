from nucleus.v1 import common_pb2 as _common_pb2
from nucleus.v1 import llm_orchestration_pb2 as _llm_orchestration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChatRequest(_message.Message):
    __slots__ = ("completion", "persona_id")
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    completion: _llm_orchestration_pb2.ChatCompletionRequest
    persona_id: str
    def __init__(self, completion: _Optional[_Union[_llm_orchestration_pb2.ChatCompletionRequest, _Mapping]] = ..., persona_id: _Optional[str] = ...) -> None: ...

class SearchAndRankRequest(_message.Message):
    __slots__ = ("tenant_id", "persona_id", "user_query_text", "user_query_vector", "top_k_initial_retrieve", "top_k_final_rank", "ranking_prefs", "filters", "expand_query_with_llm", "extra_query_phrases", "sources", "embed_timeout_s", "cursor", "fold_duplicates")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    USER_QUERY_TEXT_FIELD_NUMBER: _ClassVar[int]
    USER_QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    TOP_K_INITIAL_RETRIEVE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FINAL_RANK_FIELD_NUMBER: _ClassVar[int]
    RANKING_PREFS_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    EXPAND_QUERY_WITH_LLM_FIELD_NUMBER: _ClassVar[int]
    EXTRA_QUERY_PHRASES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    EMBED_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    FOLD_DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    user_query_text: str
    user_query_vector: _containers.RepeatedScalarFieldContainer[float]
    top_k_initial_retrieve: int
    top_k_final_rank: int
    ranking_prefs: _common_pb2.RankingPreferences
    filters: _common_pb2.KnowledgeSearchFilters
    expand_query_with_llm: bool
    extra_query_phrases: _containers.RepeatedScalarFieldContainer[str]
    sources: _containers.RepeatedScalarFieldContainer[str]
    embed_timeout_s: float
    cursor: str
    fold_duplicates: bool
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ..., user_query_text: _Optional[str] = ..., user_query_vector: _Optional[_Iterable[float]] = ..., top_k_initial_retrieve: _Optional[int] = ..., top_k_final_rank: _Optional[int] = ..., ranking_prefs: _Optional[_Union[_common_pb2.RankingPreferences, _Mapping]] = ..., filters: _Optional[_Union[_common_pb2.KnowledgeSearchFilters, _Mapping]] = ..., expand_query_with_llm: _Optional[bool] = ..., extra_query_phrases: _Optional[_Iterable[str]] = ..., sources: _Optional[_Iterable[str]] = ..., embed_timeout_s: _Optional[float] = ..., cursor: _Optional[str] = ..., fold_duplicates: _Optional[bool] = ...) -> None: ...

class ScoreExplanation(_message.Message):
    __slots__ = ("weights", "contributions", "dense_cosine", "bm25", "dense_rank", "bm25_rank", "dense_norm", "bm25_norm", "rerank_score", "fusion_method", "recency_applied", "age_days", "dense_source", "bm25_source", "dense_weight", "query_profile", "source_id", "remote_score", "reputation_basis", "feature_contributions", "learned_base")
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTIONS_FIELD_NUMBER: _ClassVar[int]
    DENSE_COSINE_FIELD_NUMBER: _ClassVar[int]
    BM25_FIELD_NUMBER: _ClassVar[int]
    DENSE_RANK_FIELD_NUMBER: _ClassVar[int]
    BM25_RANK_FIELD_NUMBER: _ClassVar[int]
    DENSE_NORM_FIELD_NUMBER: _ClassVar[int]
    BM25_NORM_FIELD_NUMBER: _ClassVar[int]
    RERANK_SCORE_FIELD_NUMBER: _ClassVar[int]
    FUSION_METHOD_FIELD_NUMBER: _ClassVar[int]
    RECENCY_APPLIED_FIELD_NUMBER: _ClassVar[int]
    AGE_DAYS_FIELD_NUMBER: _ClassVar[int]
    DENSE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    BM25_SOURCE_FIELD_NUMBER: _ClassVar[int]
    DENSE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    QUERY_PROFILE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    REMOTE_SCORE_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_BASIS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_CONTRIBUTIONS_FIELD_NUMBER: _ClassVar[int]
    LEARNED_BASE_FIELD_NUMBER: _ClassVar[int]
    weights: _common_pb2.FourRScores
    contributions: _common_pb2.FourRScores
    dense_cosine: float
    bm25: float
    dense_rank: int
    bm25_rank: int
    dense_norm: float
    bm25_norm: float
    rerank_score: float
    fusion_method: str
    recency_applied: bool
    age_days: float
    dense_source: str
    bm25_source: str
    dense_weight: float
    query_profile: str
    source_id: str
    remote_score: float
    reputation_basis: str
    feature_contributions: _containers.RepeatedCompositeFieldContainer[FeatureContribution]
    learned_base: float
    def __init__(self, weights: _Optional[_Union[_common_pb2.FourRScores, _Mapping]] = ..., contributions: _Optional[_Union[_common_pb2.FourRScores, _Mapping]] = ..., dense_cosine: _Optional[float] = ..., bm25: _Optional[float] = ..., dense_rank: _Optional[int] = ..., bm25_rank: _Optional[int] = ..., dense_norm: _Optional[float] = ..., bm25_norm: _Optional[float] = ..., rerank_score: _Optional[float] = ..., fusion_method: _Optional[str] = ..., recency_applied: _Optional[bool] = ..., age_days: _Optional[float] = ..., dense_source: _Optional[str] = ..., bm25_source: _Optional[str] = ..., dense_weight: _Optional[float] = ..., query_profile: _Optional[str] = ..., source_id: _Optional[str] = ..., remote_score: _Optional[float] = ..., reputation_basis: _Optional[str] = ..., feature_contributions: _Optional[_Iterable[_Union[FeatureContribution, _Mapping]]] = ..., learned_base: _Optional[float] = ...) -> None: ...

class FeatureContribution(_message.Message):
    __slots__ = ("name", "value", "contribution")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: float
    contribution: float
    def __init__(self, name: _Optional[str] = ..., value: _Optional[float] = ..., contribution: _Optional[float] = ...) -> None: ...

class RankedKnowledgeResult(_message.Message):
    __slots__ = ("persona_knowledge_entry_id", "associated_artifact", "snippet", "overall_rank_score", "individual_scores", "explanation", "headline", "text", "timestamp_unix", "relevance_probability", "source_id", "highlights", "duplicates")
    PERSONA_KNOWLEDGE_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ASSOCIATED_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    OVERALL_RANK_SCORE_FIELD_NUMBER: _ClassVar[int]
    INDIVIDUAL_SCORES_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    HEADLINE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_UNIX_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    HIGHLIGHTS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    persona_knowledge_entry_id: str
    associated_artifact: _common_pb2.ArtifactMetadataSummary
    snippet: str
    overall_rank_score: float
    individual_scores: _common_pb2.FourRScores
    explanation: ScoreExplanation
    headline: str
    text: str
    timestamp_unix: int
    relevance_probability: float
    source_id: str
    highlights: _containers.RepeatedCompositeFieldContainer[TextRange]
    duplicates: _containers.RepeatedCompositeFieldContainer[FoldedDuplicate]
    def __init__(self, persona_knowledge_entry_id: _Optional[str] = ..., associated_artifact: _Optional[_Union[_common_pb2.ArtifactMetadataSummary, _Mapping]] = ..., snippet: _Optional[str] = ..., overall_rank_score: _Optional[float] = ..., individual_scores: _Optional[_Union[_common_pb2.FourRScores, _Mapping]] = ..., explanation: _Optional[_Union[ScoreExplanation, _Mapping]] = ..., headline: _Optional[str] = ..., text: _Optional[str] = ..., timestamp_unix: _Optional[int] = ..., relevance_probability: _Optional[float] = ..., source_id: _Optional[str] = ..., highlights: _Optional[_Iterable[_Union[TextRange, _Mapping]]] = ..., duplicates: _Optional[_Iterable[_Union[FoldedDuplicate, _Mapping]]] = ...) -> None: ...

class FoldedDuplicate(_message.Message):
    __slots__ = ("artifact_id", "entry_id", "title", "source_id", "source_uri", "file_name")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    entry_id: str
    title: str
    source_id: str
    source_uri: str
    file_name: str
    def __init__(self, artifact_id: _Optional[str] = ..., entry_id: _Optional[str] = ..., title: _Optional[str] = ..., source_id: _Optional[str] = ..., source_uri: _Optional[str] = ..., file_name: _Optional[str] = ...) -> None: ...

class TextRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class StageTiming(_message.Message):
    __slots__ = ("stage", "ms")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    MS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    ms: float
    def __init__(self, stage: _Optional[str] = ..., ms: _Optional[float] = ...) -> None: ...

class WhyNotRequest(_message.Message):
    __slots__ = ("search", "artifact_ids", "search_id")
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    search: SearchAndRankRequest
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    search_id: str
    def __init__(self, search: _Optional[_Union[SearchAndRankRequest, _Mapping]] = ..., artifact_ids: _Optional[_Iterable[str]] = ..., search_id: _Optional[str] = ...) -> None: ...

class WhyNotResponse(_message.Message):
    __slots__ = ("result_json",)
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    def __init__(self, result_json: _Optional[str] = ...) -> None: ...

class SearchAndRankResponse(_message.Message):
    __slots__ = ("results", "debug_information", "error_message", "degraded", "degraded_reasons", "profile_name", "profile_version", "query_phrases", "candidates_considered", "timings", "temporal_intent", "sources", "search_id", "next_cursor")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    DEBUG_INFORMATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASONS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_VERSION_FIELD_NUMBER: _ClassVar[int]
    QUERY_PHRASES_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_CONSIDERED_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_INTENT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[RankedKnowledgeResult]
    debug_information: str
    error_message: str
    degraded: bool
    degraded_reasons: _containers.RepeatedScalarFieldContainer[str]
    profile_name: str
    profile_version: int
    query_phrases: _containers.RepeatedScalarFieldContainer[str]
    candidates_considered: int
    timings: _containers.RepeatedCompositeFieldContainer[StageTiming]
    temporal_intent: bool
    sources: _containers.RepeatedCompositeFieldContainer[SourceReport]
    search_id: str
    next_cursor: str
    def __init__(self, results: _Optional[_Iterable[_Union[RankedKnowledgeResult, _Mapping]]] = ..., debug_information: _Optional[str] = ..., error_message: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reasons: _Optional[_Iterable[str]] = ..., profile_name: _Optional[str] = ..., profile_version: _Optional[int] = ..., query_phrases: _Optional[_Iterable[str]] = ..., candidates_considered: _Optional[int] = ..., timings: _Optional[_Iterable[_Union[StageTiming, _Mapping]]] = ..., temporal_intent: _Optional[bool] = ..., sources: _Optional[_Iterable[_Union[SourceReport, _Mapping]]] = ..., search_id: _Optional[str] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class SourceReport(_message.Message):
    __slots__ = ("source_id", "status", "latency_ms", "result_count", "error_message", "error_code", "filtered", "note")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    RESULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    status: str
    latency_ms: float
    result_count: int
    error_message: str
    error_code: str
    filtered: int
    note: str
    def __init__(self, source_id: _Optional[str] = ..., status: _Optional[str] = ..., latency_ms: _Optional[float] = ..., result_count: _Optional[int] = ..., error_message: _Optional[str] = ..., error_code: _Optional[str] = ..., filtered: _Optional[int] = ..., note: _Optional[str] = ...) -> None: ...

class TopicToolRequest(_message.Message):
    __slots__ = ("tool", "tenant_id", "k", "max_terms", "examples", "period", "date_field", "topic_id", "query", "limit", "max_points", "include_png")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MAX_TERMS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    DATE_FIELD_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_POINTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PNG_FIELD_NUMBER: _ClassVar[int]
    tool: str
    tenant_id: str
    k: int
    max_terms: int
    examples: int
    period: str
    date_field: str
    topic_id: int
    query: str
    limit: int
    max_points: int
    include_png: bool
    def __init__(self, tool: _Optional[str] = ..., tenant_id: _Optional[str] = ..., k: _Optional[int] = ..., max_terms: _Optional[int] = ..., examples: _Optional[int] = ..., period: _Optional[str] = ..., date_field: _Optional[str] = ..., topic_id: _Optional[int] = ..., query: _Optional[str] = ..., limit: _Optional[int] = ..., max_points: _Optional[int] = ..., include_png: _Optional[bool] = ...) -> None: ...

class TopicToolResponse(_message.Message):
    __slots__ = ("status", "progress", "result_json")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    status: str
    progress: float
    result_json: str
    def __init__(self, status: _Optional[str] = ..., progress: _Optional[float] = ..., result_json: _Optional[str] = ...) -> None: ...
