"""Fuzzed `tools/call` *notifications* (no id, so no answer is owed) with a malformed name or
arguments are dropped quietly by RAGPipeline's MCP server: no traceback, no error and no line
about it above DEBUG in its log, and the session keeps serving."""
from __future__ import annotations

import asyncio
import logging

from services.rag_pipeline.main import build
from shared.service_runner import mcp_http_app
from shared.settings import RagPipelineSettings
from tests.support.raw_mcp import raw_mcp

NOTIFICATIONS = [{"name": 123}, {"name": None}, {"name": ["rag_search"]}, {"name": {"x": 1}},
                 {"name": "rag_search", "arguments": [1, 2]}, ["tools/call"], None]


async def test_malformed_tools_call_notifications_are_dropped_without_a_traceback(tmp_path, caplog):
    settings = RagPipelineSettings(knowledge_store_target="127.0.0.1:1", llm_target="127.0.0.1:1",
                                   audit_log=tmp_path / "audit.jsonl", link_secret="s" * 32)
    spec = build(settings, stdio=False)
    caplog.set_level(logging.INFO)
    try:
        async with raw_mcp(mcp_http_app(spec, settings)) as session:
            for params in NOTIFICATIONS:
                body = {"jsonrpc": "2.0", "method": "tools/call", **({} if params is None else {"params": params})}
                response = await session.client.post("/mcp", headers=session.headers, json=body)
                assert response.status_code == (202 if isinstance(params, dict) or params is None else 400), params
            await asyncio.sleep(0.1)                    # notifications are handled off the request
            listed = await session.request("tools/list", {})
            assert any(t["name"] == "rag_search" for t in listed["result"]["tools"])
    finally:
        await spec.close()
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info or "tools/call" in r.getMessage()]
    assert not loud, [(r.levelname, r.getMessage()) for r in loud]
