"""The standard RAG tools and the signed document route, over the RagPipeline core.

    rag_search                  seed 002: 1-5 phrases -> {"status", "segments"}; errors are JSON-RPC errors
    verify_document_access      seed 002: segment_uid -> {has_access, refreshed_url, access_level, error}
    rag_discover_resources      seed 000: the caller's visible data sources (source_id)
    rag_get_raw_results         seed 000: ranked hits from chosen sources
    rag_get_synthesized_results seed 000: an answer with citations over those hits
    GET /documents/{entry_id}   the target of every signed link (source_url, uri, refreshed_url)

Identity always comes from the request (shared.auth.RequestIdentity); the seed-000 `username`
argument is accepted for contract compatibility and overwritten by the authenticated user.
`user_token` (seed 000's sensitive parameter) is verified here, never logged, traced, echoed
or sent to the LLM. Access rules: services/rag_pipeline/access.py. Every call is audited.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal
from urllib.parse import quote

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from opentelemetry import trace
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import Hit, SearchFilters
from services.llm_orchestration.client import LlmOrchestrationClient
from services.rag_pipeline.access import AccessPolicy, Scope, SourceView
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import Preferences, RankedResult, SearchRequest, SearchResponse
from shared.audit import AuditEvent, AuditLog
from shared.auth import RequestIdentity, TokenRejected
from shared.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    NucleusError,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    UpstreamFailed,
)
from shared.identity import Principal
from shared.mcp_errors import guarded
from shared.signing import DOCUMENT_PREFIX, LinkRejected, LinkSigner

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.rag_tools")

CONTRACT_VERSION = "rag-tools-v1"
PROVIDER = "nucleus-rag"
MAX_PHRASE_CHARS = 2_000
MAX_SEGMENTS = 20
DEFAULT_SEGMENTS = 8
MAX_SOURCES = 50
MAX_TOP_K = 50
HEADLINE_WORDS = 10
SEED_002_TOOLS = ("rag_search", "verify_document_access")

ErrorCode = Literal["unauthorized_user", "unauthorized_source", "rate_limited", "invalid_source",
                    "backend_unavailable", "token_expired"]
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


# ---------------------------------------------------------------------------- seed 002 types
class SegmentOut(BaseModel):
    segment_uid: str
    source_file_name: str
    source_file_type: str
    headline: str | None = None
    segment_summary: str | None = None
    raw_text: str
    source_url: str | None = None


class RagSearchOut(BaseModel):
    status: Literal["success"] = "success"
    segments: list[SegmentOut]


class DocumentAccessOut(BaseModel):
    has_access: bool
    refreshed_url: str | None = None
    access_level: str | None = None
    error: str | None = None


class RagSearchArgs(BaseModel):
    """rag_search's arguments, checked before the tool runs so that bad ones are JSON-RPC -32602."""

    search_phrases: SearchPhrases
    max_segments: Annotated[int, Field(ge=1, le=MAX_SEGMENTS)] = DEFAULT_SEGMENTS


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
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    model: str | None = None
    method: str | None = None
    tokens: int | None = None
    latency_ms: float | None = None


class ArtifactOut(BaseModel):
    name: str
    mime_type: str
    data: str


class DiscoverFiltersIn(BaseModel):
    types: list[str] | None = None
    tags: list[str] | None = None
    search: Annotated[str | None, Field(max_length=256)] = None
    page: Annotated[int, Field(ge=1)] = 1
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


class PagingOut(BaseModel):
    page: int
    page_size: int
    total: int | None = None


class DiscoverResultsOut(BaseModel):
    resources: list[ResourceOut]
    paging: PagingOut | None = None
    error: ErrorOut | None = None


class DiscoverOut(BaseModel):
    results: DiscoverResultsOut
    meta_data: MetaOut
    artifacts: list[ArtifactOut] = Field(default_factory=list)
    contract_version: str = CONTRACT_VERSION


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
    source_uri: str | None = None            # the original location, only if it is an http(s) URL
    file_name: str
    file_type: str
    chunk_index: int
    headline: str
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


class RawStatsOut(BaseModel):
    total_found: int | None = None
    top_k: int
    elapsed_ms: float


class RawResultsOut(BaseModel):
    hits: list[HitOut]
    stats: RawStatsOut | None = None
    error: ErrorOut | None = None


