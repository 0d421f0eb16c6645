from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FusionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FUSION_METHOD_UNSPECIFIED: _ClassVar[FusionMethod]
    FUSION_METHOD_CONVEX: _ClassVar[FusionMethod]
    FUSION_METHOD_RRF: _ClassVar[FusionMethod]
    FUSION_METHOD_CONVEX_MINMAX: _ClassVar[FusionMethod]
    FUSION_METHOD_ADAPTIVE: _ClassVar[FusionMethod]

class RecencyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECENCY_MODE_UNSPECIFIED: _ClassVar[RecencyMode]
    RECENCY_MODE_AUTO: _ClassVar[RecencyMode]
    RECENCY_MODE_ALWAYS: _ClassVar[RecencyMode]
    RECENCY_MODE_NEVER: _ClassVar[RecencyMode]

class FeedbackTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FEEDBACK_TARGET_UNSPECIFIED: _ClassVar[FeedbackTarget]
    FEEDBACK_TARGET_ENTRY: _ClassVar[FeedbackTarget]
    FEEDBACK_TARGET_ARTIFACT: _ClassVar[FeedbackTarget]
FUSION_METHOD_UNSPECIFIED: FusionMethod
FUSION_METHOD_CONVEX: FusionMethod
FUSION_METHOD_RRF: FusionMethod
FUSION_METHOD_CONVEX_MINMAX: FusionMethod
FUSION_METHOD_ADAPTIVE: FusionMethod
RECENCY_MODE_UNSPECIFIED: RecencyMode
RECENCY_MODE_AUTO: RecencyMode
RECENCY_MODE_ALWAYS: RecencyMode
RECENCY_MODE_NEVER: RecencyMode
FEEDBACK_TARGET_UNSPECIFIED: FeedbackTarget
FEEDBACK_TARGET_ENTRY: FeedbackTarget
FEEDBACK_TARGET_ARTIFACT: FeedbackTarget

class ArtifactMetadata(_message.Message):
    __slots__ = ("artifact_id", "title", "source_type", "source_id", "source_uri", "file_name", "file_type", "created_unix", "modified_unix", "owners", "tags", "reputation_prior", "visibility_groups")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_UNIX_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_PRIOR_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    title: str
    source_type: str
    source_id: str
    source_uri: str
    file_name: str
    file_type: str
    created_unix: int
    modified_unix: int
    owners: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    reputation_prior: float
    visibility_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, artifact_id: _Optional[str] = ..., title: _Optional[str] = ..., source_type: _Optional[str] = ..., source_id: _Optional[str] = ..., source_uri: _Optional[str] = ..., file_name: _Optional[str] = ..., file_type: _Optional[str] = ..., created_unix: _Optional[int] = ..., modified_unix: _Optional[int] = ..., owners: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., reputation_prior: _Optional[float] = ..., visibility_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ArtifactMetadataSummary(_message.Message):
    __slots__ = ("artifact_id", "title", "source_type", "source_id", "source_uri", "file_name", "file_type", "created_unix", "modified_unix", "reputation_prior", "feedback_helpful", "feedback_unhelpful", "visibility_groups", "tags", "owners")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URI_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    FILE_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_UNIX_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_PRIOR_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_HELPFUL_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_UNHELPFUL_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    title: str
    source_type: str
    source_id: str
    source_uri: str
    file_name: str
    file_type: str
    created_unix: int
    modified_unix: int
    reputation_prior: float
    feedback_helpful: int
    feedback_unhelpful: int
    visibility_groups: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    owners: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, artifact_id: _Optional[str] = ..., title: _Optional[str] = ..., source_type: _Optional[str] = ..., source_id: _Optional[str] = ..., source_uri: _Optional[str] = ..., file_name: _Optional[str] = ..., file_type: _Optional[str] = ..., created_unix: _Optional[int] = ..., modified_unix: _Optional[int] = ..., reputation_prior: _Optional[float] = ..., feedback_helpful: _Optional[int] = ..., feedback_unhelpful: _Optional[int] = ..., visibility_groups: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., owners: _Optional[_Iterable[str]] = ...) -> None: ...

class PersonaKnowledgeEntry(_message.Message):
    __slots__ = ("id", "tenant_id", "persona_id", "artifact_id", "chunk_index", "text", "headline", "content_summary", "timestamp_unix", "richness", "text_hash", "span_start", "span_end")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    HEADLINE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_UNIX_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_FIELD_NUMBER: _ClassVar[int]
    TEXT_HASH_FIELD_NUMBER: _ClassVar[int]
    SPAN_START_FIELD_NUMBER: _ClassVar[int]
    SPAN_END_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant_id: str
    persona_id: str
    artifact_id: str
    chunk_index: int
    text: str
    headline: str
    content_summary: str
    timestamp_unix: int
    richness: float
    text_hash: str
    span_start: int
    span_end: int
    def __init__(self, id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ..., artifact_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., headline: _Optional[str] = ..., content_summary: _Optional[str] = ..., timestamp_unix: _Optional[int] = ..., richness: _Optional[float] = ..., text_hash: _Optional[str] = ..., span_start: _Optional[int] = ..., span_end: _Optional[int] = ...) -> None: ...

