"""RAGPipeline MCP adapter: typed tools over the same core as gRPC.

Tenant and user always come from the verified principal (shared.auth.principals.RequestIdentity: the
bearer token checked by the SDK's auth middleware, or the local principal over stdio), never
from tool arguments. Searches run under the caller's access scope, decided in the core
(`RagPipeline.search`, services/rag_pipeline/access.py) as for gRPC. Errors are translated
once, here, into MCP tool errors (shared/mcp_errors.py).

    search_and_rank, rag_why_not, put/get/list_ranking_profile(s), record_feedback   (this module)
    rag_search, verify_document_access, rag_discover_resources,
    rag_get_raw_results, rag_get_synthesized_results, GET /documents/…  (tools/)
"""
from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated, Any, Callable, Literal, get_type_hints

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult
from pydantic import BaseModel, Field, PrivateAttr, create_model

from ranking.inputs import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_HALF_LIFE_DAYS,
    DEFAULT_PRIOR_STRENGTH,
    DEFAULT_RECENCY_MODE,
    Fusion,
    RecencyMode,
)
from ranking.profile import DEFAULT_RERANK_TOP_N, DEFAULT_RERANK_WEIGHT, MAX_RERANK_TOP_N, RankingProfile
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.federation.runtime import request_headers
from services.rag_pipeline.models import (
    Explanation, FourR, Preferences, RankedResult, SearchRequest, SearchResponse, explanation_values,
)
from services.rag_pipeline.tools import RagTools, register_rag_tools
from services.rag_pipeline.pages import Pages
from services.rag_pipeline.merge import duplicate_values
from services.rag_pipeline.tools.schemas import DuplicateOut, FoldDuplicates, SourceFateOut, duplicates_field
from services.rag_pipeline.why_not import MAX_IDS as WHY_NOT_MAX_IDS, WhyNotOut, why_not
from services.rag_pipeline.tools.budget import RANKED, BudgetOut, MaxTokens, budget_field
from services.rag_pipeline.tools.paging import Cursor, cursor_field, fit_page
from services.rag_pipeline.tools.topics import register_topic_tools
from services.rag_pipeline.topics import TopicTools
from shared.errors import INT32_MAX
from shared.identity import Principal
from shared.mcp_annotations import ADD, OVERWRITE, READ
from shared.errors import InvalidArgument
from shared.mcp_errors import guarded, jsonrpc_error
from shared.mcp_schemas import FiltersIn
from services.rag_pipeline.tools.calls import tool_audit_middleware
from shared.ratelimit import RateLimiter
from shared.ratelimit_adapters import rate_limit_middleware
from shared.records import artifact_values

class FourRScoresOut(BaseModel):
    relevancy: float
    recency: float
    richness: float
    reputation: float


def _explanation_out() -> type[BaseModel]:
    """ExplanationOut: the fields of models.Explanation, in order, with the same defaults (a
    per-factor tuple as FourRScoresOut)."""
    spec: dict[str, Any] = {}
    for f in fields(Explanation):
        hint = _EXPLANATION_HINTS[f.name]
        spec[f.name] = (FourRScoresOut if hint == FourR else hint, ... if f.default is MISSING else f.default)
    return create_model("ExplanationOut", __module__=__name__, **spec)


_EXPLANATION_HINTS = get_type_hints(Explanation)
ExplanationOut = _explanation_out()


class ArtifactSummaryOut(BaseModel):
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
    tags: list[str]


_SUMMARY_OUT_FIELDS = tuple(ArtifactSummaryOut.model_fields)


class RankedResultOut(BaseModel):
    persona_knowledge_entry_id: str
    associated_artifact: ArtifactSummaryOut
    snippet: str
    headline: str
    overall_rank_score: float
    individual_scores: FourRScoresOut
    explanation: ExplanationOut | None = None
    relevance_probability: float = 0.0      # calibrated P(relevant); relevancy is the ordinal 4R score
    source_id: str = "local"                # "local" or the remote source it comes from (federation)
    #: [start, end) of each word of `snippet` matching an analysed query term, in Unicode code points
    highlights: list[tuple[int, int]] = Field(default_factory=list)
    #: the signed link of the document (docs/MCP.md); a federated one's is recorded as handed to the caller,
    #: so verify_document_access answers for it. None: a remote result without an http(s) URL
    uri: str | None = None
    duplicates: list[DuplicateOut] | None = duplicates_field()   # fold_duplicates: the copies folded into it


