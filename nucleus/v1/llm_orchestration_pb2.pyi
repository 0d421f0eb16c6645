from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExpansionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPANSION_METHOD_UNSPECIFIED: _ClassVar[ExpansionMethod]
    EXPANSION_METHOD_LLM: _ClassVar[ExpansionMethod]
    EXPANSION_METHOD_KEYWORDS: _ClassVar[ExpansionMethod]
    EXPANSION_METHOD_UNAVAILABLE: _ClassVar[ExpansionMethod]
EXPANSION_METHOD_UNSPECIFIED: ExpansionMethod
EXPANSION_METHOD_LLM: ExpansionMethod
EXPANSION_METHOD_KEYWORDS: ExpansionMethod
EXPANSION_METHOD_UNAVAILABLE: ExpansionMethod

class GenerateEmbeddingsRequest(_message.Message):
    __slots__ = ("texts", "purpose")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    purpose: str
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., purpose: _Optional[str] = ...) -> None: ...

class GenerateEmbeddingsResponse(_message.Message):
    __slots__ = ("vectors_f32", "dimension", "count", "model", "provider", "cache_hits")
    VECTORS_F32_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    vectors_f32: bytes
    dimension: int
    count: int
    model: str
    provider: str
    cache_hits: int
    def __init__(self, vectors_f32: _Optional[bytes] = ..., dimension: _Optional[int] = ..., count: _Optional[int] = ..., model: _Optional[str] = ..., provider: _Optional[str] = ..., cache_hits: _Optional[int] = ...) -> None: ...

class ExpandQueryRequest(_message.Message):
    __slots__ = ("query", "max_alternatives")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    query: str
    max_alternatives: int
    def __init__(self, query: _Optional[str] = ..., max_alternatives: _Optional[int] = ...) -> None: ...

class ExpandQueryResponse(_message.Message):
    __slots__ = ("phrases", "method", "note", "model")
    PHRASES_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    phrases: _containers.RepeatedScalarFieldContainer[str]
    method: ExpansionMethod
    note: str
    model: str
    def __init__(self, phrases: _Optional[_Iterable[str]] = ..., method: _Optional[_Union[ExpansionMethod, str]] = ..., note: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class RerankCandidate(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("query", "candidates", "method")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    query: str
    candidates: _containers.RepeatedCompositeFieldContainer[RerankCandidate]
    method: str
    def __init__(self, query: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[RerankCandidate, _Mapping]]] = ..., method: _Optional[str] = ...) -> None: ...

class RerankScore(_message.Message):
    __slots__ = ("id", "score")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    score: float
    def __init__(self, id: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("scores", "model", "method")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[RerankScore]
    model: str
    method: str
    def __init__(self, scores: _Optional[_Iterable[_Union[RerankScore, _Mapping]]] = ..., model: _Optional[str] = ..., method: _Optional[str] = ...) -> None: ...

class Passage(_message.Message):
    __slots__ = ("id", "text", "title")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    title: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("query", "passages", "max_chars", "style")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_FIELD_NUMBER: _ClassVar[int]
    STYLE_FIELD_NUMBER: _ClassVar[int]
    query: str
    passages: _containers.RepeatedCompositeFieldContainer[Passage]
    max_chars: int
    style: str
    def __init__(self, query: _Optional[str] = ..., passages: _Optional[_Iterable[_Union[Passage, _Mapping]]] = ..., max_chars: _Optional[int] = ..., style: _Optional[str] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("passage_id", "title")
    PASSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    passage_id: str
    title: str
    def __init__(self, passage_id: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class SynthesizeResponse(_message.Message):
    __slots__ = ("answer", "citations", "truncated", "truncation_reason", "model", "method", "degraded", "degraded_reasons")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_REASON_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASONS_FIELD_NUMBER: _ClassVar[int]
    answer: str
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    truncated: bool
    truncation_reason: str
    model: str
    method: str
    degraded: bool
    degraded_reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, answer: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., truncated: _Optional[bool] = ..., truncation_reason: _Optional[str] = ..., model: _Optional[str] = ..., method: _Optional[str] = ..., degraded: _Optional[bool] = ..., degraded_reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class ModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("embedding_model", "dimension", "embedding_provider", "chat_configured", "chat_model", "breaker_state", "rerankers")
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CHAT_CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    CHAT_MODEL_FIELD_NUMBER: _ClassVar[int]
    BREAKER_STATE_FIELD_NUMBER: _ClassVar[int]
    RERANKERS_FIELD_NUMBER: _ClassVar[int]
    embedding_model: str
    dimension: int
    embedding_provider: str
    chat_configured: bool
    chat_model: str
    breaker_state: str
    rerankers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, embedding_model: _Optional[str] = ..., dimension: _Optional[int] = ..., embedding_provider: _Optional[str] = ..., chat_configured: _Optional[bool] = ..., chat_model: _Optional[str] = ..., breaker_state: _Optional[str] = ..., rerankers: _Optional[_Iterable[str]] = ...) -> None: ...

class ChatToolCall(_message.Message):
    __slots__ = ("index", "id", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_call_id", "tool_calls")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    tool_call_id: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ChatToolCall]
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ChatToolCall, _Mapping]]] = ...) -> None: ...

class ChatTool(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class ChatCompletionRequest(_message.Message):
    __slots__ = ("messages", "tools", "tool_choice", "max_tokens", "model")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools: _containers.RepeatedCompositeFieldContainer[ChatTool]
    tool_choice: str
    max_tokens: int
    model: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[ChatTool, _Mapping]]] = ..., tool_choice: _Optional[str] = ..., max_tokens: _Optional[int] = ..., model: _Optional[str] = ...) -> None: ...

class ChatUsage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class ChatCompletionChunk(_message.Message):
    __slots__ = ("content", "tool_calls", "finish_reason", "usage", "model", "done")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ChatToolCall]
    finish_reason: str
    usage: ChatUsage
    model: str
    done: bool
    def __init__(self, content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ChatToolCall, _Mapping]]] = ..., finish_reason: _Optional[str] = ..., usage: _Optional[_Union[ChatUsage, _Mapping]] = ..., model: _Optional[str] = ..., done: _Optional[bool] = ...) -> None: ...
