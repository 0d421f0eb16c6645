"""The topic tools (rag_topics, rag_topic_evolution, rag_recent_developments, rag_topic_map)
through the official MCP client over streamable HTTP and over gRPC, on the authenticated stack
(tests/integration/secure_stack.py): scoped by the caller's tenant and groups like a search."""
from __future__ import annotations

import asyncio
import base64
import json

import grpc
import httpx
import pytest

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from tests.integration.secure_stack import GLOBEX_CANARY, LEGAL_CANARY, SECURITY_TEAM_DOCS, bearer
from tests.support.mcp_clients import error_text, http_client, structured

pytestmark = pytest.mark.integration
TOPIC_TOOLS = {"rag_topics", "rag_topic_evolution", "rag_recent_developments", "rag_topic_map"}


async def call(stack, who: str, tool: str, args: dict, *, raw: bool = False):
    """Call `tool` as `who`, asking again while the tenant's topics are being computed."""
    async with http_client(stack.mcp_url, stack.headers(who)) as client:
        for _ in range(120):
            result = await client.call_tool(tool, args)
            if raw:
                return result
            body = structured(result)
            if body.get("status") != "computing":
                return body
            assert 0.0 <= body["progress"] <= 1.0
            await asyncio.sleep(0.5)
    raise AssertionError(f"{tool} never became ready")


async def test_topic_tools_are_listed_with_schemas(secure_corpus):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert TOPIC_TOOLS <= set(tools)
    assert tools["rag_topic_evolution"].input_schema["properties"]["period"]["enum"] == ["month", "quarter", "year"]


async def test_topics_respect_groups_and_tenants(secure_corpus):
    alice = await call(secure_corpus, "alice", "rag_topics", {"examples": 20, "max_terms": 20})
    sec = await call(secure_corpus, "sec", "rag_topics", {"examples": 20, "max_terms": 20})
    gina = await call(secure_corpus, "gina", "rag_topics", {})
    assert alice["status"] == "ready" and alice["k"] >= 2 and "silhouette" in alice["criterion"]
    assert sum(t["size"] for t in alice["topics"]) == alice["documents"] >= 20
    assert all(t["label"] and t["terms"] and t["representative_documents"] for t in alice["topics"])
    # sec is in `legal` and `security-team`: the legal settlement and the security team's documents more
    assert sec["documents"] == alice["documents"] + 1 + len(SECURITY_TEAM_DOCS)
    alice_text = json.dumps(alice).lower()
    assert LEGAL_CANARY.lower() not in alice_text and "legal-hotel-settlement" not in alice_text
    assert GLOBEX_CANARY.lower() not in alice_text and "globex" not in alice_text
    assert LEGAL_CANARY.lower() in json.dumps(sec).lower() or any(
        d["artifact_id"] == "legal-hotel-settlement" for t in sec["topics"] for d in t["representative_documents"])
    # another tenant: only its own document is counted
    assert gina["documents"] == 1 and sum(t["size"] for t in gina["topics"]) == 1


async def test_evolution_counts_add_up_and_a_query_picks_one_topic(secure_corpus):
    topics = await call(secure_corpus, "alice", "rag_topics", {})
    evo = await call(secure_corpus, "alice", "rag_topic_evolution", {"period": "year"})
    assert {r["topic_id"]: r["total"] for r in evo["topics"]} == {t["topic_id"]: t["size"] for t in topics["topics"]}
    assert all(sum(r["counts"].values()) == r["total"] for r in evo["topics"])
    assert all(p == "undated" or p.isdigit() for p in evo["periods"])
    one = await call(secure_corpus, "alice", "rag_topic_evolution",
                     {"query": "firmware update rollout", "period": "quarter"})
    assert len(one["topics"]) == 1 and "query" in one["selection"]


async def test_recent_developments_are_newest_first_with_signed_links(secure_corpus):
    body = await call(secure_corpus, "alice", "rag_recent_developments", {"query": "Pallas firmware release",
                                                                          "limit": 4})
    docs = body["documents"]
    assert 1 <= len(docs) <= 4 and "recency" in body["ranking"]
    assert all(d["recency"] > 0 for d in docs)
    page = httpx.get(docs[0]["uri"], timeout=30)
    assert page.status_code == 200 and page.text
    assert "legal-hotel-settlement" not in {d["artifact_id"] for d in docs}


async def test_topic_map_points_and_png(secure_corpus):
    body = await call(secure_corpus, "alice", "rag_topic_map", {"include_png": True})
    assert len(body["points"]) == body["documents"]
    assert {p["topic_id"] for p in body["points"]} == {t["topic_id"] for t in body["topics"]}
    assert base64.b64decode(body["png_base64"])[:8] == b"\x89PNG\r\n\x1a\n"


async def test_bad_arguments_name_the_field(secure_corpus):
    bad = await call(secure_corpus, "alice", "rag_topics", {"k": 99}, raw=True)
    assert "k" in error_text(bad) and "50" in error_text(bad)
    bad = await call(secure_corpus, "alice", "rag_recent_developments", {}, raw=True)
    assert "topic_id" in error_text(bad)
    bad = await call(secure_corpus, "alice", "rag_topic_evolution", {"period": "week"}, raw=True)
    assert "period" in error_text(bad)
    bad = await call(secure_corpus, "alice", "rag_topic_evolution", {"topic_id": 49, "k": 3}, raw=True)
    assert "topic_id" in error_text(bad)


async def test_topic_tools_over_grpc(secure_corpus, secure_rag):
    request = rag_pb.TopicToolRequest(tool="rag_topics")
    for _ in range(60):
        response = await secure_rag.RunTopicTool(request, metadata=bearer(secure_corpus, "gina"), timeout=60)
        if response.status == "ready":
            break
        await asyncio.sleep(0.5)
    body = json.loads(response.result_json)
    assert response.status == "ready" and body["documents"] == 1      # gina's own tenant, globex
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await secure_rag.RunTopicTool(rag_pb.TopicToolRequest(tool="rag_topics", tenant_id="acme"),
                                      metadata=bearer(secure_corpus, "gina"), timeout=60)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await secure_rag.RunTopicTool(rag_pb.TopicToolRequest(tool="rag_nothing"),
                                      metadata=bearer(secure_corpus, "gina"), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tool" in err.value.details()
