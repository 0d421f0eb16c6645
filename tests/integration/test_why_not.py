"""rag_why_not (services/rag_pipeline/why_not.py) on the secure stack: the deciding factor of a
document kept out by a filter, by the candidate cut and by the weights; a document hidden from the
caller answers as a made-up id, with the same KnowledgeStore calls (counted by the store's own
/metrics); a search id works for its own caller only; more than 5 ids are invalid params."""
from __future__ import annotations

import asyncio
import calendar
from collections import Counter

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from shared.auth.service_identity import scrape_token_file
from tests.support.mcp_clients import http_client, structured

pytestmark = pytest.mark.integration
TRAVEL = "travel expense policy hotel meals"
OLD_TRAVEL = "travel-policy-2021"            # modified 2021-03-01; acme's strongest match for TRAVEL


def _doc(body: dict, aid: str) -> dict:
    [doc] = [d for d in body["documents"] if d["artifact_id"] == aid]
    return doc


async def test_each_document_gets_the_factor_that_kept_it_out(secure_corpus):
    since_2025 = calendar.timegm((2025, 1, 1, 0, 0, 0))
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        dated = structured(await client.call_tool("rag_why_not", {
            "artifact_ids": [OLD_TRAVEL], "user_query_text": TRAVEL, "filters": {"date_from_unix": since_2025}}))
        cut = structured(await client.call_tool("rag_why_not", {
            "artifact_ids": [OLD_TRAVEL], "user_query_text": "pallas battery charging guide",
            "top_k_initial_retrieve": 2, "top_k_final_rank": 2}))
        weighed = structured(await client.call_tool("rag_why_not", {
            "artifact_ids": [OLD_TRAVEL, "travel-policy-2026-update"], "user_query_text": TRAVEL,
            "top_k_final_rank": 1, "recency_mode": "always",
            "weights": {"relevancy": 0.2, "recency": 0.8, "richness": 0, "reputation": 0}}))
    doc = _doc(dated, OLD_TRAVEL)
    assert (doc["deciding_factor"], doc["filter"]) == ("filter", "date_from_unix")
    assert doc["value"].startswith("2021-03-01") and doc["rank"] == 0
    doc = _doc(cut, OLD_TRAVEL)
    assert doc["deciding_factor"] == "not_retrieved" and doc["rank"] == 0
    assert doc["dense"]["how"] == "probed" and doc["dense"]["score"] < doc["dense"]["last_candidate"]
    doc = _doc(weighed, OLD_TRAVEL)
    assert doc["deciding_factor"] == "out_ranked" and doc["rank"] > 5, doc
    assert doc["versus"]["factor"] == "recency" and doc["versus"]["document"] < doc["versus"]["shown"]
    assert doc["dense"]["rank"] >= 1 and doc["keyword"]["rank"] >= 1, "both legs retrieved it"
    assert set(doc["scores"]) == {"relevancy", "recency", "richness", "reputation"}
    assert doc["weights"]["recency"] == pytest.approx(0.8)
    assert weighed["shown"] == 1 and weighed["candidates"] > 5


def _store_calls(stack) -> Counter:
    """The requests the KnowledgeStore has served, by method (its /metrics, the scrape token)."""
    token = scrape_token_file(stack.identity_dir).read_text().strip()
    url = stack.addresses["knowledge_store"]["mcp"].removesuffix("/mcp") + "/metrics"
    text = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).text
    return Counter({s.labels["method"]: s.value for family in text_string_to_metric_families(text)
                    for s in family.samples if s.name == "nucleus_requests_total"})


async def _settled(stack) -> Counter:
    """The store's counts once the span-derived series caught up (batch delay 1 s)."""
    await asyncio.sleep(1.1)
    before = _store_calls(stack)
    while True:
        await asyncio.sleep(0.3)
        now = _store_calls(stack)
        if now == before:
            return now
        before = now


async def test_a_hidden_document_answers_as_a_made_up_id_with_the_same_store_calls(secure_corpus):
    args = {"user_query_text": "travel exceptions approved by hr"}
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as alice:
        await alice.call_tool("rag_why_not", {**args, "artifact_ids": ["warm-up"]})   # profiles cached
        start = await _settled(secure_corpus)
        hidden = structured(await alice.call_tool("rag_why_not", {**args,
                                                                  "artifact_ids": ["hr-travel-exceptions-2026"]}))
        after_hidden = await _settled(secure_corpus)
        made_up = structured(await alice.call_tool("rag_why_not", {**args,
                                                                   "artifact_ids": ["hr-travel-exceptions-2027"]}))
        after_made_up = await _settled(secure_corpus)
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("sec")) as hr:   # sec is not in hr either
        seen = structured(await hr.call_tool("rag_why_not", {**args, "artifact_ids": ["travel-policy-2021"]}))
    [a], [b] = hidden["documents"], made_up["documents"]
    assert {**a, "artifact_id": ""} == {**b, "artifact_id": ""} and a["found"] is False
    assert {k: v for k, v in hidden.items() if k != "documents"} == {k: v for k, v in made_up.items()
                                                                        if k != "documents"}
    # a profile cache's refresh may fall between any two calls: the ids decide every other call
    calls_hidden, calls_made_up = [Counter({m: n for m, n in (b - a).items() if not m.endswith("/GetRankingProfile")})
                                   for a, b in ((start, after_hidden), (after_hidden, after_made_up))]
    print("store calls per why-not:", dict(calls_hidden), dict(calls_made_up))
    assert calls_hidden == calls_made_up and calls_hidden["nucleus.v1.KnowledgeStore/Retrieve"] >= 2
    assert _doc(seen, "travel-policy-2021")["found"] is True


async def test_a_search_id_is_its_callers_only_and_ids_are_at_most_five(secure_corpus):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("sec")) as sec, \
            http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as alice:
        search = structured(await sec.call_tool("search_and_rank", {"user_query_text": TRAVEL, "top_k_final_rank": 2,
                                                                    "explain": False}))
        assert search["next_cursor"] and search["search_id"]
        own = structured(await sec.call_tool("rag_why_not", {"artifact_ids": [OLD_TRAVEL],
                                                             "search_id": search["search_id"]}))
        partial = structured(await sec.call_tool("search_and_rank", {"user_query_text": TRAVEL, "explain": False,
                                                                     "top_k_final_rank": 100}))
        assert partial["search_id"] and not partial.get("next_cursor")    # not a full page: no ranking held
        named = structured(await sec.call_tool("rag_why_not", {"artifact_ids": [OLD_TRAVEL],
                                                               "search_id": partial["search_id"]}))
        refusals = []
        for sid in (search["search_id"], "x" * len(search["search_id"])):      # sec's own, and an unknown one
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("rag_why_not", {"artifact_ids": [OLD_TRAVEL], "search_id": sid})
            refusals.append((refused.value.code, refused.value.message))
        with pytest.raises(MCPError) as too_many:
            await alice.call_tool("rag_why_not", {"artifact_ids": [f"doc-{i}" for i in range(6)],
                                                  "user_query_text": TRAVEL})
    assert own["search_id"] == search["search_id"] and own["page_size"] == 2
    assert (named["search_id"], named["page_size"]) == (partial["search_id"], 100)      # its request, held alone
    assert _doc(own, OLD_TRAVEL)["found"] is True
    assert refusals[0] == refusals[1] and refusals[0][0] == -32602 and "search_id" in refusals[0][1]
    assert too_many.value.code == -32602
    assert "artifact_ids" in too_many.value.message and "at most 5" in too_many.value.message