class KnowledgeSearchFilters(_message.Message):
    __slots__ = ("date_from_unix", "date_to_unix", "source_types", "tags", "owners", "artifact_ids", "source_ids", "persona_id", "visibility_groups", "enforce_visibility", "exclude_source_ids")
    DATE_FROM_UNIX_FIELD_NUMBER: _ClassVar[int]
    DATE_TO_UNIX_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TYPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IDS_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    ENFORCE_VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_SOURCE_IDS_FIELD_NUMBER: _ClassVar[int]
    date_from_unix: int
    date_to_unix: int
    source_types: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    owners: _containers.RepeatedScalarFieldContainer[str]
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    source_ids: _containers.RepeatedScalarFieldContainer[str]
    persona_id: str
    visibility_groups: _containers.RepeatedScalarFieldContainer[str]
    enforce_visibility: bool
    exclude_source_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, date_from_unix: _Optional[int] = ..., date_to_unix: _Optional[int] = ..., source_types: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., owners: _Optional[_Iterable[str]] = ..., artifact_ids: _Optional[_Iterable[str]] = ..., source_ids: _Optional[_Iterable[str]] = ..., persona_id: _Optional[str] = ..., visibility_groups: _Optional[_Iterable[str]] = ..., enforce_visibility: _Optional[bool] = ..., exclude_source_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class FourRScores(_message.Message):
    __slots__ = ("relevancy", "recency", "richness", "reputation")
    RELEVANCY_FIELD_NUMBER: _ClassVar[int]
    RECENCY_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_FIELD_NUMBER: _ClassVar[int]
    relevancy: float
    recency: float
    richness: float
    reputation: float
    def __init__(self, relevancy: _Optional[float] = ..., recency: _Optional[float] = ..., richness: _Optional[float] = ..., reputation: _Optional[float] = ...) -> None: ...

class RankingPreferences(_message.Message):
    __slots__ = ("has_weights", "relevancy_weight", "recency_weight", "richness_weight", "reputation_weight", "profile_name", "fusion_method", "recency_mode", "recency_half_life_days", "rerank", "explain")
    HAS_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    RELEVANCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RECENCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_NAME_FIELD_NUMBER: _ClassVar[int]
    FUSION_METHOD_FIELD_NUMBER: _ClassVar[int]
    RECENCY_MODE_FIELD_NUMBER: _ClassVar[int]
    RECENCY_HALF_LIFE_DAYS_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    has_weights: bool
    relevancy_weight: float
    recency_weight: float
    richness_weight: float
    reputation_weight: float
    profile_name: str
    fusion_method: FusionMethod
    recency_mode: RecencyMode
    recency_half_life_days: float
    rerank: bool
    explain: bool
    def __init__(self, has_weights: _Optional[bool] = ..., relevancy_weight: _Optional[float] = ..., recency_weight: _Optional[float] = ..., richness_weight: _Optional[float] = ..., reputation_weight: _Optional[float] = ..., profile_name: _Optional[str] = ..., fusion_method: _Optional[_Union[FusionMethod, str]] = ..., recency_mode: _Optional[_Union[RecencyMode, str]] = ..., recency_half_life_days: _Optional[float] = ..., rerank: _Optional[bool] = ..., explain: _Optional[bool] = ...) -> None: ...

class RankingProfile(_message.Message):
    __slots__ = ("tenant_id", "persona_id", "name", "version", "relevancy_weight", "recency_weight", "richness_weight", "reputation_weight", "fusion_method", "dense_weight", "recency_mode", "recency_half_life_days", "reputation_prior_strength", "updated_unix", "is_default", "reranker", "rerank_top_n", "rerank_weight", "model_sha256", "feature_version", "feedback_expansion", "fold_duplicates")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RELEVANCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RECENCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RICHNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    FUSION_METHOD_FIELD_NUMBER: _ClassVar[int]
    DENSE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    RECENCY_MODE_FIELD_NUMBER: _ClassVar[int]
    RECENCY_HALF_LIFE_DAYS_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_PRIOR_STRENGTH_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    RERANKER_FIELD_NUMBER: _ClassVar[int]
    RERANK_TOP_N_FIELD_NUMBER: _ClassVar[int]
    RERANK_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MODEL_SHA256_FIELD_NUMBER: _ClassVar[int]
    FEATURE_VERSION_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_EXPANSION_FIELD_NUMBER: _ClassVar[int]
    FOLD_DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    name: str
    version: int
    relevancy_weight: float
    recency_weight: float
    richness_weight: float
    reputation_weight: float
    fusion_method: FusionMethod
    dense_weight: float
    recency_mode: RecencyMode
    recency_half_life_days: float
    reputation_prior_strength: float
    updated_unix: int
    is_default: bool
    reranker: str
    rerank_top_n: int
    rerank_weight: float
    model_sha256: str
    feature_version: int
    feedback_expansion: str
    fold_duplicates: bool
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., relevancy_weight: _Optional[float] = ..., recency_weight: _Optional[float] = ..., richness_weight: _Optional[float] = ..., reputation_weight: _Optional[float] = ..., fusion_method: _Optional[_Union[FusionMethod, str]] = ..., dense_weight: _Optional[float] = ..., recency_mode: _Optional[_Union[RecencyMode, str]] = ..., recency_half_life_days: _Optional[float] = ..., reputation_prior_strength: _Optional[float] = ..., updated_unix: _Optional[int] = ..., is_default: _Optional[bool] = ..., reranker: _Optional[str] = ..., rerank_top_n: _Optional[int] = ..., rerank_weight: _Optional[float] = ..., model_sha256: _Optional[str] = ..., feature_version: _Optional[int] = ..., feedback_expansion: _Optional[str] = ..., fold_duplicates: _Optional[bool] = ...) -> None: ...