class RawOut(BaseModel):
    results: RawResultsOut
    meta_data: MetaOut
    artifacts: list[ArtifactOut] = Field(default_factory=list)
    contract_version: str = CONTRACT_VERSION


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


class SynthOut(BaseModel):
    results: SynthResultsOut
    meta_data: MetaOut
    artifacts: list[ArtifactOut] = Field(default_factory=list)
    contract_version: str = CONTRACT_VERSION


# ---------------------------------------------------------------------------- helpers
class _Refused(Exception):
    """A seed-000 call that ends with `results.error` (not a tool error)."""

    def __init__(self, code: ErrorCode, message: str, source_errors: list[SourceErrorOut] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.source_errors = source_errors or []


def _code_for(err: NucleusError) -> ErrorCode | None:
    if isinstance(err, TokenRejected) and err.reason == "expired":
        return "token_expired"
    if isinstance(err, Unauthenticated):
        return "unauthorized_user"
    if isinstance(err, PermissionDenied):
        return "unauthorized_source"
    if isinstance(err, ResourceExhausted):
        return "rate_limited"
    if isinstance(err, (Unavailable, DeadlineExceeded, UpstreamFailed)):
        return "backend_unavailable"
    return None


def jsonrpc_error(err: NucleusError) -> MCPError:
    """Seed 002's error shape: a JSON-RPC error (-32602 bad params, -32603 internal, -320xx ours)."""
    if isinstance(err, InvalidArgument):
        return MCPError(INVALID_PARAMS, f"Invalid params: {err.message}")
    if isinstance(err, Unauthenticated):
        return MCPError(-32001, f"Unauthorized: {err.message}")
    if isinstance(err, PermissionDenied):
        return MCPError(-32003, f"Forbidden: {err.message}")
    if isinstance(err, ResourceExhausted):
        return MCPError(-32029, f"Rate limited: {err.message}")
    return MCPError(INTERNAL_ERROR, f"RAG search failed: {err.message}")


def _pydantic_problem(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def _iso(unix: int) -> str | None:
    if not unix:
        return None
    return dt.datetime.fromtimestamp(unix, tz=dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _unix(value: str | None, field: str) -> int:
    if not value:
        return 0
    text = value.strip()
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(field, f"{value!r} is not an ISO 8601 date (YYYY-MM-DD or a date-time)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return max(0, int(parsed.timestamp()))


def _headline(text: str) -> str:
    words = text.split()
    return " ".join(words[:HEADLINE_WORDS]) + ("…" if len(words) > HEADLINE_WORDS else "")


def _http_uri(uri: str) -> str | None:
    """Only web URLs leave the server (a file:// URI would reveal server paths)."""
    return uri if uri.startswith(("http://", "https://")) else None


def _auth_mode(principal: Principal) -> Literal["api_key", "bearer", "none"]:
    return {"api_key": "api_key", "jwt": "bearer"}.get(principal.auth_method, "none")  # type: ignore[return-value]


def _headers(ctx: Context | None) -> Mapping[str, str] | None:
    if ctx is None:
        return None
    try:
        return ctx.headers
    except ValueError:          # outside a request (direct calls in tests)
        return None


@dataclass
class _Call:
    """Book-keeping of one tool call, for meta_data and the audit record."""

    tool: str
    principal: Principal | None = None
    started: float = 0.0
    notes: list[str] | None = None

    def __post_init__(self) -> None:
        self.started = time.perf_counter()
        self.notes = []

    @property
    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000.0, 2)


# ---------------------------------------------------------------------------- the tools
class RagTools:
    """The logic of the standard RAG tools; `register` binds it to an MCPServer."""

    def __init__(self, pipeline: RagPipeline, knowledge: KnowledgeStoreClient, llm: LlmOrchestrationClient,
                 identity: RequestIdentity, access: AccessPolicy, signer: LinkSigner, audit: AuditLog, *,
                 synth_timeout_s: float = 30.0) -> None:
        self.pipeline = pipeline
        self.ks = knowledge
        self.llm = llm
        self.identity = identity
        self.access = access
        self.signer = signer
        self.audit = audit
        self.synth_timeout_s = synth_timeout_s

    # -- identity --------------------------------------------------------------------------
    def principal(self, ctx: Context | None) -> Principal:
        return self.identity.principal(_headers(ctx))

    def _caller(self, call: _Call, ctx: Context | None, username: str | None, user_token: str | None) -> Principal:
        """The principal a seed-000 call runs as; the username argument never decides it."""
        who = self.principal(ctx)
        if user_token:
            who = self.identity.principal_for_user_token(user_token, who)
            call.notes.append("identity from user_token")
        call.principal = who
        if username and username != who.user_id:
            call.notes.append(f"username argument {username[:64]!r} overwritten by the authenticated user")
        ignored = who.extra.get("ignored_headers")
        if ignored:
            call.notes.append(f"ignored {ignored}: the credential is not a trusted platform key")
        return who

    def _audit(self, call: _Call, decision: Literal["allow", "deny"], reason: str = "", *,
               resources: tuple[str, ...] | list[str] = (), entries: tuple[str, ...] | list[str] = ()) -> None:
        self.audit.record(AuditEvent.for_principal(call.principal, event="tool", decision=decision, tool=call.tool,
                                                   reason=reason, resources=list(resources),
                                                   entries=list(entries), notes=call.notes or ()))

    def _link(self, who: Principal, entry_id: str) -> str:
        return self.signer.sign(entry_id, who.tenant_id, who.user_id, who.groups)

    # -- searching -------------------------------------------------------------------------
    async def _search(self, who: Principal, query: str, scope: Scope, top_k: int, *,
                      extra_phrases: tuple[str, ...] = (), rerank: bool = False) -> tuple[SearchResponse,
                                                                                          list[RankedResult]]:
        request = SearchRequest(tenant_id=who.tenant_id, query=query, top_k_final=top_k,
                                prefs=Preferences(rerank=rerank, explain=True), filters=scope.filters,
                                extra_phrases=extra_phrases)
        response = await self.pipeline.search_and_rank(request)
        kept = [r for r in response.results if scope.keep(r.artifact.tags)]
        return response, kept

    async def _vet_sources(self, who: Principal, requested: list[str]) -> tuple[list[str], list[SourceErrorOut],
                                                                             dict[str, SourceView]]:
        views = await self.access.sources(who.tenant_id)
        allowed: list[str] = []
        errors: list[SourceErrorOut] = []
        for sid in dict.fromkeys(requested):
            view = views.get(sid)
            if view is None:
                errors.append(SourceErrorOut(source=sid, code="invalid_source",
                                             message=f"source '{sid}' does not exist in tenant '{who.tenant_id}'"))
            elif not view.visible_to(who.groups):
                errors.append(SourceErrorOut(source=sid, code="unauthorized_source",
                                             message=f"source '{sid}' is not visible to user '{who.user_id}'"))
            else:
                allowed.append(sid)
        return allowed, errors, views

    # -- rag_search ------------------------------------------------------------------------
    async def rag_search(self, ctx: Context | None, search_phrases: list[str],
                         max_segments: int = DEFAULT_SEGMENTS) -> RagSearchOut:
        call = _Call("rag_search")
        try:
            who = self.principal(ctx)
            call.principal = who
            if who.extra.get("ignored_headers"):
                call.notes.append(f"ignored {who.extra['ignored_headers']}: not a trusted platform key")
            phrases = [p.strip() for p in search_phrases]
            for i, p in enumerate(phrases):
                if not p:
                    raise InvalidArgument(f"search_phrases[{i}]", "must not be empty or only whitespace")
            scope = await self.access.scope(who)
            if who.session_tags:
                call.notes.append(f"session_tags={','.join(who.session_tags)[:300]}")
            if scope.empty:
                self._audit(call, "allow", "no visible sources")
                return RagSearchOut(segments=[])
            try:
                response, kept = await self._search(who, phrases[0], scope, max_segments,
                                                    extra_phrases=tuple(phrases[1:]))
            except NotFound:        # nothing ingested for this tenant yet
                self._audit(call, "allow", "tenant has no knowledge")
                return RagSearchOut(segments=[])
            segments = [self._segment(who, r) for r in kept[:max_segments]]
            if response.degraded:
                call.notes.append("degraded: " + "; ".join(response.degraded_reasons)[:300])
            self._audit(call, "allow", resources=sorted({r.artifact.source_id for r in kept}),
                        entries=[s.segment_uid for s in segments])
            return RagSearchOut(segments=segments)
        except NucleusError as err:
            self._audit(call, "deny", f"{err.kind}: {err.message}")
            raise jsonrpc_error(err) from None

    def _segment(self, who: Principal, r: RankedResult) -> SegmentOut:
        e, a = r.entry, r.artifact
        return SegmentOut(
            segment_uid=e.id, source_file_name=a.file_name or a.title or a.artifact_id,
            source_file_type=a.file_type or a.source_type or "text",
            headline=_headline(e.headline or a.title) or None, segment_summary=(e.content_summary or r.snippet) or None,
            raw_text=e.text, source_url=self._link(who, e.id))

    # -- verify_document_access ------------------------------------------------------------
    async def verify_document_access(self, ctx: Context | None, segment_uid: str) -> DocumentAccessOut:
        call = _Call("verify_document_access")
        try:
            who = self.principal(ctx)
        except NucleusError as err:
            self._audit(call, "deny", f"{err.kind}: {err.message}")
            raise jsonrpc_error(err) from None
        call.principal = who
        denied = DocumentAccessOut(has_access=False, error="Document has been deleted or does not exist")
        try:
            hits = await self.ks.get_entries(who.tenant_id, [segment_uid])
        except (NotFound, InvalidArgument):
            hits = []
        except NucleusError as err:
            self._audit(call, "deny", f"{err.kind}: {err.message}", entries=[segment_uid])
            raise jsonrpc_error(err) from None
        if not hits:
            self._audit(call, "deny", "entry not found", entries=[segment_uid])
            return denied
        reason = self.access.entry_denial(who, hits[0])
        if reason:
            self._audit(call, "deny", reason, resources=[hits[0].artifact.source_id], entries=[segment_uid])
            return DocumentAccessOut(has_access=False, error="Access to this document is not permitted for this user")
        self._audit(call, "allow", resources=[hits[0].artifact.source_id], entries=[segment_uid])
        return DocumentAccessOut(has_access=True, refreshed_url=self._link(who, segment_uid), access_level="view")

    # -- rag_discover_resources ------------------------------------------------------------
    async def discover(self, ctx: Context | None, username: str, filters: DiscoverFiltersIn | None,
                       user_token: str | None) -> DiscoverOut:
        call = _Call("rag_discover_resources")
        f = filters or DiscoverFiltersIn()
        try:
            who = self._caller(call, ctx, username, user_token)
            views = await self.access.sources(who.tenant_id)
        except NucleusError as err:
            return self._discover_refused(call, err, f)
        visible = [v for v in views.values() if v.visible_to(who.groups)]
        if f.types:
            visible = [v for v in visible if set(v.source_types) & set(f.types)]
        if f.tags:
            visible = [v for v in visible if set(v.tags) & set(f.tags)]
        if f.search:
            needle = f.search.lower()
            visible = [v for v in visible if needle in v.source_id.lower() or needle in v.name.lower()]
        visible.sort(key=lambda v: v.source_id)
        page = visible[(f.page - 1) * f.page_size: f.page * f.page_size]
        resources = [self._resource(who, v) for v in page]
        self._audit(call, "allow", resources=[r.id for r in resources])
        return DiscoverOut(
            results=DiscoverResultsOut(resources=resources, paging=PagingOut(page=f.page, page_size=f.page_size,
                                                                             total=len(visible))),
            meta_data=MetaOut(elapsed_ms=call.elapsed_ms, username=who.user_id, notes=call.notes or []))

    def _resource(self, who: Principal, v: SourceView) -> ResourceOut:
        full = v.fully_visible_to(who.groups)
        return ResourceOut(
            id=v.source_id, name=v.name, sourceType=v.source_types[0] if len(v.source_types) == 1 else "mixed",
            sourceId=v.source_id, authRequired=bool(v.groups), authMode=_auth_mode(who), groups=list(v.groups),
            scopes=["read"], lastIndexed=_iso(v.last_indexed_unix),
            counts=CountsOut(docs=v.artifacts, chunks=v.entries) if full else None)

    def _discover_refused(self, call: _Call, err: NucleusError, f: DiscoverFiltersIn) -> DiscoverOut:
        code = _code_for(err)
        if code is None:
            raise err
        self._audit(call, "deny", f"{code}: {err.message}")
        return DiscoverOut(
            results=DiscoverResultsOut(resources=[], paging=PagingOut(page=f.page, page_size=f.page_size, total=0),
                                       error=ErrorOut(code=code, message=err.message)),
            meta_data=MetaOut(elapsed_ms=call.elapsed_ms, username=call.principal.user_id if call.principal else "",
                              error=ErrorOut(code=code, message=err.message), notes=call.notes or []))

    # -- rag_get_raw_results ---------------------------------------------------------------
    async def raw_results(self, ctx: Context | None, username: str, query: str, sources: list[str], top_k: int,
                          filters: RawFiltersIn | None, ranking: RankingIn | None,
                          user_token: str | None) -> RawOut:
        call = _Call("rag_get_raw_results")
        meta = MetaOut()
        try:
            who = self._caller(call, ctx, username, user_token)
            meta.username = who.user_id
            base = self._base_filters(filters)
            allowed, source_errors, _views = await self._vet_sources(who, sources)
            meta.source_errors = source_errors
            if not allowed:
                raise _Refused(_worst(source_errors), "; ".join(e.message for e in source_errors), source_errors)
            scope = await self.access.scope(who, base=base, only_sources=tuple(allowed))
            if ranking is not None and ranking.model:
                call.notes.append("ranking.model is not selectable here; the service's re-ranker was used")
            if scope.empty:
                response, kept = None, []
            else:
                response, kept = await self._search(who, query, scope, top_k,
                                                    rerank=bool(ranking and ranking.rerank))
        except _Refused as refused:
            return self._raw_refused(call, meta, refused, top_k, sources)
        except NucleusError as err:
            code = _code_for(err)
            if code is None:
                raise
            return self._raw_refused(call, meta, _Refused(code, err.message), top_k, sources)
        hits = [self._hit(who, r) for r in kept]
        if response is not None:
            meta.degraded, meta.degraded_reasons = response.degraded, list(response.degraded_reasons)
        meta.elapsed_ms, meta.notes = call.elapsed_ms, call.notes or []
        meta.error = _worst_error(source_errors)
        self._audit(call, "allow", "; ".join(f"{e.code}: {e.source}" for e in source_errors), resources=allowed,
                    entries=[h.id for h in hits])
        per_source = {sid: sum(1 for h in hits if h.resourceId == sid) for sid in allowed}
        return RawOut(
            results=RawResultsOut(hits=hits, stats=RawStatsOut(
                total_found=response.candidates_considered if response is not None else 0, top_k=top_k,
                elapsed_ms=meta.elapsed_ms)),
            meta_data=meta,
            artifacts=[ArtifactOut(name="per_source_hits.json", mime_type="application/json",
                                   data=json.dumps(per_source))])

    def _base_filters(self, filters: RawFiltersIn | None) -> SearchFilters:
        f = filters or RawFiltersIn()
        return SearchFilters(date_from_unix=_unix(f.date_from, "filters.date_from"),
                             date_to_unix=_unix(f.date_to, "filters.date_to"), tags=tuple(f.tags or ()),
                             owners=tuple(f.owners or ()))

    def _hit(self, who: Principal, r: RankedResult) -> HitOut:
        e, a = r.entry, r.artifact
        rel, rec, rich, rep = r.scores
        return HitOut(
            id=e.id, score=round(r.overall, 6), snippet=r.snippet, chunk=e.text, title=a.title or a.file_name,
            uri=self._link(who, e.id), resourceId=a.source_id, sourceId=a.artifact_id,
            provenance=ProvenanceOut(artifact_id=a.artifact_id, source_type=a.source_type,
                                     source_uri=_http_uri(a.source_uri), file_name=a.file_name,
                                     file_type=a.file_type, chunk_index=e.chunk_index, headline=e.headline,
                                     scores=ScoresOut(relevancy=rel, recency=rec, richness=rich, reputation=rep)),
            timestamp=_iso(e.timestamp_unix or a.modified_unix or a.created_unix))

    def _raw_refused(self, call: _Call, meta: MetaOut, refused: _Refused, top_k: int, sources: list[str]) -> RawOut:
        self._audit(call, "deny", f"{refused.code}: {refused.message}", resources=sources)
        error = ErrorOut(code=refused.code, message=refused.message)
        meta.error, meta.elapsed_ms, meta.notes = error, call.elapsed_ms, call.notes or []
        meta.source_errors = refused.source_errors or meta.source_errors
        if call.principal is not None:
            meta.username = call.principal.user_id
        return RawOut(results=RawResultsOut(hits=[], stats=RawStatsOut(total_found=0, top_k=top_k,
                                                                       elapsed_ms=meta.elapsed_ms), error=error),
                      meta_data=meta)

    # -- rag_get_synthesized_results -------------------------------------------------------
    async def synthesized_results(self, ctx: Context | None, username: str, query: str, sources: list[str] | None,
                                  top_k: int, synthesis_params: SynthesisParamsIn | None,
                                  provided_context: ProvidedContextIn | None, user_token: str | None) -> SynthOut:
        call = _Call("rag_get_synthesized_results")
        meta = MetaOut()
        params = synthesis_params or SynthesisParamsIn()
        try:
            who = self._caller(call, ctx, username, user_token)
            meta.username = who.user_id
            if not query.strip():
                raise InvalidArgument("query", "must not be empty")
            allowed: list[str] | None = None
            if sources:
                allowed, source_errors, _ = await self._vet_sources(who, sources)
                meta.source_errors = source_errors
                if not allowed:
                    raise _Refused(_worst(source_errors), "; ".join(e.message for e in source_errors), source_errors)
            if provided_context is not None and provided_context.hits:
                passages = await self._provided(who, provided_context.hits, allowed, call)
            else:
                scope = await self.access.scope(who, only_sources=tuple(allowed) if allowed else None)
                if scope.empty:
                    passages = []
                else:
                    try:
                        response, passages = await self._search(who, query, scope, top_k)
                    except NotFound:
                        response, passages = None, []
                    if response is not None and response.degraded:
                        meta.degraded, meta.degraded_reasons = True, list(response.degraded_reasons)
            if params.model:
                call.notes.append("synthesis_params.model is not selectable here; the service's model was used")
            if not passages:
                meta.elapsed_ms, meta.notes = call.elapsed_ms, call.notes or []
                self._audit(call, "allow", "no passages", resources=allowed or [])
                return SynthOut(results=SynthResultsOut(answer="", limits=LimitsOut(
                    truncated=False, reason="no visible passages matched the query")), meta_data=meta)
            ids = {f"S{i + 1}": r for i, r in enumerate(passages)}
            started = time.perf_counter()
            with tracer.start_as_current_span("rag.synthesize") as span:
                span.set_attribute("nucleus.passages", len(ids))
                answer = await self.llm.synthesize(
                    query, [(pid, r.artifact.title, r.entry.text) for pid, r in ids.items()],
                    max_chars=params.max_chars or 0, style=params.style or "", timeout_s=self.synth_timeout_s)
            meta.latency_ms = round((time.perf_counter() - started) * 1000.0, 2)
        except _Refused as refused:
            return self._synth_refused(call, meta, refused.code, refused.message, refused.source_errors)
        except NucleusError as err:
            code = _code_for(err)
            if code is None:
                raise
            return self._synth_refused(call, meta, code, err.message, [])
        citations = []
        for pid, _title in answer.citations:
            r = ids.get(pid)
            if r is not None:
                citations.append(CitationOut(id=r.entry.id, uri=self._link(who, r.entry.id),
                                             title=r.artifact.title or r.artifact.file_name,
                                             resourceId=r.artifact.source_id))
        meta.model, meta.method = answer.model or None, answer.method or None
        meta.elapsed_ms, meta.notes = call.elapsed_ms, call.notes or []
        meta.error = _worst_error(meta.source_errors)
        self._audit(call, "allow", resources=sorted({r.artifact.source_id for r in ids.values()}),
                    entries=[r.entry.id for r in ids.values()])
        bundle = [{"id": c.id, "title": c.title, "resourceId": c.resourceId} for c in citations]
        return SynthOut(
            results=SynthResultsOut(answer=answer.answer, citations=citations, limits=LimitsOut(
                truncated=answer.truncated, reason=answer.truncation_reason or None)),
            meta_data=meta,
            artifacts=[ArtifactOut(name="citations.json", mime_type="application/json", data=json.dumps(bundle))])

    async def _provided(self, who: Principal, hits: list[Any], allowed: list[str] | None,
                        call: _Call) -> list[RankedResult]:
        """Client-selected hits: only their ids are used; text is re-read from the store and each
        entry re-checked, so a client cannot smuggle in documents (or text) it may not see."""
        ids: list[str] = []
        for i, h in enumerate(hits[:MAX_TOP_K]):
            entry_id = h if isinstance(h, str) else (h.get("id") if isinstance(h, dict) else None)
            if not isinstance(entry_id, str) or not entry_id:
                raise InvalidArgument(f"provided_context.hits[{i}]", "must be an entry id or an object with an 'id'")
            ids.append(entry_id)
        try:
            found = await self.ks.get_entries(who.tenant_id, ids)
        except NotFound:
            found = []
        kept: list[Hit] = []
        for hit in found:
            if self.access.entry_denial(who, hit) or (allowed is not None and hit.artifact.source_id not in allowed):
                continue
            kept.append(hit)
        dropped = len(ids) - len(kept)
        if dropped:
            call.notes.append(f"{dropped} provided hit(s) dropped: unknown or not visible")
        return [RankedResult(entry=h.entry, artifact=h.artifact, snippet="", overall=0.0, scores=(0.0, 0.0, 0.0, 0.0),
                             explanation=None) for h in kept]

    def _synth_refused(self, call: _Call, meta: MetaOut, code: ErrorCode, message: str,
                       source_errors: list[SourceErrorOut]) -> SynthOut:
        self._audit(call, "deny", f"{code}: {message}")
        error = ErrorOut(code=code, message=message)
        meta.error, meta.elapsed_ms, meta.notes = error, call.elapsed_ms, call.notes or []
        meta.source_errors = source_errors or meta.source_errors
        if call.principal is not None:
            meta.username = call.principal.user_id
        return SynthOut(results=SynthResultsOut(answer="", error=error), meta_data=meta)

    # -- GET /documents/{entry_id} ---------------------------------------------------------
    async def open_document(self, request: Request) -> Response:
        entry_id = request.path_params.get("entry_id", "")
        call = _Call("GET /documents")
        headers = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                   "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "default-src 'none'"}
        try:
            claims = self.signer.verify_link(f"{DOCUMENT_PREFIX}{quote(entry_id, safe='')}?{request.url.query}")
        except LinkRejected as err:
            self.audit.record(AuditEvent(event="document", decision="deny", tool=call.tool, reason=f"link {err.reason}",
                                         entries=(entry_id[:256],)))
            return JSONResponse({"error": f"link {err.reason}", "message": err.message}, status_code=403,
                                headers=headers)
        who = Principal(tenant_id=claims.tenant_id, user_id=claims.user_id, groups=claims.groups,
                        auth_method="signed_link")
        call.principal = who
        try:
            hits = await self.ks.get_entries(who.tenant_id, [claims.entry_id])
        except (NotFound, InvalidArgument):
            hits = []
        except NucleusError as err:
            self._audit(call, "deny", f"{err.kind}: {err.message}", entries=[claims.entry_id])
            return JSONResponse({"error": "backend_unavailable"}, status_code=503, headers=headers)
        if not hits:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool=call.tool,
                                                       reason="entry not found", entries=[claims.entry_id]))
            return JSONResponse({"error": "not_found"}, status_code=404, headers=headers)
        reason = self.access.entry_denial(replace(who, session_tags=()), hits[0])
        if reason:
            self.audit.record(AuditEvent.for_principal(who, event="document", decision="deny", tool=call.tool,
                                                       reason=reason, resources=[hits[0].artifact.source_id],
                                                       entries=[claims.entry_id]))
            return JSONResponse({"error": "forbidden"}, status_code=403, headers=headers)
        self.audit.record(AuditEvent.for_principal(who, event="document", decision="allow", tool=call.tool,
                                                   resources=[hits[0].artifact.source_id], entries=[claims.entry_id]))
        return PlainTextResponse(hits[0].entry.text, headers=headers)

    # -- registration ----------------------------------------------------------------------
    def register(self, mcp: MCPServer) -> None:
        tools = self

        @mcp.tool(name="rag_search", description=(
            "Searches the knowledge base for relevant information using semantic search. Give 1-5 search "
            "phrases: the first is the user's exact input, the others rephrasings; all are searched in "
            "parallel and the union is ranked. Returns up to 20 segments with signed source links."))
        async def rag_search(search_phrases: SearchPhrases, ctx: Context,
                             max_segments: Annotated[int, Field(ge=1, le=MAX_SEGMENTS, description=(
                                 "How many segments to return (default 8, at most 20)"))] = DEFAULT_SEGMENTS,
                             ) -> RagSearchOut:
            return await tools.rag_search(ctx, search_phrases, max_segments)

        @mcp.tool(name="verify_document_access", description=(
            "Verify that the current user may still open a document segment returned by rag_search, and get a "
            "fresh signed URL for it."))
        async def verify_document_access(
                segment_uid: Annotated[str, Field(min_length=1, max_length=1024, description=(
                    "The segment_uid originally returned by rag_search"))],
                ctx: Context) -> DocumentAccessOut:
            return await tools.verify_document_access(ctx, segment_uid)

        @mcp.tool(name="rag_discover_resources", description=(
            "List the data sources (resources) of this RAG server that the authenticated user may search, "
            "with their visibility groups, last index time and sizes."))
        async def rag_discover_resources(username: Username, ctx: Context, filters: DiscoverFiltersIn | None = None,
                                         user_token: UserToken = None) -> DiscoverOut:
            return await guarded(lambda: tools.discover(ctx, username, filters, user_token))

        @mcp.tool(name="rag_get_raw_results", description=(
            "Ranked raw search hits (snippet, chunk, title, signed uri, scores) from the given data sources. "
            "Sources the user may not see are refused with unauthorized_source; unknown ids with invalid_source."))
        async def rag_get_raw_results(
                username: Username, query: Annotated[str, Field(min_length=1, max_length=4_000)],
                sources: Annotated[list[SourceId], Field(min_length=1, max_length=MAX_SOURCES)], ctx: Context,
                top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 8, filters: RawFiltersIn | None = None,
                ranking: RankingIn | None = None, user_token: UserToken = None) -> RawOut:
            return await guarded(lambda: tools.raw_results(ctx, username, query, sources, top_k, filters, ranking,
                                                           user_token))

        @mcp.tool(name="rag_get_synthesized_results", description=(
            "An answer to the query synthesized only from passages the user may see, with citations "
            "(signed uri, title, resourceId) and truncation limits."))
        async def rag_get_synthesized_results(
                username: Username, query: Annotated[str, Field(min_length=1, max_length=4_000)], ctx: Context,
                sources: Annotated[list[SourceId] | None, Field(max_length=MAX_SOURCES)] = None,
                top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 8,
                synthesis_params: SynthesisParamsIn | None = None, provided_context: ProvidedContextIn | None = None,
                user_token: UserToken = None) -> SynthOut:
            return await guarded(lambda: tools.synthesized_results(
                ctx, username, query, sources, top_k, synthesis_params, provided_context, user_token))

        mcp.custom_route(DOCUMENT_PREFIX + "{entry_id:path}", methods=["GET"], name="document",
                         include_in_schema=False)(self.open_document)
        mcp.middleware.append(seed_002_param_errors)


_ARGS = {"rag_search": RagSearchArgs, "verify_document_access": VerifyArgs}


async def seed_002_param_errors(ctx: Any, call_next: Any) -> Any:
    """Seed 002 asks for JSON-RPC errors: invalid rag_search / verify_document_access arguments are
    answered with -32602 naming the problem, before the tool runs (other tools keep the SDK's
    tool-error behaviour)."""
    if getattr(ctx, "method", None) == "tools/call":
        params = ctx.params or {}
        model = _ARGS.get(params.get("name")) if isinstance(params, Mapping) else None
        if model is not None:
            arguments = params.get("arguments") or {}
            try:
                model.model_validate(arguments)
            except ValidationError as err:
                raise MCPError(INVALID_PARAMS, f"Invalid params: {_pydantic_problem(err)}") from None
    return await call_next(ctx)


_SEVERITY = {"unauthorized_source": 0, "invalid_source": 1}


def _worst(errors: list[SourceErrorOut]) -> ErrorCode:
    return min((e.code for e in errors), key=lambda c: _SEVERITY.get(c, 2)) if errors else "invalid_source"


def _worst_error(errors: list[SourceErrorOut]) -> ErrorOut | None:
    if not errors:
        return None
    code = _worst(errors)
    return ErrorOut(code=code, message="; ".join(e.message for e in errors))
