"""The topic tools as MCP tools (services/rag_pipeline/topics.py): names, descriptions and
argument schemas. Bad argument values are tool errors naming the field (the SDK's validation,
or `invalid_argument: <field>: ...` from the service), so an agent's model can read and fix them."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from services.rag_pipeline.personas import get_persona
from services.rag_pipeline.topics import TopicTools
from shared.mcp_annotations import READ
from shared.mcp_errors import guarded

K = Annotated[int, Field(ge=0, le=50, description=(
    "Number of topics; 0 (default) = chosen automatically (best silhouette over 2..12, or sqrt(n/2) when "
    "the structure is weak)"))]
TopicId = Annotated[int | None, Field(ge=0, le=50, description="A topic_id from rag_topics")]
Query = Annotated[str, Field(max_length=4_000, description="A question or phrase; its nearest topic is used")]


def register_topic_tools(mcp: MCPServer, topics: TopicTools) -> None:
    """Add rag_topics, rag_topic_evolution, rag_recent_developments, rag_topic_map and
    rag_get_persona to `mcp`."""

    def who(ctx: Context):
        return topics.rag.principal(ctx)

    @mcp.tool(annotations=READ, name="rag_topics", description=(
        "The main themes (topics) of the documents you may see: k-means clusters, each with its most "
        "distinctive terms (label), size, representative documents and date span. Use for 'what are the main "
        "themes / topics?'."))
    async def rag_topics(ctx: Context, k: K = 0,
                         max_terms: Annotated[int, Field(ge=1, le=20, description="Label terms per topic")] = 8,
                         examples: Annotated[int, Field(ge=0, le=20, description=(
                             "Representative documents per topic"))] = 3) -> dict[str, Any]:
        return await guarded(lambda: topics.run(who(ctx), "rag_topics", k=k, max_terms=max_terms,
                                                examples=examples))

    @mcp.tool(annotations=READ, name="rag_topic_evolution", description=(
        "How topics evolved: document counts per period (month, quarter or year of the created or modified "
        "date) for every topic, one topic_id, or the topic nearest to a query. Use for 'how did X evolve?'."))
    async def rag_topic_evolution(
            ctx: Context, period: Literal["month", "quarter", "year"] = "month",
            date_field: Literal["created", "modified"] = "created", topic_id: TopicId = None, query: Query = "",
            k: K = 0) -> dict[str, Any]:
        return await guarded(lambda: topics.run(who(ctx), "rag_topic_evolution", period=period,
                                                date_field=date_field, topic_id=topic_id, query=query, k=k))

    @mcp.tool(annotations=READ, name="rag_recent_developments", description=(
        "The newest documents of a topic (topic_id from rag_topics) or of the topic nearest to a query, "
        "ranked with recency forced on, with signed links. Use for 'what is new in Y?'."))
    async def rag_recent_developments(
            ctx: Context, query: Query = "", topic_id: TopicId = None,
            limit: Annotated[int, Field(ge=1, le=50, description="How many documents")] = 8,
            k: K = 0) -> dict[str, Any]:
        return await guarded(lambda: topics.run(who(ctx), "rag_recent_developments", query=query,
                                                topic_id=topic_id, limit=limit, k=k))

    @mcp.tool(annotations=READ, name="rag_topic_map", description=(
        "A 2-D map of the documents you may see (PCA of their vectors) with their topic ids, as JSON points; "
        "include_png adds a rendered PNG (base64) for humans."))
    async def rag_topic_map(
            ctx: Context, k: K = 0,
            max_points: Annotated[int, Field(ge=1, le=20_000, description="At most this many points")] = 2_000,
            include_png: bool = False) -> dict[str, Any]:
        return await guarded(lambda: topics.run(who(ctx), "rag_topic_map", k=k, max_points=max_points,
                                                include_png=include_png))

    @mcp.tool(annotations=READ, name="rag_get_persona", description=(
        "The settings of a persona agent of your tenant: system prompt, allowed tools and sources, LLM model "
        "(used by agents such as `nucleus chat --persona`)."))
    async def rag_get_persona(
            ctx: Context,
            persona_id: Annotated[str, Field(min_length=1, max_length=128, description="The persona's id")],
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            p = await get_persona(topics.pipeline, topics.ks, "", persona_id, who(ctx))
            return {"persona_id": p.persona_id, "display_name": p.display_name, "system_prompt": p.system_prompt,
                    "allowed_tools": list(p.allowed_tools), "allowed_sources": list(p.allowed_sources),
                    "llm_model": p.llm_model, "tools_disabled": p.tools_disabled, "updated_unix": p.updated_unix}
        return await guarded(run)