class Feedback(_message.Message):
    __slots__ = ("tenant_id", "target", "target_id", "helpful", "user_id", "comment", "search_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    HELPFUL_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    SEARCH_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    target: FeedbackTarget
    target_id: str
    helpful: bool
    user_id: str
    comment: str
    search_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., target: _Optional[_Union[FeedbackTarget, str]] = ..., target_id: _Optional[str] = ..., helpful: _Optional[bool] = ..., user_id: _Optional[str] = ..., comment: _Optional[str] = ..., search_id: _Optional[str] = ...) -> None: ...

class FeedbackAck(_message.Message):
    __slots__ = ("artifact_id", "feedback_helpful", "feedback_unhelpful", "reputation", "reputation_prior")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_HELPFUL_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_UNHELPFUL_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_FIELD_NUMBER: _ClassVar[int]
    REPUTATION_PRIOR_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    feedback_helpful: int
    feedback_unhelpful: int
    reputation: float
    reputation_prior: float
    def __init__(self, artifact_id: _Optional[str] = ..., feedback_helpful: _Optional[int] = ..., feedback_unhelpful: _Optional[int] = ..., reputation: _Optional[float] = ..., reputation_prior: _Optional[float] = ...) -> None: ...

class GetRankingProfileRequest(_message.Message):
    __slots__ = ("tenant_id", "persona_id", "name", "version")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    name: str
    version: int
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ListRankingProfilesRequest(_message.Message):
    __slots__ = ("tenant_id", "persona_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ...) -> None: ...

class ListRankingProfilesResponse(_message.Message):
    __slots__ = ("profiles",)
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    profiles: _containers.RepeatedCompositeFieldContainer[RankingProfile]
    def __init__(self, profiles: _Optional[_Iterable[_Union[RankingProfile, _Mapping]]] = ...) -> None: ...

class Persona(_message.Message):
    __slots__ = ("tenant_id", "persona_id", "display_name", "system_prompt", "allowed_tools", "allowed_sources", "llm_model", "updated_unix", "tools_disabled")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_SOURCES_FIELD_NUMBER: _ClassVar[int]
    LLM_MODEL_FIELD_NUMBER: _ClassVar[int]
    UPDATED_UNIX_FIELD_NUMBER: _ClassVar[int]
    TOOLS_DISABLED_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    display_name: str
    system_prompt: str
    allowed_tools: _containers.RepeatedScalarFieldContainer[str]
    allowed_sources: _containers.RepeatedScalarFieldContainer[str]
    llm_model: str
    updated_unix: int
    tools_disabled: bool
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ..., display_name: _Optional[str] = ..., system_prompt: _Optional[str] = ..., allowed_tools: _Optional[_Iterable[str]] = ..., allowed_sources: _Optional[_Iterable[str]] = ..., llm_model: _Optional[str] = ..., updated_unix: _Optional[int] = ..., tools_disabled: _Optional[bool] = ...) -> None: ...

class GetPersonaRequest(_message.Message):
    __slots__ = ("tenant_id", "persona_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PERSONA_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    persona_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., persona_id: _Optional[str] = ...) -> None: ...

class ListPersonasRequest(_message.Message):
    __slots__ = ("tenant_id",)
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    def __init__(self, tenant_id: _Optional[str] = ...) -> None: ...

class ListPersonasResponse(_message.Message):
    __slots__ = ("personas",)
    PERSONAS_FIELD_NUMBER: _ClassVar[int]
    personas: _containers.RepeatedCompositeFieldContainer[Persona]
    def __init__(self, personas: _Optional[_Iterable[_Union[Persona, _Mapping]]] = ...) -> None: ...