class SourceReportOut(SourceFateOut):
    """How one source of a federated query fared."""
    error_message: str = ""
    error_code: str = ""                    # the remote's own code (e.g. unauthorized_source), sanitised
    filtered: int = 0                       # hits dropped by the request's filters (fail closed)
    note: str = ""                          # e.g. "federation loop: ..." reported by the remote


class SearchAndRankOut(BaseModel):
    """Seed 001 SearchAndRankResponse, plus degraded flags and the profile that ranked it."""

    results: list[RankedResultOut]
    debug_information: str
    error_message: str = ""
    degraded: bool
    degraded_reasons: list[str]
    profile_name: str
    profile_version: int
    query_phrases: list[str]
    temporal_intent: bool
    sources: list[SourceReportOut] = Field(default_factory=list)   # federation: one per source asked
    search_id: str = ""               # name it in record_feedback to vote on a result of this answer
    budget: BudgetOut | None = budget_field()   # max_tokens asked: how the answer was fitted (tools/budget.py)
    next_cursor: str | None = cursor_field()    # the next page's cursor (tools/paging.py); absent: no more
    _page: Any = PrivateAttr(default=None)


class WeightsIn(BaseModel):
    relevancy: float = Field(ge=0)
    recency: float = Field(ge=0)
    richness: float = Field(ge=0)
    reputation: float = Field(ge=0)


class ProfileOut(BaseModel):
    name: str
    version: int
    persona_id: str
    relevancy_weight: float
    recency_weight: float
    richness_weight: float
    reputation_weight: float
    fusion_method: str
    dense_weight: float
    recency_mode: str
    recency_half_life_days: float
    reputation_prior_strength: float
    is_default: bool
    updated_unix: int
    reranker: str
    rerank_top_n: int
    rerank_weight: float
    model_sha256: str = ""
    feature_version: int = 0
    feedback_expansion: str = ""
    fold_duplicates: bool = False


class ProfileListOut(BaseModel):
    profiles: list[ProfileOut]


class FeedbackOut(BaseModel):
    artifact_id: str
    feedback_helpful: int
    feedback_unhelpful: int
    reputation: float


def four(values: tuple[float, float, float, float]) -> FourRScoresOut:
    return FourRScoresOut(relevancy=values[0], recency=values[1], richness=values[2], reputation=values[3])


def search_response_out(r: SearchResponse, link: Callable[[RankedResult], str] = lambda _: "") -> SearchAndRankOut:
    results = []
    for x in r.results:
        a = x.artifact
        e = x.explanation
        results.append(RankedResultOut(
            persona_knowledge_entry_id=x.entry.id,
            associated_artifact=ArtifactSummaryOut(**artifact_values(a, _SUMMARY_OUT_FIELDS)),
            snippet=x.snippet, headline=x.entry.headline, overall_rank_score=x.overall,
            individual_scores=four(x.scores), relevance_probability=x.probability,
            explanation=None if e is None else ExplanationOut(**{
                name: four(v) if _EXPLANATION_HINTS[name] == FourR else v
                for name, v in explanation_values(e).items()}),
            source_id=x.source_id, highlights=list(x.highlights), uri=link(x) or None,
            duplicates=[DuplicateOut(**duplicate_values(d)) for d in x.duplicates] or None,
        ))
    return SearchAndRankOut(
        results=results, debug_information=r.debug, degraded=r.degraded, degraded_reasons=list(r.degraded_reasons),
        profile_name=r.profile_name, profile_version=r.profile_version, query_phrases=list(r.query_phrases),
        temporal_intent=r.temporal_intent, sources=source_reports_out(r), search_id=r.search_id)


def source_reports_out(r: SearchResponse) -> list[SourceReportOut]:
    return [SourceReportOut(source_id=x.source_id, status=x.status, latency_ms=round(x.latency_ms, 3),
                            result_count=x.result_count, error_message=x.error, error_code=x.code,
                            filtered=x.filtered, note=x.note) for x in r.sources]


