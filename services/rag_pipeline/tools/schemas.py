"""The RAG tools' inputs and outputs: pydantic models (their JSON schemas are the tools'
contracts), argument types with their limits, and the limits themselves."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from services.rag_pipeline.tools.budget import BudgetOut, MaxTokens, budget_field
from services.rag_pipeline.tools.paging import Cursor, cursor_field
from shared.errors import INT32_MAX
from shared.mcp_errors import ErrorCode

CONTRACT_VERSION = "rag-tools-v1"
PROVIDER = "nucleus-rag"
MAX_PHRASE_CHARS = 2_000
MAX_SEGMENTS = 20
DEFAULT_SEGMENTS = 8
MAX_SOURCES = 50
MAX_TOP_K = 50
HEADLINE_WORDS = 10

Phrase = Annotated[str, Field(min_length=1, max_length=MAX_PHRASE_CHARS)]
SearchPhrases = Annotated[list[Phrase], Field(
    min_length=1, max_length=5,
    description="1-5 search phrases for semantic retrieval; the first is the user's unmodified input")]
Username = Annotated[str, Field(
    max_length=512, description="Injected by the calling platform. Ignored: the authenticated user is always used")]
UserToken = Annotated[str | None, Field(
    description="Sensitive, optional: the end user's own API key or JWT, so the platform need not be trusted "
                "with the user's identity. Never logged or shown to a model")]
SourceId = Annotated[str, Field(min_length=1, max_length=256)]
FoldDuplicates = Annotated[bool | None, Field(description=(
    "Optional: true folds near-identical documents into one result that lists the others in `duplicates`; "
    "false turns it off; omitted = the ranking profile's setting (off unless set; docs/RANKING.md)"))]


class DuplicateOut(BaseModel):
    """A near-identical copy folded into a result (services/rag_pipeline/merge.py): its ids and source."""
    artifact_id: str
    entry_id: str
    title: str = ""
    source_id: str = ""
    source_uri: str = ""
    file_name: str = ""


def duplicates_field() -> Any:
    """The `duplicates` field of a result: absent unless copies were folded into it (so an answer
    without folding is as before, and a `rag_search` segment keeps its seed-002 shape)."""
    return Field(default=None, exclude_if=lambda v: not v)


# ---------------------------------------------------------------------------- seed 002 types
class SegmentOut(BaseModel):
    segment_uid: str
    source_file_name: str
    source_file_type: str
    headline: str | None = None
    segment_summary: str | None = None
    raw_text: str
    source_url: str | None = None
    #: [start, end) of each word of `segment_summary` matching an analysed query term (code points)
    highlights: list[tuple[int, int]] | None = None
    duplicates: list[DuplicateOut] | None = duplicates_field()   # fold_duplicates: the copies folded into it


class SourceFateOut(BaseModel):
    """The fields every report of one source of a federated search has (SourceStatusOut here;
    search_and_rank's SourceReportOut, mcp_api.py); each adds the optional ones its contract shapes."""
    source_id: str                           # "local" or a remote source's id
    status: Literal["ok", "error", "timeout", "skipped", "refused"]
    latency_ms: float
    result_count: int


class SourceStatusOut(SourceFateOut):
    """Federation: how one source of a search fared."""
    error_message: str | None = None
    error_code: str | None = None            # the remote's own code (e.g. unauthorized_source), sanitised
    filtered: int | None = None              # hits dropped by the request's filters (fail closed)
    note: str | None = None                  # e.g. "federation loop: ..." reported by the remote


class RagSearchOut(BaseModel):
    status: Literal["success"] = "success"
    segments: list[SegmentOut]
    sources: list[SourceStatusOut] | None = None   # federation: one per source asked (absent without)
    degraded: bool | None = None                    # federation: a source failed or timed out
    search_id: str | None = None                    # name it in record_feedback when voting on a segment
    budget: BudgetOut | None = budget_field()       # max_tokens asked: how the answer was fitted (tools/budget.py)
    next_cursor: str | None = cursor_field()        # the next page's cursor (tools/paging.py); absent: no more
    _page: Any = PrivateAttr(default=None)


class DocumentAccessOut(BaseModel):
    has_access: bool
    refreshed_url: str | None = None
    access_level: str | None = None
    error: str | None = None


class RagSearchArgs(BaseModel):
    """rag_search's arguments, checked before the tool runs so that bad ones are JSON-RPC -32602."""

    search_phrases: SearchPhrases
    max_segments: Annotated[int, Field(ge=1, le=MAX_SEGMENTS)] = DEFAULT_SEGMENTS
    sources: Annotated[list[SourceId] | None, Field(max_length=MAX_SOURCES)] = None
    max_tokens: MaxTokens = None
    cursor: Cursor = None
    fold_duplicates: FoldDuplicates = None


class VerifyArgs(BaseModel):
    segment_uid: Annotated[str, Field(min_length=1, max_length=1024)]


# ---------------------------------------------------------------------------- seed 000 types
class ErrorOut(BaseModel):
    code: ErrorCode
    message: str


class SourceErrorOut(BaseModel):
    source: str
    code: ErrorCode
    message: str


class MetaOut(BaseModel):
    contract_version: str = CONTRACT_VERSION
    provider: str = PROVIDER
    version: str = CONTRACT_VERSION
    elapsed_ms: float = 0.0
    username: str = ""                       # the authenticated user the call ran as
    error: ErrorOut | None = None
    source_errors: list[SourceErrorOut] = Field(default_factory=list)
    sources: list[SourceStatusOut] | None = None    # federation: one per source asked
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    model: str | None = None
    method: str | None = None
    tokens: int | None = None
    latency_ms: float | None = None
    search_id: str | None = None             # the search behind the results (record_feedback's search_id)


class ArtifactOut(BaseModel):
    name: str
    mime_type: str
    data: str


class DiscoverFiltersIn(BaseModel):
    types: list[str] | None = None
    tags: list[str] | None = None
    search: Annotated[str | None, Field(max_length=256)] = None
    page: Annotated[int, Field(ge=1, le=INT32_MAX)] = 1
    page_size: Annotated[int, Field(ge=1, le=200)] = 50


class CountsOut(BaseModel):
    docs: int | None = None
    chunks: int | None = None


class ResourceOut(BaseModel):
    id: str
    name: str
    sourceType: str
    sourceId: str | None = None
    authRequired: bool
    authMode: Literal["username", "api_key", "bearer", "oauth", "capability", "none"]
    groups: list[str] = Field(default_factory=list)
    scopes: list[str] = Field(default_factory=list)
    lastIndexed: str | None = None
    counts: CountsOut | None = None
    serverId: str | None = None              # federation: "local" or the remote source it belongs to
    connectionStatus: Literal["connected", "action_required", "locked", "error"] | None = None
    error: str | None = None                 # federation: why a remote is not connected


class PagingOut(BaseModel):
    page: int
    page_size: int
    total: int | None = None


class DiscoverResultsOut(BaseModel):
    resources: list[ResourceOut]
    paging: PagingOut | None = None
    error: ErrorOut | None = None


class EnvelopeOut(BaseModel):
    """What every contract tool answers: its `results` (each subclass narrows the type), the meta
    data, the artifacts and the contract version, in this order."""
    results: BaseModel
    meta_data: MetaOut
    artifacts: list[ArtifactOut] = Field(default_factory=list)
    contract_version: str = CONTRACT_VERSION


class DiscoverOut(EnvelopeOut):
    results: DiscoverResultsOut


class RawFiltersIn(BaseModel):
    date_from: str | None = None             # ISO 8601 date or date-time
    date_to: str | None = None
    tags: list[str] | None = None
    owners: list[str] | None = None


class RankingIn(BaseModel):
    rerank: bool = False
    model: str | None = None


class ScoresOut(BaseModel):
    relevancy: float
    recency: float
    richness: float
    reputation: float


class ProvenanceOut(BaseModel):
    artifact_id: str
    source_type: str
    source_uri: str | None = None            # the original location, only if it is an http(s) URL;
                                             # a PDF chunk's points at its page (`#page=N`)
    file_name: str
    file_type: str
    chunk_index: int
    headline: str
    page: int | None = None                  # the PDF page the chunk comes from
    tags: list[str] | None = None            # the document's tags (a federating Nucleus filters on them)
    scores: ScoresOut


class HitOut(BaseModel):
    id: str
    score: float
    snippet: str | None = None
    chunk: str | None = None
    title: str | None = None
    uri: str | None = None                   # a signed, expiring link to the entry
    resourceId: str
    sourceId: str | None = None
    provenance: ProvenanceOut | None = None
    timestamp: str | None = None
    #: [start, end) of each word of `snippet` matching an analysed query term (code points)
    highlights: list[tuple[int, int]] | None = None
    duplicates: list[DuplicateOut] | None = duplicates_field()   # fold_duplicates: the copies folded into it


class RawStatsOut(BaseModel):
    total_found: int | None = None
    top_k: int
    elapsed_ms: float


class RawResultsOut(BaseModel):
    hits: list[HitOut]
    stats: RawStatsOut | None = None
    error: ErrorOut | None = None


class RawOut(EnvelopeOut):
    results: RawResultsOut
    budget: BudgetOut | None = budget_field()       # max_tokens asked: how the answer was fitted (tools/budget.py)
    next_cursor: str | None = cursor_field()        # the next page's cursor (tools/paging.py); absent: no more
    _page: Any = PrivateAttr(default=None)


class SynthesisParamsIn(BaseModel):
    model: str | None = None
    style: Literal["concise", "detailed", "bullets"] | None = None
    max_chars: Annotated[int | None, Field(ge=1, le=20_000)] = None


class ProvidedContextIn(BaseModel):
    hits: list[Any] | None = None            # hit objects with an "id" (or bare entry ids)


class CitationOut(BaseModel):
    id: str
    uri: str | None = None
    title: str | None = None
    resourceId: str | None = None
    offsets: dict[str, int] | None = None


class LimitsOut(BaseModel):
    truncated: bool = False
    reason: str | None = None


class SynthResultsOut(BaseModel):
    answer: str
    citations: list[CitationOut] = Field(default_factory=list)
    limits: LimitsOut = Field(default_factory=LimitsOut)
    error: ErrorOut | None = None


class SynthOut(EnvelopeOut):
    results: SynthResultsOut


JSONRPC_ARGUMENTS: dict[str, type[BaseModel]] = {"rag_search": RagSearchArgs, "verify_document_access": VerifyArgs}
"""The tools whose bad arguments are answered with JSON-RPC -32602 before they run."""
