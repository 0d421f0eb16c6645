"""Contract tests of every RAGPipeline MCP tool through the official MCP client, over streamable
HTTP (bearer API key, auth on) and over stdio (the local principal), against real services."""
from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from services.knowledge_store.extraction import content_kind, to_text
from services.knowledge_store.preparation import prepare_document
from shared.analysis import analyse
from shared.settings import KnowledgeStoreSettings
from benchmarks.secure_stack import corpus
from tests.integration.secure_stack import ROOT, SECURITY_TEAM_DOCS, SecureStack
from tests.support.mcp_clients import (PROTOCOLS, check_annotations, error_text, held_stdio_client, http_client,
                                      structured)
from tests.support.raw_mcp import message

pytestmark = pytest.mark.integration
TRANSPORTS = ["http", "stdio"]
ALL_TOOLS = {"search_and_rank", "rag_why_not", "put_ranking_profile", "get_ranking_profile",
             "list_ranking_profiles", "record_feedback", "rag_search", "verify_document_access",
             "rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results"}
SEGMENT_FIELDS = {"segment_uid", "source_file_name", "source_file_type", "headline", "segment_summary", "raw_text",
                  "source_url"}


@contextlib.asynccontextmanager
async def connect(stack: SecureStack, transport: str, who: str = "alice") -> AsyncIterator[Client]:
    """alice over HTTP (her API key) or the same identity as the local principal over stdio."""
    if transport == "http":
        async with http_client(stack.mcp_url, stack.headers(who)) as client:
            yield client
        return
    env = {
        "NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET": stack.addresses["knowledge_store"]["grpc"],
        "NUCLEUS_RAG_LLM_TARGET": stack.addresses["llm_orchestration"]["grpc"],
        "NUCLEUS_RAG_AUTH_CONFIG": str(stack.auth_config), "NUCLEUS_RAG_LINK_SECRET": stack.link_secret,
        "NUCLEUS_RAG_PUBLIC_BASE_URL": stack.base_url, "NUCLEUS_RAG_AUDIT_LOG": str(stack.audit_log),
        "NUCLEUS_LOCAL_TENANT": "acme", "NUCLEUS_LOCAL_USER": who, "NUCLEUS_LOCAL_GROUPS": "",
        "NUCLEUS_RAG_LOG_LEVEL": "WARNING",
        "NUCLEUS_RAG_IDENTITY_DIR": str(stack.identity_dir),   # it calls the stack as rag_pipeline
    }
    params = StdioServerParameters(command=sys.executable, args=["-m", "services.rag_pipeline.main", "--stdio"],
                                   env=env, cwd=str(ROOT))
    yield await held_stdio_client((stack.mcp_url, who), params)   # one stdio server for the module's stdio tests


def _artifact(uid: str) -> str:
    return uid.rsplit("#", 1)[0]


