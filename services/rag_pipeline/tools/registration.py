"""The RAG tools as MCP tools: their names, descriptions and argument schemas, bound to a
`RagTools`, plus the signed document route and the JSON-RPC argument check of the tools that
answer bad arguments with -32602 (`schemas.JSONRPC_ARGUMENTS`)."""
from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult
from pydantic import Field

from services.rag_pipeline.federation.peer_vectors import fingerprint_of
from services.rag_pipeline.tools.budget import HITS, SEGMENTS, MaxTokens
from services.rag_pipeline.tools.paging import Cursor, fit_page
from services.rag_pipeline.tools.peer import PeerVectors, register_fingerprint_tool

from services.rag_pipeline.tools.schemas import (
    DEFAULT_SEGMENTS,
    JSONRPC_ARGUMENTS,
    MAX_SEGMENTS,
    MAX_SOURCES,
    MAX_TOP_K,
    DiscoverFiltersIn,
    DiscoverOut,
    DocumentAccessOut,
    FoldDuplicates,
    ProvidedContextIn,
    RagSearchOut,
    RankingIn,
    RawFiltersIn,
    RawOut,
    SearchPhrases,
    SourceId,
    SynthesisParamsIn,
    SynthOut,
    UserToken,
    Username,
)
from services.rag_pipeline.tools.links import cited_result
from services.rag_pipeline.tools.service import RagTools
from shared.errors import NucleusError
from shared.mcp_annotations import READ
from shared.mcp_errors import guarded, invalid_params_middleware, jsonrpc_error
from shared.signing import DOCUMENT_PREFIX


