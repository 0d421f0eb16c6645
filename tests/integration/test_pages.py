"""Pages of one search (`cursor` / `next_cursor`, services/rag_pipeline/pages.py) on the secure
stack: later pages come from the first page's ranking, re-read as the caller, and a cursor is
honoured only for its caller and request."""
from __future__ import annotations

import grpc
import pytest
from mcp.shared.exceptions import MCPError

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from tests.integration.secure_stack import bearer
from tests.support.mcp_clients import error_text, http_client, structured

pytestmark = pytest.mark.integration
QUERY = "policy for employees and the team process"


def _ids(body: dict) -> list[str]:
    return [r["persona_knowledge_entry_id"] for r in body["results"]]


async def test_three_pages_are_one_search_without_repeat_or_gap(secure_corpus):
    # "sec" (groups security-team and legal) sees more than 30 documents of the secure corpus
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("sec")) as client:
        whole_body = structured(await client.call_tool("search_and_rank", {
            "user_query_text": QUERY, "top_k_final_rank": 30, "explain": False}))
        whole = _ids(whole_body)
        assert len(whole) == 30, "the corpus must hold 30 results for this query"
        pages, scores, cursor = [], [], None
        for _ in range(3):
            args = {"user_query_text": QUERY, "top_k_final_rank": 10, "explain": False}
            body = structured(await client.call_tool("search_and_rank", {**args, **({"cursor": cursor} if cursor
                                                                                     else {})}))
            pages.append(_ids(body))
            scores.extend(r["overall_rank_score"] for r in body["results"])
            cursor = body.get("next_cursor")
            assert cursor, "a further page is offered"
        raw_args = {"username": "sec", "query": QUERY, "sources": ["hr-policies"], "top_k": 2}
        raw = structured(await client.call_tool("rag_get_raw_results", raw_args))
        raw2 = structured(await client.call_tool("rag_get_raw_results", {**raw_args, "cursor": raw["next_cursor"]}))
        budgeted = structured(await client.call_tool("search_and_rank", {
            "user_query_text": QUERY, "top_k_final_rank": 10, "explain": False, "max_tokens": 2500}))
        after = structured(await client.call_tool("search_and_rank", {
            "user_query_text": QUERY, "top_k_final_rank": 10, "explain": False, "max_tokens": 2500,
            "cursor": budgeted["next_cursor"]}))
    shown = _ids(budgeted)
    assert 0 < budgeted["budget"]["omitted"] < 10 and shown == whole[:len(shown)]
    assert _ids(after)[0] == whole[len(shown)], "the results the budget left out start the next page"
    assert [len(p) for p in pages] == [10, 10, 10]
    assert pages[0] + pages[1] + pages[2] == whole
    assert scores == pytest.approx([r["overall_rank_score"] for r in whole_body["results"]], abs=1e-6)
    assert len(raw2["results"]["hits"]) == 2
    assert {h["id"] for h in raw["results"]["hits"]}.isdisjoint(h["id"] for h in raw2["results"]["hits"])


async def test_a_document_deleted_between_pages_is_not_shown(secure_corpus):
    ks = KnowledgeStoreClient(secure_corpus.addresses["knowledge_store"]["grpc"],
                              interceptors=secure_corpus.operator("knowledge_store"))
    ids = [f"quillback-{i}" for i in range(8)]
    docs = [DocumentIn(ArtifactMeta(artifact_id=aid, title=f"Quillback memo {i}", source_id="hr-policies",
                                    source_type="policy"),
                       f"# Quillback memo {i}\n\nThe quillback marmalade ledger, part {i}: " + "ledger " * i)
            for i, aid in enumerate(ids)]
    args = {"search_phrases": ["quillback marmalade ledger"], "max_segments": 3}
    try:
        await ks.ingest("acme", "", docs)
        async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
            first = structured(await client.call_tool("rag_search", args))
            cursor = first["next_cursor"]
            whole = [s["segment_uid"] for s in structured(await client.call_tool(
                "rag_search", {**args, "max_segments": 8}))["segments"]]
            assert [s["segment_uid"] for s in first["segments"]] == whole[:3]
            await ks.delete("acme", [whole[3].rsplit("#", 1)[0]])
            second = structured(await client.call_tool("rag_search", {**args, "cursor": cursor}))
    finally:
        await ks.delete("acme", ids)
        await ks.close()
    shown = [s["segment_uid"] for s in second["segments"]]
    assert whole[3] not in shown
    assert shown == whole[4:7], "the deleted one dropped, the page filled from the next ones"


async def test_a_tampered_or_another_users_cursor_is_refused(secure_corpus, secure_rag):
    request = rag_pb.SearchAndRankRequest(user_query_text=QUERY, top_k_final_rank=5)
    first = await secure_rag.SearchAndRank(request, metadata=bearer(secure_corpus, "alice"))
    assert first.next_cursor
    second = await secure_rag.SearchAndRank(rag_pb.SearchAndRankRequest(
        user_query_text=QUERY, top_k_final_rank=5, cursor=first.next_cursor), metadata=bearer(secure_corpus, "alice"))
    assert {r.persona_knowledge_entry_id for r in second.results}.isdisjoint(
        r.persona_knowledge_entry_id for r in first.results)
    with pytest.raises(grpc.aio.AioRpcError) as foreign:
        await secure_rag.SearchAndRank(rag_pb.SearchAndRankRequest(
            user_query_text=QUERY, top_k_final_rank=5, cursor=first.next_cursor), metadata=bearer(secure_corpus, "eng"))
    assert foreign.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cursor" in foreign.value.details() and "another caller" in foreign.value.details()

    head, _, sig = first.next_cursor.partition(".")
    tampered = head[:-2] + ("A" if head[-2] != "A" else "B") + head[-1] + "." + sig
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        refused = await client.call_tool("search_and_rank", {"user_query_text": QUERY, "top_k_final_rank": 5,
                                                             "cursor": tampered})
        assert "cursor" in error_text(refused) and "search again" in error_text(refused)
        with pytest.raises(MCPError) as rpc:
            await client.call_tool("rag_search", {"search_phrases": [QUERY], "cursor": first.next_cursor})
    assert rpc.value.error.code == -32602 and "cursor" in rpc.value.error.message