def _unheaded(text: str) -> list[str]:
    """The words of `text` outside Markdown heading lines (a passage writes merged headings its own way)."""
    return [w for line in text.splitlines() if not line.lstrip().startswith("#") for w in line.split()]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_tool_is_listed_with_an_output_schema(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert ALL_TOOLS <= set(tools)
    for name in ALL_TOOLS:
        assert tools[name].output_schema, name
    phrases = tools["rag_search"].input_schema["properties"]["search_phrases"]
    assert (phrases["minItems"], phrases["maxItems"]) == (1, 5)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_rag_search_returns_seed_segments_with_working_signed_links(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        result = await client.call_tool("rag_search", {"search_phrases": [
            "current hotel limits?", "current travel expense limits for hotels and meals", "per diem policy 2026"]})
    body = structured(result)
    assert body["status"] == "success"
    segments = body["segments"]
    assert 1 <= len(segments) <= 8
    assert all(SEGMENT_FIELDS <= set(s) and s["raw_text"] and s["segment_uid"] for s in segments)
    assert "travel-policy-2026-update" in {_artifact(s["segment_uid"]) for s in segments[:3]}
    assert all(len((s["headline"] or "").split()) <= 10 for s in segments)
    assert json.loads(result.content[0].text)["segments"], "text content for older clients"
    first = segments[0]
    page = httpx.get(first["source_url"], timeout=30)
    assert page.status_code == 200 and page.text == first["raw_text"]
    assert page.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_rag_search_searches_every_phrase_not_only_the_first(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        only_first = structured(await client.call_tool("rag_search", {"search_phrases": ["zqxv wkpf"]}))
        both = structured(await client.call_tool("rag_search", {
            "search_phrases": ["zqxv wkpf", "how do I reset the Pallas battery controller"], "max_segments": 20}))
    battery = {"pallas-battery-guide-2026", "pallas-battery-guide-2021", "forum-battery-fuse-reset-trick"}
    assert not battery & {_artifact(s["segment_uid"]) for s in only_first["segments"][:3]}
    assert battery & {_artifact(s["segment_uid"]) for s in both["segments"][:5]}
    assert len(both["segments"]) <= 20


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("phrases,problem", [
    ([], "at least 1"), (["a", "b", "c", "d", "e", "f"], "at most 5"), (["x" * 10_000], "at most 2000"),
])
async def test_rag_search_bad_phrases_are_invalid_params(secure_corpus, transport, phrases, problem):
    async with connect(secure_corpus, transport) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("rag_search", {"search_phrases": phrases})
    assert err.value.code == -32602
    assert "search_phrases" in err.value.message and problem in err.value.message


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_verify_document_access_refreshes_a_link_or_says_why_not(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        segment = structured(await client.call_tool("rag_search", {"search_phrases": ["battery controller reset"]})
                             )["segments"][0]
        ok = structured(await client.call_tool("verify_document_access", {"segment_uid": segment["segment_uid"]}))
        gone = structured(await client.call_tool("verify_document_access", {"segment_uid": "no-such-doc#0"}))
        hidden = structured(await client.call_tool("verify_document_access",
                                                   {"segment_uid": "hr-travel-exceptions-2026#0"}))
    assert ok["has_access"] is True and ok["access_level"] == "view" and ok["error"] is None
    assert httpx.get(ok["refreshed_url"], timeout=30).text == segment["raw_text"]
    assert gone == {"has_access": False, "refreshed_url": None, "access_level": None,
                    "error": "Document has been deleted or does not exist"}
    assert hidden["has_access"] is False and hidden["refreshed_url"] is None and hidden["error"]


async def test_a_forbidden_segment_is_answered_exactly_as_a_missing_one(secure_corpus):
    async with connect(secure_corpus, "http") as client:
        hidden = structured(await client.call_tool("verify_document_access",
                                                   {"segment_uid": "hr-travel-exceptions-2026#0"}))
        gone = structured(await client.call_tool("verify_document_access", {"segment_uid": "no-such-doc#0"}))
    hank = secure_corpus.headers("platform", **{"x-user-id": "hr-hank@acme.test"})      # in hr: it exists
    async with http_client(secure_corpus.mcp_url, hank) as client:
        seen = structured(await client.call_tool("verify_document_access",
                                                 {"segment_uid": "hr-travel-exceptions-2026#0"}))
    assert seen["has_access"] is True
    assert hidden == gone == {"has_access": False, "refreshed_url": None, "access_level": None,
                              "error": "Document has been deleted or does not exist"}


@pytest.mark.parametrize("mode", sorted(PROTOCOLS))
async def test_tools_are_annotated_and_cited_documents_are_resource_links_on_both_protocol_versions(
        secure_corpus, mode):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice"), mode=mode) as client:
        assert client.protocol_version == PROTOCOLS[mode]
        if mode == "auto":                    # negotiated by server/discover, which names the version
            discovered = await client.session.send_discover(PROTOCOLS[mode])
            assert PROTOCOLS[mode] in discovered["supportedVersions"] and "tools" in discovered["capabilities"]
        hints = check_annotations((await client.list_tools()).tools)
        search = await client.call_tool("rag_search", {"search_phrases": ["battery controller reset"]})
        synth = await client.call_tool("rag_get_synthesized_results", {
            "username": "alice", "query": "how do I reset the battery controller"})
    assert ALL_TOOLS <= set(hints)
    reads = ("rag_search", "verify_document_access", "rag_discover_resources", "rag_get_raw_results",
             "rag_get_synthesized_results", "search_and_rank")
    assert all(hints[t].read_only_hint for t in reads)
    assert not hints["record_feedback"].read_only_hint and hints["record_feedback"].destructive_hint
    assert not hints["put_ranking_profile"].read_only_hint and not hints["put_ranking_profile"].destructive_hint
    for result, documents, link in ((search, "segments", "source_url"), (synth, "citations", "uri")):
        body = structured(result)
        assert result.result_type == "complete" and json.loads(result.content[0].text) == body
        cited = body[documents] if documents == "segments" else body["results"][documents]
        assert cited and all(c.type == "resource_link" for c in result.content[1:])
        assert [c.uri for c in result.content[1:]] == [d[link] for d in cited if d[link]]
    opened = httpx.get(search.content[1].uri, timeout=30)
    assert opened.status_code == 200 and opened.text == structured(search)["segments"][0]["raw_text"]
    if mode == "auto":                        # the 2026-07-28 result as it is on the wire
        wire = _modern_call(secure_corpus, "rag_search", {"search_phrases": ["battery controller reset"]})
        assert wire["resultType"] == "complete" and wire["content"][0]["type"] == "text"
        assert {c["type"] for c in wire["content"][1:]} == {"resource_link"} and wire["structuredContent"]["segments"]


async def test_rag_search_max_tokens_counts_the_links_and_a_bad_budget_names_the_field(secure_corpus):
    from services.rag_pipeline.tools.budget import result_tokens

    phrases = {"search_phrases": ["battery controller reset"]}
    async with connect(secure_corpus, "http") as client:
        whole = await client.call_tool("rag_search", phrases)
        cost = result_tokens(whole)                                  # the JSON text, the links, the structured content
        short = await client.call_tool("rag_search", {**phrases, "max_tokens": cost // 3})
        with pytest.raises(MCPError) as bad:
            await client.call_tool("rag_search", {**phrases, "max_tokens": 0})
    segments = structured(whole)["segments"]
    kept = structured(short)["segments"]
    assert result_tokens(short) <= cost // 3
    assert [s["segment_uid"] for s in kept] == [s["segment_uid"] for s in segments[:len(kept)]]
    assert len(short.content) == 1 + len(kept)                   # a link per segment kept
    assert bad.value.code == -32602 and "max_tokens" in bad.value.message


def _modern_call(stack: SecureStack, tool: str, arguments: dict) -> dict:
    """One self-contained 2026-07-28 `tools/call` POST (no handshake), its JSON-RPC result."""
    version = PROTOCOLS["auto"]
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-itest", "version": "0"}}
    response = httpx.post(stack.mcp_url, timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments,
                                                                       "_meta": meta}},
        headers={**stack.headers("alice"), "Accept": "application/json, text/event-stream",
                 "Mcp-Protocol-Version": version, "Mcp-Method": "tools/call", "Mcp-Name": tool})
    reply = message(response)
    assert "result" in reply, reply
    return reply["result"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_discover_lists_visible_sources_with_the_seed_fields(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        body = structured(await client.call_tool("rag_discover_resources", {"username": "alice"}))
        paged = structured(await client.call_tool("rag_discover_resources", {
            "username": "alice", "filters": {"page": 2, "page_size": 2}}))
    assert body["contract_version"] == body["meta_data"]["contract_version"] == "rag-tools-v1"
    resources = {r["id"]: r for r in body["results"]["resources"]}
    assert {"product-docs", "hr-policies", "support-forum", "security", "sales"} <= set(resources)
    assert not {"legal", "engineering-wiki"} & set(resources)
    product = resources["product-docs"]
    assert product["authMode"] == ("api_key" if transport == "http" else "none")
    assert product["counts"]["docs"] >= 10 and product["lastIndexed"].endswith("Z")
    assert resources["security"]["groups"] == ["security-team"] and resources["security"]["authRequired"]
    assert resources["security"]["counts"] is None, "alice does not see every security document"
    assert body["results"]["paging"]["total"] == len(resources)
    assert [r["id"] for r in paged["results"]["resources"]] == sorted(resources)[2:4]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_raw_results_hits_come_only_from_the_requested_sources(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        body = structured(await client.call_tool("rag_get_raw_results", {
            "username": "alice", "query": "how do I report a security incident or phishing email",
            "sources": ["security", "hr-policies"], "top_k": 6}))
    hits = body["results"]["hits"]
    assert 1 <= len(hits) <= 6 and body["results"]["error"] is None
    assert {h["resourceId"] for h in hits} <= {"security", "hr-policies"}
    assert _artifact(hits[0]["id"]) == "security-incident-reporting-2025"
    assert not SECURITY_TEAM_DOCS & {_artifact(h["id"]) for h in hits}
    for h in hits:
        assert h["chunk"] and h["title"] and h["uri"].startswith(secure_corpus.base_url + "/documents/")
        assert set(h["provenance"]["scores"]) == {"relevancy", "recency", "richness", "reputation"}
        assert h["provenance"]["source_uri"] is None or h["provenance"]["source_uri"].startswith("http")
    asked = set(analyse("how do I report a security incident or phishing email"))   # highlights slice matched words
    assert hits[0]["highlights"] and all(set(analyse(h["snippet"][a:b])) & asked and h["snippet"][a:b].isalnum()
                                         for h in hits for a, b in h["highlights"] or [])
    assert body["results"]["stats"]["top_k"] == 6 and body["meta_data"]["username"] == "alice"
    assert json.loads(body["artifacts"][0]["data"]).keys() == {"security", "hr-policies"}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_unknown_and_forbidden_sources_are_named_errors(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        unknown = structured(await client.call_tool("rag_get_raw_results", {
            "username": "alice", "query": "hotel limits", "sources": ["no-such-source"]}))
        forbidden = structured(await client.call_tool("rag_get_raw_results", {
            "username": "alice", "query": "hotel limits", "sources": ["legal"]}))
        mixed = structured(await client.call_tool("rag_get_raw_results", {
            "username": "alice", "query": "hotel limits", "sources": ["hr-policies", "legal", "nope"]}))
    assert unknown["results"]["error"]["code"] == "invalid_source"
    assert "no-such-source" in unknown["results"]["error"]["message"] and not unknown["results"]["hits"]
    assert forbidden["results"]["error"]["code"] == "unauthorized_source" and not forbidden["results"]["hits"]
    assert mixed["results"]["hits"] and {h["resourceId"] for h in mixed["results"]["hits"]} == {"hr-policies"}
    assert {(e["source"], e["code"]) for e in mixed["meta_data"]["source_errors"]} == {
        ("legal", "unauthorized_source"), ("nope", "invalid_source")}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_synthesized_results_cite_visible_passages(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        body = structured(await client.call_tool("rag_get_synthesized_results", {
            "username": "alice", "query": "What are the current hotel and meal expense limits?",
            "sources": ["hr-policies"], "top_k": 4, "synthesis_params": {"style": "concise", "max_chars": 600}}))
    results = body["results"]
    assert results["answer"] and len(results["answer"]) <= 600 and results["error"] is None
    assert results["citations"] and all(c["resourceId"] == "hr-policies" and c["title"] and c["uri"]
                                        for c in results["citations"])
    assert "hr-travel-exceptions-2026" not in {_artifact(c["id"]) for c in results["citations"]}
    assert all(c["offsets"]["chunk_index"] == int(c["id"].rsplit("#", 1)[1]) for c in results["citations"])
    documents = {d.artifact.artifact_id: d for d in corpus()["acme"]}
    for c in results["citations"]:                  # the span: the document's text the passage was cut from
        d = documents[_artifact(c["id"])]
        text = to_text(d.content, content_kind(d.content_type))
        row = prepare_document(KnowledgeStoreSettings(), d, 0).rows[c["offsets"]["chunk_index"]]
        assert 0 <= c["offsets"]["start"] < c["offsets"]["end"] <= len(text)
        assert _unheaded(text[c["offsets"]["start"]:c["offsets"]["end"]]) == _unheaded(row.text)
    assert set(results["limits"]) == {"truncated", "reason"}
    assert body["meta_data"]["method"] in ("llm", "extractive") and body["meta_data"]["latency_ms"] >= 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_provided_context_is_rechecked_and_hidden_entries_are_dropped(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        body = structured(await client.call_tool("rag_get_synthesized_results", {
            "username": "alice", "query": "travel exceptions and hotel limits",
            "provided_context": {"hits": [{"id": "travel-policy-2026-update#0", "chunk": "IGNORE ME"},
                                          "hr-travel-exceptions-2026#0", "legal-hotel-settlement#0"]}}))
    cited = {_artifact(c["id"]) for c in body["results"]["citations"]}
    assert cited <= {"travel-policy-2026-update"}
    assert "IGNORE ME" not in body["results"]["answer"]
    assert any("2 provided hit(s) dropped" in n for n in body["meta_data"]["notes"])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_core_tools_still_work(secure_corpus, transport):
    async with connect(secure_corpus, transport) as client:
        ranked = structured(await client.call_tool("search_and_rank", {
            "user_query_text": "how do I report a security incident", "top_k_final_rank": 5}))
        titles = [r["associated_artifact"]["artifact_id"] for r in ranked["results"]]
        assert titles and not SECURITY_TEAM_DOCS & set(titles)
        top = ranked["results"][0]
        assert {top["snippet"][a:b].lower() for a, b in top["highlights"]} & {"report", "security", "incident"}
        name = f"itest-{transport}"
        put = structured(await client.call_tool("put_ranking_profile", {
            "name": name, "weights": {"relevancy": 0.7, "recency": 0.1, "richness": 0.1, "reputation": 0.1},
            "rerank_top_n": 7, "rerank_weight": 0.25}))
        got = structured(await client.call_tool("get_ranking_profile", {"name": name}))
        listed = structured(await client.call_tool("list_ranking_profiles", {}))
        vote = structured(await client.call_tool("record_feedback", {
            "target_id": ranked["results"][0]["persona_knowledge_entry_id"], "helpful": True}))
        bad = await client.call_tool("search_and_rank", {"user_query_text": ""})
        tuned_by_hand = await client.call_tool("put_ranking_profile", {      # only `nucleus tune` names a model
            "name": name, "weights": {"relevancy": 1, "recency": 0, "richness": 0, "reputation": 0},
            "model_sha256": "ab" * 32})
    assert "model_sha256" in error_text(tuned_by_hand) and "nucleus tune" in error_text(tuned_by_hand)
    assert put["name"] == got["name"] == name and name in {p["name"] for p in listed["profiles"]}
    assert (got["reranker"], got["rerank_top_n"], got["rerank_weight"]) == ("", 7, 0.25)
    assert vote["feedback_helpful"] >= 1
    assert "user_query_text" in error_text(bad)


async def test_a_vote_names_the_search_it_was_given_on_and_is_checked_against_it(secure_corpus):
    query = {"search_phrases": ["current hotel limits?", "travel expense limits for hotels"]}
    async with connect(secure_corpus, "http") as alice:
        found = structured(await alice.call_tool("rag_search", query))
        raw = structured(await alice.call_tool("rag_get_raw_results", {"username": "alice", "query": "hotel limits",
                                                                       "sources": ["hr-policies"]}))
        sid, uid = found["search_id"], found["segments"][0]["segment_uid"]
        vote = structured(await alice.call_tool("record_feedback", {"target_id": uid, "helpful": True,
                                                                    "search_id": sid}))
        hit = raw["results"]["hits"][0]["id"]
        again = structured(await alice.call_tool("record_feedback", {"target_id": hit, "helpful": True,
                                                                     "search_id": raw["meta_data"]["search_id"]}))
        not_shown = await alice.call_tool("record_feedback", {"target_id": "forum-wheel-squeak",
                                                              "target": "artifact", "helpful": True, "search_id": sid})
    async with connect(secure_corpus, "http", "eng") as eng:
        other_user = await eng.call_tool("record_feedback", {"target_id": uid, "helpful": False, "search_id": sid})
    async with connect(secure_corpus, "http", "gina") as gina:
        own = structured(await gina.call_tool("rag_search", query))["segments"][0]["segment_uid"]
        other_tenant = await gina.call_tool("record_feedback", {"target_id": own, "helpful": True, "search_id": sid})
    assert len(sid) >= 22 and raw["meta_data"]["search_id"] not in ("", None, sid)
    assert "forum-wheel-squeak" not in {_artifact(s["segment_uid"]) for s in found["segments"]}
    assert vote["feedback_helpful"] >= 1
    if _artifact(hit) == _artifact(uid):                                     # one vote per user per document
        assert again["feedback_helpful"] == vote["feedback_helpful"]
    for refused in (other_user, not_shown, other_tenant):
        assert "search_id" in error_text(refused)


async def test_max_tokens_bounds_every_answer_as_measured_and_says_what_was_left_out(secure_corpus):
    """Several budgets on each search tool: what the client receives (every content item and the
    structured content) measured with the bundled MiniLM tokenizer stays within it."""
    from services.rag_pipeline.tools.budget import result_tokens

    calls = {"rag_search": {"search_phrases": ["current hotel and meal expense limits"], "max_segments": 8},
             "search_and_rank": {"user_query_text": "how do I report a security incident", "top_k_final_rank": 8},
             "rag_get_raw_results": {"username": "alice", "query": "how do I report a security incident",
                                     "sources": ["security", "hr-policies"], "top_k": 8}}
    async with connect(secure_corpus, "http") as client:
        for tool, args in calls.items():
            full = await client.call_tool(tool, args)
            assert "budget" not in structured(full)                # without max_tokens: as before
            for budget in (900, 2_000, 6_000):
                result = await client.call_tool(tool, {**args, "max_tokens": budget})
                body = structured(result)
                assert result_tokens(result) <= budget, (tool, budget)
                assert body["budget"]["max_tokens"] == budget and body["budget"]["tokens"] <= budget
            assert body["budget"]["omitted"] == 0 or body["budget"]["shortened"] > 0
            assert result_tokens(full) > 900 and structured(await client.call_tool(
                tool, {**args, "max_tokens": 900}))["budget"]["omitted"] > 0, tool
        refused = await client.call_tool("rag_get_raw_results", {**calls["rag_get_raw_results"], "max_tokens": 100})
        assert "max_tokens" in error_text(refused) and "give at least" in error_text(refused)
        with pytest.raises(MCPError) as err:
            await client.call_tool("rag_search", {**calls["rag_search"], "max_tokens": 10})
        assert "max_tokens" in str(err.value)
