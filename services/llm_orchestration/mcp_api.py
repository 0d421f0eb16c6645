"""LlmOrchestration MCP adapter: the same core as gRPC, as typed MCP tools."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from services.llm_orchestration.core import LlmOrchestrator
from shared.errors import INT32_MAX
from shared.mcp_annotations import READ
from shared.mcp_errors import guarded, invalid_params_middleware


class EmbeddingsOut(BaseModel):
    model: str
    provider: str
    dimension: int
    vectors: list[list[float]]
    cache_hits: int


class ExpansionOut(BaseModel):
    phrases: list[str]
    method: str
    note: str
    model: str


class RerankOut(BaseModel):
    scores: list[float]
    model: str
    method: str


class CitationOut(BaseModel):
    passage_id: str
    title: str


class SynthesisOut(BaseModel):
    answer: str
    citations: list[CitationOut]
    truncated: bool
    truncation_reason: str
    model: str
    method: str
    degraded: bool = False
    degraded_reasons: list[str] = []


class PassageIn(BaseModel):
    id: str
    text: str
    title: str = ""


class CandidateIn(BaseModel):
    id: str
    text: str


def build_mcp(core: LlmOrchestrator, *, token_verifier: Any = None, auth: Any = None) -> MCPServer:
    """The LlmOrchestration MCP server; with `token_verifier` + `auth` (authentication on) only
    holders of a stack credential get through (HTTP 401 otherwise)."""
    mcp = MCPServer("nucleus-llm-orchestration", instructions=(
        "Embeddings (all-MiniLM-L6-v2 by default), query expansion, re-ranking and grounded answer synthesis."),
        token_verifier=token_verifier, auth=auth)

    @mcp.tool(name="generate_embeddings", annotations=READ,
              description="L2-normalised float32 embeddings of the texts.")
    async def generate_embeddings(texts: list[str], purpose: Literal["query", "document"] = "query") -> EmbeddingsOut:
        async def run() -> EmbeddingsOut:
            token = get_access_token()          # with authentication on: the operator's token
            r = await core.embed(texts, purpose, caller=f"mcp:{token.subject}" if token is not None else "mcp")
            return EmbeddingsOut(model=r.model, provider=r.provider, dimension=r.dimension,
                                 vectors=r.vectors.tolist(), cache_hits=r.cache_hits)
        return await guarded(run)

    @mcp.tool(annotations=READ, name="expand_or_rephrase_query", description=(
        "Alternative phrasings of a query; the original is always first. Says which technique ran."))
    async def expand_or_rephrase_query(query: str,
                                       max_alternatives: Annotated[int, Field(ge=1, le=4)] = 3) -> ExpansionOut:
        async def run() -> ExpansionOut:
            e = await core.expand(query, max_alternatives)
            return ExpansionOut(phrases=list(e.phrases), method=e.method, note=e.note, model=e.model)
        return await guarded(run)

    @mcp.tool(annotations=READ, name="rerank", description=(
        "Relevance score in [0, 1] for each candidate text against the query. method: '' (default), or a "
        "configured model re-ranker ('cross-encoder', 'rerank-api')."))
    async def rerank(query: str, candidates: list[CandidateIn], method: str = "") -> RerankOut:
        async def run() -> RerankOut:
            r = await core.rerank(query, [(c.id, c.text) for c in candidates], method)
            return RerankOut(scores=list(r.scores), model=r.model, method=r.method)
        return await guarded(run)

    @mcp.tool(name="synthesize", annotations=READ,
              description="An answer grounded only in the passages, citing passage ids.")
    async def synthesize(query: str, passages: list[PassageIn],
                         max_chars: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0,
                         style: Literal["concise", "detailed", "bullets"] = "concise") -> SynthesisOut:
        async def run() -> SynthesisOut:
            s = await core.synthesize(query, [(p.id, p.title, p.text) for p in passages], max_chars=max_chars,
                                      style=style)
            return SynthesisOut(answer=s.answer, citations=[CitationOut(passage_id=c.passage_id, title=c.title)
                                                            for c in s.citations],
                                truncated=s.truncated, truncation_reason=s.truncation_reason, model=s.model,
                                method=s.method, degraded=s.degraded, degraded_reasons=list(s.degraded_reasons))
        return await guarded(run)

    mcp.middleware.append(invalid_params_middleware({}))     # malformed tools/call params: -32602
    return mcp
