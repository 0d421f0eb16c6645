"""Bad arguments to the RAG tools are refused before any backend is called, naming the problem.
(No backend runs here: the targets point at a closed port.)"""
from __future__ import annotations

import contextlib
import logging

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from services.rag_pipeline.main import build
from shared.settings import RagPipelineSettings


@contextlib.asynccontextmanager
async def connected(tmp_path):
    settings = RagPipelineSettings(knowledge_store_target="127.0.0.1:1", llm_target="127.0.0.1:1",
                                   audit_log=tmp_path / "audit.jsonl", link_secret="x" * 32)
    spec = build(settings, stdio=True)
    try:
        async with Client(spec.mcp_server) as c:
            yield c
    finally:
        await spec.close()


@pytest.mark.parametrize("phrases,problem", [
    ([], "at least 1"),
    (["a", "b", "c", "d", "e", "f"], "at most 5"),
    (["x" * 10_000], "at most 2000 characters"),
    ([""], "at least 1 character"),
])
async def test_rag_search_bad_phrases_are_json_rpc_invalid_params(tmp_path, phrases, problem):
    async with connected(tmp_path) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("rag_search", {"search_phrases": phrases})
        assert err.value.code == -32602
        assert "search_phrases" in err.value.message and problem in err.value.message


async def test_rag_search_schema_declares_the_limits(tmp_path):
    async with connected(tmp_path) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["rag_search"].input_schema["properties"]["search_phrases"]
        assert (schema["minItems"], schema["maxItems"], schema["items"]["maxLength"]) == (1, 5, 2000)
        assert tools["rag_search"].output_schema["properties"]["segments"]
        for name in ("rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results"):
            assert "username" in tools[name].input_schema["required"], name
            assert {"results", "meta_data", "artifacts", "contract_version"} <= set(tools[name].output_schema["properties"])


async def test_raw_results_without_sources_is_a_tool_error_naming_sources(tmp_path):
    async with connected(tmp_path) as client:
        result = await client.call_tool("rag_get_raw_results", {"username": "u", "query": "q", "sources": []})
        assert result.is_error and "sources" in result.content[0].text


async def test_bad_dates_name_the_filter(tmp_path):
    async with connected(tmp_path) as client:
        result = await client.call_tool("rag_get_raw_results", {"username": "u", "query": "q", "sources": ["s"],
                                                                "filters": {"date_from": "last tuesday"}})
        assert result.is_error and "filters.date_from" in result.content[0].text


# -- integers beyond what SQLite / protobuf hold: the field is named, nothing crashes ---------

@pytest.mark.parametrize("tool,arguments,field", [
    ("search_and_rank", {"user_query_text": "q", "filters": {"date_from_unix": 2**63}}, "filters.date_from_unix"),
    ("search_and_rank", {"user_query_text": "q", "filters": {"date_to_unix": -1}}, "filters.date_to_unix"),
    ("get_ranking_profile", {"name": "x", "version": 2**40}, "version"),
    ("get_ranking_profile", {"name": "x", "version": -1}, "version"),
    ("rag_discover_resources", {"username": "u", "filters": {"page": 2**70}}, "filters.page"),
])
async def test_out_of_range_integers_are_tool_errors_naming_the_field(tmp_path, caplog, tool, arguments, field):
    caplog.set_level(logging.INFO)
    async with connected(tmp_path) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and field in result.content[0].text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
