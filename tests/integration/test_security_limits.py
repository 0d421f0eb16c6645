"""The low findings of the attack on a real stack with auth on, rerun: roles for the default
ranking profile, feedback only on visible documents (no existence oracle) and once per user,
out-of-range integers and malformed `tools/call` params refused by name, Host checks on every
route and no Host-built redirect — over MCP and gRPC alike."""
from __future__ import annotations

import grpc
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from nucleus.v1 import common_pb2 as pb
from tests.integration.secure_stack import SECURITY_TEAM_DOCS, bearer
from tests.support.mcp_clients import error_text, http_client, structured
from tests.support.raw_mcp import HEADERS, PROTOCOL, message

pytestmark = pytest.mark.integration
HIDDEN = sorted(SECURITY_TEAM_DOCS)[0]          # visible to `sec` only (visibility groups)
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "itest", "version": "0"}}}


@pytest.fixture
def rag(secure_rag):
    return secure_rag


async def test_a_user_without_the_admin_role_cannot_change_the_default_profile(secure_corpus, rag):
    weights = {"relevancy": 0.1, "recency": 0.1, "richness": 0.1, "reputation": 0.7}
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        refused = await client.call_tool("put_ranking_profile", {"name": "alices", "weights": weights,
                                                                 "is_default": True})
        named = await client.call_tool("put_ranking_profile", {"name": "alices-own", "weights": weights})
    assert "permission_denied" in error_text(refused) and "'admin' role" in error_text(refused)
    assert structured(named)["name"] == "alices-own"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.PutRankingProfile(pb.RankingProfile(name="default", relevancy_weight=1.0), timeout=10,
                                    metadata=bearer(secure_corpus, "alice"))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in err.value.details()


async def test_feedback_on_a_hidden_document_looks_like_a_missing_one_over_both_transports(secure_corpus, rag):
    answers = {}
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        for target_id in (HIDDEN, "no-such-document"):
            result = await client.call_tool("record_feedback", {"target_id": target_id, "target": "artifact",
                                                                "helpful": False})
            answers[target_id] = error_text(result).replace(target_id, "<id>")
    assert answers[HIDDEN] == answers["no-such-document"] and "not_found" in answers[HIDDEN]
    details = {}
    for target_id in (f"{HIDDEN}#0", "no-such-document#0"):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rag.RecordFeedback(pb.Feedback(target=pb.FEEDBACK_TARGET_ENTRY, target_id=target_id, helpful=False),
                                     timeout=10, metadata=bearer(secure_corpus, "alice"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        details[target_id] = err.value.details().replace(target_id, "<id>")
    assert len(set(details.values())) == 1


async def test_a_users_votes_on_one_document_count_once(secure_corpus, rag):
    vote = [pb.Feedback(target=pb.FEEDBACK_TARGET_ARTIFACT, target_id="legal-hotel-settlement", helpful=True,
                        user_id=f"sockpuppet-{i}") for i in range(3)]
    acks = [await rag.RecordFeedback(v, timeout=10, metadata=bearer(secure_corpus, "sec")) for v in vote]
    assert acks[0].feedback_helpful == acks[-1].feedback_helpful >= 1      # the user is sec, every time


@pytest.mark.parametrize("tool,arguments,field", [
    ("search_and_rank", {"user_query_text": "battery", "filters": {"date_from_unix": 2**63}},
     "filters.date_from_unix"),
    ("get_ranking_profile", {"name": "x", "version": 2**63}, "version"),
])
async def test_integers_beyond_int64_are_refused_naming_the_field(secure_corpus, tool, arguments, field):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and field in error_text(result)


async def test_grpc_dates_out_of_range_are_invalid_argument(secure_corpus, rag):
    from nucleus.v1 import rag_pipeline_pb2 as rag_pb

    request = rag_pb.SearchAndRankRequest(user_query_text="battery",
                                          filters=pb.KnowledgeSearchFilters(date_from_unix=2**62))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(request, timeout=10, metadata=bearer(secure_corpus, "alice"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("filters.date_from_unix: ")


async def test_a_non_string_tool_name_is_invalid_params(secure_corpus):
    headers = {**HEADERS, **secure_corpus.headers("alice")}
    async with httpx.AsyncClient(timeout=30) as client:
        init = await client.post(secure_corpus.mcp_url, json=INIT, headers=headers)
        headers.update({"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL})
        await client.post(secure_corpus.mcp_url, headers=headers,
                          json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        answer = message(await client.post(secure_corpus.mcp_url, headers=headers, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": ["rag_search"], "arguments": {}}}))
    assert answer["error"]["code"] == -32602 and "name" in answer["error"]["message"]
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as mcp:
        with pytest.raises(MCPError) as err:
            await mcp.call_tool("rag_search", {"search_phrases": ["ok"], "max_segments": 2**63})
    assert err.value.code == -32602 and "max_segments" in err.value.message


def test_every_route_checks_the_host_and_nothing_redirects_to_it(secure_corpus):
    base = secure_corpus.base_url
    evil = {"Host": "evil.example:8063"}
    for path in ("/documents/x%230?t=acme&u=alice&g=&exp=1&sig=x", "/mcp/", "/mcp"):
        assert httpx.get(base + path, headers=evil, timeout=30).status_code == 421, path
    slash = httpx.get(base + "/mcp/", headers={"Accept": "text/event-stream"}, timeout=30)
    assert slash.status_code not in (301, 302, 307, 308) and "location" not in slash.headers