def profile_out(p: RankingProfile) -> ProfileOut:
    return ProfileOut(
        name=p.name, version=p.version, persona_id=p.persona_id, relevancy_weight=p.relevancy_weight,
        recency_weight=p.recency_weight, richness_weight=p.richness_weight, reputation_weight=p.reputation_weight,
        fusion_method=p.fusion_method, dense_weight=p.dense_weight, recency_mode=p.recency_mode,
        recency_half_life_days=p.recency_half_life_days, reputation_prior_strength=p.reputation_prior_strength,
        is_default=p.is_default, updated_unix=p.updated_unix, reranker=p.reranker, rerank_top_n=p.rerank_top_n,
        rerank_weight=p.rerank_weight, model_sha256=p.model_sha256, feature_version=p.feature_version,
        feedback_expansion=p.feedback_expansion, fold_duplicates=p.fold_duplicates)


def register_core_tools(mcp: MCPServer, pipeline: RagPipeline, principal: Callable[[Context], Principal],
                        pages: Pages, cite: Callable[[Principal, RankedResult], str]) -> None:
    """search_and_rank (its pages: `pages`; each result's link: `cite`), ranking profiles and feedback."""

    @mcp.tool(annotations=READ, name="search_and_rank", description=(
        "Hybrid retrieval (dense + BM25) over the caller's tenant, ranked by the 4R factors "
        "(Relevancy, Recency, Richness, Reputation) with an explanation per result."))
    async def search_and_rank(
        user_query_text: Annotated[str, Field(description="The user's question or search text")],
        persona_id: str = "",
        top_k_initial_retrieve: Annotated[int, Field(ge=0, le=1000)] = 0,
        top_k_final_rank: Annotated[int, Field(ge=0, le=100)] = 0,
        weights: WeightsIn | None = None,
        profile_name: str = "",
        fusion_method: Literal["", Fusion] = "",          # "" = the profile's
        recency_mode: Literal["", RecencyMode] = "",
        rerank: bool = False,
        explain: bool = True,
        expand_query_with_llm: bool = False,
        filters: FiltersIn | None = None,
        sources: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]] | None, Field(
            max_length=64, description="Federation: the sources to search ('local' = this store, else remote "
                                       "source ids); omitted = this store and every remote source you may use"),
        ] = None,
        ctx: Context | None = None,
        max_tokens: MaxTokens = None,
        cursor: Cursor = None,
        fold_duplicates: FoldDuplicates = None,
    ) -> Annotated[CallToolResult, SearchAndRankOut]:
        async def run() -> SearchAndRankOut | CallToolResult:
            who = principal(ctx)
            request = search_request(who, user_query_text, persona_id, top_k_initial_retrieve, top_k_final_rank,
                                     weights, profile_name, fusion_method, recency_mode, rerank, explain,
                                     expand_query_with_llm, filters, sources,
                                     fold=fold_duplicates)
            page = await pages.search(request, who, cursor=cursor)
            out = search_response_out(page.response, lambda r: cite(who, r))
            out._page = page
            return fit_page(out, max_tokens, RANKED)
        return await guarded(run)

    @mcp.tool(annotations=READ, name="rag_why_not", description=(
        "Why are these documents not among a search's results? Give the search (the same arguments as "
        "search_and_rank) or the search_id of one of your recent searches, and up to 5 artifact ids: each gets "
        "its rank among the candidates (or its exact scores against each leg's last candidate), each leg's rank "
        "and score, its 4R factors and weights, and the deciding factor: a filter, not retrieved, page cut, "
        "out-ranked (by which factor) or folded (docs/RANKING.md \"Why not\")."))
    async def rag_why_not(
        artifact_ids: Annotated[list[Annotated[str, Field(max_length=256)]], Field(description=(
            f"The documents asked about: 1 to {WHY_NOT_MAX_IDS} artifact ids"))],
        user_query_text: Annotated[str, Field(description="The search's text (not needed with search_id)")] = "",
        search_id: Annotated[str, Field(max_length=64, description=(
            "A recent search of yours (its search_id: one of your last 8, within 10 minutes): its request is "
            "used and the other search arguments are ignored"))] = "",
        persona_id: str = "",
        top_k_initial_retrieve: Annotated[int, Field(ge=0, le=1000)] = 0,
        top_k_final_rank: Annotated[int, Field(ge=0, le=100)] = 0,
        weights: WeightsIn | None = None,
        profile_name: str = "",
        fusion_method: Literal["", Fusion] = "",
        recency_mode: Literal["", RecencyMode] = "",
        rerank: bool = False,
        expand_query_with_llm: bool = False,
        filters: FiltersIn | None = None,
        sources: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]] | None, Field(
            max_length=64)] = None,
        fold_duplicates: FoldDuplicates = None,
        ctx: Context | None = None,
    ) -> WhyNotOut:
        async def run() -> WhyNotOut:
            who = principal(ctx)
            request = None if search_id or not user_query_text else search_request(
                who, user_query_text, persona_id, top_k_initial_retrieve, top_k_final_rank, weights, profile_name,
                fusion_method, recency_mode, rerank, True, expand_query_with_llm, filters, sources, fold_duplicates)
            try:
                return await why_not(pipeline, pages, request, who, artifact_ids, search_id)
            except InvalidArgument as err:           # invalid params (-32602), naming the field
                raise jsonrpc_error(err) from None
        return await guarded(run)

    @mcp.tool(annotations=ADD, name="put_ranking_profile", description=(
        "Create or update a named ranking profile for the caller's tenant (or one persona); "
        "each update creates a new version."))
    async def put_ranking_profile(
        name: str,
        weights: WeightsIn,
        persona_id: str = "",
        fusion_method: Fusion = DEFAULT_FUSION,
        dense_weight: Annotated[float, Field(ge=0, le=1)] = DEFAULT_DENSE_WEIGHT,
        recency_mode: RecencyMode = DEFAULT_RECENCY_MODE,
        recency_half_life_days: Annotated[float, Field(gt=0)] = DEFAULT_HALF_LIFE_DAYS,
        reputation_prior_strength: Annotated[float, Field(gt=0)] = DEFAULT_PRIOR_STRENGTH,
        is_default: bool = False,
        reranker: Annotated[str, Field(description=(
            "Model re-ranking: '' = off (the default), else one the stack has configured: "
            "'cross-encoder', 'rerank-api', 'llm' or 'embedding-cosine' (docs/RANKING.md)"))] = "",
        rerank_top_n: Annotated[int, Field(ge=1, le=MAX_RERANK_TOP_N,
                                           description="how many of the first ranking's best it re-scores")]
        = DEFAULT_RERANK_TOP_N,
        rerank_weight: Annotated[float, Field(ge=0, le=1, description="its weight in Relevancy")]
        = DEFAULT_RERANK_WEIGHT,
        feedback_expansion: Annotated[Literal["", "rm3"], Field(description=(
            "keyword feedback expansion: '' = off, 'rm3' (docs/RANKING.md)"))] = "",
        model_sha256: Annotated[str, Field(description=(
            "not accepted here (a non-empty value is refused): only `nucleus tune` names a model; "
            "a new version of a tuned profile keeps its model"))] = "",
        feature_version: Annotated[int, Field(description="not accepted here, as model_sha256")] = 0,
        fold_duplicates: Annotated[bool, Field(description=(
            "fold near-identical documents into one result listing the others (docs/RANKING.md)"))] = False,
        ctx: Context | None = None,
    ) -> ProfileOut:
        async def run() -> ProfileOut:
            who = principal(ctx)
            profile = RankingProfile(
                tenant_id=who.tenant_id, persona_id=persona_id, name=name,
                relevancy_weight=weights.relevancy, recency_weight=weights.recency,
                richness_weight=weights.richness, reputation_weight=weights.reputation,
                fusion_method=fusion_method, dense_weight=dense_weight, recency_mode=recency_mode,
                recency_half_life_days=recency_half_life_days, reputation_prior_strength=reputation_prior_strength,
                is_default=is_default, reranker=reranker, rerank_top_n=rerank_top_n, rerank_weight=rerank_weight,
                feedback_expansion=feedback_expansion, model_sha256=model_sha256, feature_version=feature_version,
                fold_duplicates=fold_duplicates)
            return profile_out(await pipeline.put_profile(profile, who))
        return await guarded(run)

    @mcp.tool(name="get_ranking_profile", annotations=READ,
              description="Get a ranking profile (latest version unless given).")
    async def get_ranking_profile(name: str = "", persona_id: str = "",
                                  version: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0,
                                  ctx: Context | None = None) -> ProfileOut:
        async def run() -> ProfileOut:
            return profile_out(await pipeline.get_profile(principal(ctx).tenant_id, persona_id, name, version))
        return await guarded(run)

    @mcp.tool(name="list_ranking_profiles", annotations=READ,
              description="List the ranking profiles of the caller's tenant.")
    async def list_ranking_profiles(persona_id: str = "", ctx: Context | None = None) -> ProfileListOut:
        async def run() -> ProfileListOut:
            profiles = await pipeline.list_profiles(principal(ctx).tenant_id, persona_id)
            return ProfileListOut(profiles=[profile_out(p) for p in profiles])
        return await guarded(run)

    @mcp.tool(annotations=OVERWRITE, name="record_feedback", description=(
        "Record that a result (entry) or a whole artifact was helpful or not; folded into Reputation. One vote "
        "per user per document (a second replaces the first); a federated result's vote counts on its source. "
        "Pass the search_id of the answer the result came from: the vote is then checked against it."))
    async def record_feedback(target_id: str, helpful: bool,
                              target: Literal["entry", "artifact"] = "entry", search_id: str = "",
                              ctx: Context | None = None) -> FeedbackOut:
        async def run() -> FeedbackOut:
            who = principal(ctx)
            ack, reputation = await pipeline.record_feedback(who.tenant_id, target, target_id, helpful, who.user_id,
                                                             principal=who, search_id=search_id)
            return FeedbackOut(artifact_id=ack.artifact_id, feedback_helpful=ack.feedback_helpful,
                               feedback_unhelpful=ack.feedback_unhelpful, reputation=reputation)
        return await guarded(run)