def register_rag_tools(mcp: MCPServer, tools: RagTools) -> None:
    """Add rag_search, verify_document_access, rag_discover_resources, rag_get_raw_results,
    rag_get_synthesized_results, nucleus_model_fingerprint and GET /documents/{entry_id} to `mcp`."""
    peer = PeerVectors(tools, fingerprint_of(tools.llm))       # a peer stack's vectors (tools/peer.py)

    @mcp.tool(annotations=READ, name="rag_search", description=(
        "Searches the knowledge base for relevant information using semantic search. Give 1-5 search "
        "phrases: the first is the user's exact input, the others rephrasings; all are searched in "
        "parallel and the union is ranked. Returns up to 20 segments with signed source links; "
        "next_cursor, when present, gives the next page (pass it as cursor with the same arguments)."))
    async def rag_search(search_phrases: SearchPhrases, ctx: Context,
                         max_segments: Annotated[int, Field(ge=1, le=MAX_SEGMENTS, description=(
                             "How many segments to return (default 8, at most 20)"))] = DEFAULT_SEGMENTS,
                         sources: Annotated[list[SourceId] | None, Field(max_length=MAX_SOURCES, description=(
                             "Optional federation selection: 'local' and/or remote source ids; omitted = "
                             "this server's knowledge and every remote source you may use"))] = None,
                         max_tokens: MaxTokens = None, cursor: Cursor = None,
                         fold_duplicates: FoldDuplicates = None,
                         ) -> Annotated[CallToolResult, RagSearchOut]:
        out = await tools.rag_search(ctx, search_phrases, max_segments, sources, cursor, fold_duplicates)

        def render(o: RagSearchOut) -> CallToolResult:
            return cited_result(o, [_segment_link(s) for s in o.segments])
        try:
            answer = fit_page(out, max_tokens, SEGMENTS, render)   # max_tokens: links and all (tools/budget.py)
        except NucleusError as err:
            raise jsonrpc_error(err) from None
        return answer if isinstance(answer, CallToolResult) else render(out)

    @mcp.tool(annotations=READ, name="verify_document_access", description=(
        "Verify that the current user may still open a document segment returned by rag_search, and get a "
        "fresh signed URL for it."))
    async def verify_document_access(
            segment_uid: Annotated[str, Field(min_length=1, max_length=1024, description=(
                "The segment_uid originally returned by rag_search"))],
            ctx: Context) -> DocumentAccessOut:
        return await tools.verify_document_access(ctx, segment_uid)

    @mcp.tool(annotations=READ, name="rag_discover_resources", description=(
        "List the data sources (resources) of this RAG server that the authenticated user may search, "
        "with their visibility groups, last index time and sizes."))
    async def rag_discover_resources(username: Username, ctx: Context, filters: DiscoverFiltersIn | None = None,
                                     user_token: UserToken = None) -> DiscoverOut:
        return await guarded(lambda: tools.discover(ctx, username, filters, user_token))

    @mcp.tool(annotations=READ, name="rag_get_raw_results", description=(
        "Ranked raw search hits (snippet, chunk, title, signed uri, scores) from the given data sources. "
        "Sources the user may not see are refused with unauthorized_source; unknown ids with invalid_source."))
    async def rag_get_raw_results(
            username: Username, query: Annotated[str, Field(min_length=1, max_length=4_000)],
            sources: Annotated[list[SourceId], Field(min_length=1, max_length=MAX_SOURCES)], ctx: Context,
            top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 8, filters: RawFiltersIn | None = None,
            ranking: RankingIn | None = None, user_token: UserToken = None,
            max_tokens: MaxTokens = None, cursor: Cursor = None,
            fold_duplicates: FoldDuplicates = None) -> Annotated[CallToolResult, RawOut]:
        out = await guarded(lambda: tools.raw_results(ctx, username, query, sources, top_k, filters, ranking,
                                                      user_token, cursor, fold_duplicates))
        if max_tokens is not None:          # a budgeted answer carries no peer vectors
            return await guarded(lambda: _fitted(out, max_tokens))
        fit_page(out, None, HITS)           # its next_cursor
        answer = await peer.answer(ctx, out)
        return cited_result(out, [(h.uri, h.title or h.id) for h in out.results.hits],  # = _hit_links, with _meta
                            meta=answer.meta if isinstance(answer, CallToolResult) else None)

    @mcp.tool(annotations=READ, name="rag_get_synthesized_results", description=(
        "An answer to the query synthesized only from passages the user may see, with citations "
        "(signed uri, title, resourceId) and truncation limits."))
    async def rag_get_synthesized_results(
            username: Username, query: Annotated[str, Field(min_length=1, max_length=4_000)], ctx: Context,
            sources: Annotated[list[SourceId] | None, Field(max_length=MAX_SOURCES)] = None,
            top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 8,
            synthesis_params: SynthesisParamsIn | None = None, provided_context: ProvidedContextIn | None = None,
            user_token: UserToken = None) -> Annotated[CallToolResult, SynthOut]:
        out = await guarded(lambda: tools.synthesized_results(
            ctx, username, query, sources, top_k, synthesis_params, provided_context, user_token))
        return cited_result(out, [(c.uri, c.title or c.id) for c in out.results.citations])

    register_fingerprint_tool(mcp, peer)
    mcp.custom_route(DOCUMENT_PREFIX + "{entry_id:path}", methods=["GET"], name="document",
                     include_in_schema=False)(tools.documents.open_document)
    mcp.middleware.append(invalid_params_middleware(JSONRPC_ARGUMENTS))


async def _fitted(out: Any, max_tokens: int) -> Any:
    """A rag_get_raw_results answer fitted to `max_tokens`, its cursor after the hits kept (run by `guarded`)."""
    return fit_page(out, max_tokens, HITS, _hit_links)


def _hit_links(out: Any) -> CallToolResult:
    """A rag_get_raw_results answer with one resource link per hit."""
    return cited_result(out, [(h.uri, h.title or h.id) for h in out.results.hits])


def _segment_link(segment: Any) -> tuple[str | None, str]:
    """A rag_search segment's resource link: its signed source_url, named by its headline."""
    return segment.source_url, segment.headline or segment.source_file_name
