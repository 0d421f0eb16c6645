"""The KnowledgeStore and LlmOrchestration MCP servers through the official MCP client over
streamable HTTP: every tool, structured output, and bad input as a tool error."""
from __future__ import annotations

import pytest

from tests.support.mcp_clients import PROTOCOLS, check_annotations, error_text, http_client, structured

pytestmark = pytest.mark.integration


async def test_knowledge_store_tools_ingest_search_stats_delete(stack):
    async with http_client(stack["knowledge_store"]["mcp"]) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"ingest_documents", "search_by_vector", "search_by_keywords", "delete_artifacts",
                "tenant_stats"} <= names
        progress: list[tuple[float, float | None, str | None]] = []

        async def told(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        ingested = structured(await client.call_tool("ingest_documents", {"documents": [
            {"artifact_id": "mcp-a", "content": "Heliostat mirrors track the sun across the sky.",
             "source_type": "wiki", "tags": ["solar"]},
            {"artifact_id": "mcp-b", "content": "Sourdough starters need regular feeding with flour.",
             "source_type": "blog"},
        ]}, progress_callback=told))
        assert ingested["artifacts"] == 2 and ingested["total_entries"] >= 2
        n = ingested["total_entries"]          # notifications asked for with a progress token
        assert progress[0] == (0, n, "entries embedded") and progress[-1] == (n, n, "entries embedded"), progress

        keyword = structured(await client.call_tool("search_by_keywords", {
            "keywords": "heliostat mirrors", "top_k": 5, "filters": {"tags": ["solar"]}}))
        assert [h["artifact_id"] for h in keyword["hits"]] == ["mcp-a"]
        assert "heliostat" in keyword["query_terms"]

        async with http_client(stack["llm_orchestration"]["mcp"]) as llm:
            vec = structured(await llm.call_tool("generate_embeddings", {"texts": ["feeding a sourdough starter"]}))
        dense = structured(await client.call_tool("search_by_vector", {
            "query_vector": vec["vectors"][0], "top_k": 1}))
        assert dense["hits"][0]["artifact_id"] == "mcp-b"

        stats = structured(await client.call_tool("tenant_stats", {}))
        assert stats["artifacts"] >= 2 and stats["entries"] == stats["vectors"] == stats["keyword_docs"]

        deleted = structured(await client.call_tool("delete_artifacts", {"artifact_ids": ["mcp-a"]}))
        assert deleted["artifacts_deleted"] == 1
        after = structured(await client.call_tool("search_by_keywords", {"keywords": "heliostat", "top_k": 5}))
        assert after["hits"] == []


async def test_knowledge_store_tool_errors_name_the_field(stack):
    async with http_client(stack["knowledge_store"]["mcp"]) as client:
        empty = await client.call_tool("ingest_documents", {"documents": [{"artifact_id": "x", "content": "  "}]})
        assert "documents[0]" in error_text(empty)
        partial = structured(await client.call_tool("ingest_documents", {"commit_valid": True, "documents": [
            {"artifact_id": "mcp-partial-empty", "content": "  "},
            {"artifact_id": "mcp-partial-ok", "content": "Axolotls regrow their limbs."}]}))
        assert [(d["index"], d["artifact_id"]) for d in partial["ingested"]] == [(1, "mcp-partial-ok")]
        assert [(r["index"], r["field"]) for r in partial["rejected"]] == [(0, "documents[0].content")]
        wrong_dim = await client.call_tool("search_by_vector", {"query_vector": [0.1, 0.2], "top_k": 3})
        assert "384" in error_text(wrong_dim)


async def test_llm_orchestration_tools(stack):
    async with http_client(stack["llm_orchestration"]["mcp"]) as client:
        emb = structured(await client.call_tool("generate_embeddings", {"texts": ["a", "b"], "purpose": "document"}))
        assert emb["dimension"] == 384 and len(emb["vectors"]) == 2 and emb["model"]
        expansion = structured(await client.call_tool("expand_or_rephrase_query", {
            "query": "how do I reset the battery controller"}))
        assert expansion["phrases"][0] == "how do I reset the battery controller"
        assert expansion["method"] in ("keywords", "unavailable")      # no chat model configured here
        rerank = structured(await client.call_tool("rerank", {"query": "battery reset", "candidates": [
            {"id": "1", "text": "Reset the battery controller with the soft reset command."},
            {"id": "2", "text": "The cafeteria serves soup on Thursdays."}]}))
        assert rerank["method"] == "embedding-cosine" and rerank["scores"][0] > rerank["scores"][1]
        synthesis = structured(await client.call_tool("synthesize", {"query": "how to reset the battery", "passages": [
            {"id": "p1", "title": "Guide", "text": "Run the soft reset command to reset the battery controller."}]}))
        assert synthesis["method"] == "extractive" and [c["passage_id"] for c in synthesis["citations"]] == ["p1"]
        bad = await client.call_tool("generate_embeddings", {"texts": []})
        assert "texts" in error_text(bad)


@pytest.mark.parametrize("mode", sorted(PROTOCOLS))
async def test_every_tool_of_both_services_is_annotated_on_both_protocol_versions(stack, mode):
    hints = {}
    for service in ("knowledge_store", "llm_orchestration"):
        async with http_client(stack[service]["mcp"], mode=mode) as client:
            assert client.protocol_version == PROTOCOLS[mode]
            hints.update(check_annotations((await client.list_tools()).tools))
    assert {"ingest_documents", "delete_artifacts", "tenant_stats", "generate_embeddings", "synthesize"} <= set(hints)
    for name in ("ingest_documents", "delete_artifacts"):          # they overwrite or delete what is there
        assert not hints[name].read_only_hint and hints[name].destructive_hint, name
    assert all(hints[n].read_only_hint for n in ("search_by_vector", "search_by_keywords", "tenant_stats",
                                                 "generate_embeddings", "expand_or_rephrase_query", "rerank"))