def search_request(who: Principal, query: str, persona_id: str, top_k_initial: int, top_k_final: int,
                   weights: WeightsIn | None, profile_name: str, fusion: str, recency_mode: str, rerank: bool,
                   explain: bool, expand: bool, filters: FiltersIn | None, sources: list[str] | None,
                   fold: bool | None = None) -> SearchRequest:
    """The SearchRequest of search_and_rank's (and rag_why_not's) arguments, for the caller `who`."""
    return SearchRequest(
        tenant_id=who.tenant_id, persona_id=persona_id, query=query, top_k_initial=top_k_initial,
        top_k_final=top_k_final,
        prefs=Preferences(
            weights=None if weights is None else (weights.relevancy, weights.recency, weights.richness,
                                                  weights.reputation),
            profile_name=profile_name, fusion=fusion, recency_mode=recency_mode, rerank=rerank, explain=explain),
        filters=(filters or FiltersIn()).to_filters(persona_id=persona_id), expand=expand,
        sources=tuple(sources or ()), fold_duplicates=fold)


def build_mcp(pipeline: RagPipeline, rag_tools: RagTools, *, token_verifier: Any = None,
              auth: Any = None, limiter: RateLimiter | None = None,
              topic_tools: TopicTools | None = None) -> MCPServer:
    """The RAGPipeline MCP server. With `token_verifier` + `auth` the SDK answers HTTP 401 to
    requests without a valid bearer token before any tool runs; with `limiter` every tool call
    draws from its caller's rate-limit bucket first (JSON-RPC -32029 over the limit)."""
    mcp = MCPServer("nucleus-rag-pipeline", instructions=(
        "Nucleus RAG retrieval: search_and_rank for ranked, explained knowledge from your tenant; "
        "rag_search / rag_get_raw_results / rag_get_synthesized_results for the standard RAG contracts."),
        token_verifier=token_verifier, auth=auth)
    principal_of = lambda ctx: rag_tools.identity.principal(request_headers(ctx))     # noqa: E731
    # Outermost of ours: one audit line per tool call, whatever answers it (a refusal of the rate limiter,
    # a core tool, a RAG tool, a proxy tool, the sources tools).
    mcp.middleware.append(tool_audit_middleware(rag_tools.audit, principal_of))
    if limiter is not None:
        mcp.middleware.append(rate_limit_middleware(limiter, principal_of))
    register_core_tools(mcp, pipeline, rag_tools.principal, rag_tools.pages, rag_tools.verifier.cite)
    register_rag_tools(mcp, rag_tools)
    register_topic_tools(mcp, topic_tools or TopicTools(rag_tools))
    return mcp
