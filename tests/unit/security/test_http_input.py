"""The HTTP surface of every MCP server as `service_runner` serves it: Host/Origin checked on
every route (not only /mcp), no redirect built from the Host header, and malformed `tools/call`
params answered with JSON-RPC -32602 instead of an unhandled exception (no backend runs here:
the targets point at a closed port)."""
from __future__ import annotations

import logging

import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.mcp_api import build_mcp as build_ks_mcp
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.mcp_api import build_mcp as build_llm_mcp
from services.rag_pipeline.main import build
from shared.service_runner import ServiceSpec, mcp_http_app
from shared.settings import LlmOrchestrationSettings, RagPipelineSettings
from tests.support.raw_mcp import http_to, raw_mcp
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for

EVIL = "evil.example:8063"


def _rag(tmp_path, **overrides):
    settings = RagPipelineSettings(knowledge_store_target="127.0.0.1:1", llm_target="127.0.0.1:1",
                                   audit_log=tmp_path / "audit.jsonl", link_secret="s" * 32, **overrides)
    spec = build(settings, stdio=False)
    return spec, mcp_http_app(spec, settings)


@pytest.mark.parametrize("path", ["/documents/a%231?t=acme&u=alice&g=&exp=1&sig=x", "/mcp/", "/mcp",
                                  "/.well-known/oauth-protected-resource/mcp", "/no-such-route"])
async def test_a_foreign_host_or_origin_is_refused_on_every_route(tmp_path, path):
    spec, app = _rag(tmp_path)
    async with http_to(app) as client:
        assert (await client.get(path, headers={"Host": EVIL})).status_code == 421
        assert (await client.get(path, headers={"Origin": "http://evil.example"})).status_code == 403
    await spec.close()


async def test_mcp_with_a_trailing_slash_is_served_not_redirected_to_the_host_header(tmp_path):
    spec, app = _rag(tmp_path)
    async with http_to(app) as client:
        got = await client.get("/mcp/", headers={"Accept": "text/event-stream"})
        slash = await client.post("/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        documents = await client.get("/documents/")
    assert got.status_code not in (301, 302, 307, 308) and "location" not in got.headers
    assert slash.status_code == 200 and "serverInfo" in slash.text
    assert documents.status_code not in (301, 302, 307, 308) and "location" not in documents.headers
    await spec.close()


MALFORMED = [
    ({"name": ["rag_search"], "arguments": {}}, "name"),
    ({"name": {"x": 1}}, "name"),
    ({"name": 5}, "name"),
    ({"name": ""}, "name"),
    ({"name": "rag_search", "arguments": ["not", "an", "object"]}, "arguments"),
    ({"name": "search_and_rank", "arguments": "text"}, "arguments"),
    (["rag_search"], "params"),
]


def _ks_app(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    mcp = build_ks_mcp(store, allow_local_identity=True)
    return store.close, mcp_http_app(ServiceSpec("knowledge_store", "x", lambda s: None, mcp_server=mcp),
                                     RagPipelineSettings())


def _llm_app(tmp_path):
    mcp = build_llm_mcp(LlmOrchestrator(LlmOrchestrationSettings()))
    return (lambda: None), mcp_http_app(ServiceSpec("llm_orchestration", "x", lambda s: None, mcp_server=mcp),
                                        RagPipelineSettings())


@pytest.mark.parametrize("service", ["rag_pipeline", "knowledge_store", "llm_orchestration"])
async def test_malformed_tools_call_params_are_invalid_params_naming_the_problem(tmp_path, caplog, service):
    if service == "rag_pipeline":
        spec, app = _rag(tmp_path)
        close = None
    else:
        spec = None
        close, app = (_ks_app if service == "knowledge_store" else _llm_app)(tmp_path)
    caplog.set_level(logging.INFO)
    async with raw_mcp(app) as session:
        for params, field in MALFORMED:
            answer = await session.request("tools/call", params)
            assert answer["error"]["code"] == -32602, (params, answer)
            assert field in answer["error"]["message"], (params, answer)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    if spec is not None:
        await spec.close()
    else:
        close()
