"""The three real services on ephemeral ports: SearchAndRank over gRPC and over MCP, bad input."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from tests.support.mcp_clients import error_text, http_client, structured

pytestmark = pytest.mark.integration
TENANT = "itest"


@pytest.fixture(scope="module")
async def ingested(stack, demo_docs):
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    try:
        report = await client.ingest(TENANT, "", demo_docs)
    finally:
        await client.close()
    assert report.total_entries >= len(demo_docs)
    return report


@pytest.fixture
async def rag(stack):
    channel = grpc.aio.insecure_channel(stack["rag_pipeline"]["grpc"])
    yield rag_grpc.RagPipelineStub(channel)
    await channel.close()


def _titles(response) -> list[str]:
    return [r.associated_artifact.title for r in response.results]


async def test_every_service_reports_serving_on_grpc_health(stack):
    for name, full in (("knowledge_store", "nucleus.v1.KnowledgeStore"),
                       ("llm_orchestration", "nucleus.v1.LlmOrchestration"),
                       ("rag_pipeline", "nucleus.v1.RagPipeline")):
        async with grpc.aio.insecure_channel(stack[name]["grpc"]) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=full), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name


async def test_search_and_rank_over_grpc_returns_ranked_results_with_four_scores(ingested, rag):
    response = await rag.SearchAndRank(rag_pb.SearchAndRankRequest(
        tenant_id=TENANT, user_query_text="how do I report a security incident",
        top_k_final_rank=5, ranking_prefs=pb.RankingPreferences(explain=True)), timeout=30)
    assert 1 <= len(response.results) <= 5
    assert not response.degraded, response.degraded_reasons
    assert any("incident" in t.lower() for t in _titles(response)[:3]), _titles(response)
    scores = [r.overall_rank_score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    for r in response.results:
        s = r.individual_scores
        for value in (s.relevancy, s.recency, s.richness, s.reputation, r.overall_rank_score):
            assert 0.0 <= value <= 1.0
        assert r.snippet and r.persona_knowledge_entry_id
        assert r.explanation.fusion_method in ("adaptive", "convex", "rrf")
        assert {r.explanation.dense_source, r.explanation.bm25_source} <= {"retrieved", "completed"}
        assert 0.0 <= r.relevance_probability <= 1.0 and r.explanation.query_profile
        contributions = r.explanation.contributions
        total = contributions.relevancy + contributions.recency + contributions.richness + contributions.reputation
        assert total == pytest.approx(r.overall_rank_score, abs=1e-4)
    stages = {t.stage for t in response.timings}
    assert {"embed", "retrieve", "rank", "total"} <= stages


async def test_search_and_rank_over_mcp_streamable_http(ingested, stack):
    async with http_client(stack["rag_pipeline"]["mcp"]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "search_and_rank" in tools and tools["search_and_rank"].output_schema
        result = await client.call_tool("search_and_rank", {
            "user_query_text": "travel expense limits for hotels", "top_k_final_rank": 3})
    body = structured(result)
    assert 1 <= len(body["results"]) <= 3
    assert any("travel" in r["associated_artifact"]["title"].lower() for r in body["results"])
    assert result.content and json.loads(result.content[0].text)["results"], "text content for older clients"


async def test_empty_query_is_invalid_argument_naming_the_field(ingested, rag):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(tenant_id=TENANT, user_query_text="  "), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "user_query_text" in err.value.details()


@pytest.mark.parametrize("field,kwargs", [
    ("top_k_final_rank", {"top_k_final_rank": 5000}),
    ("top_k_initial_retrieve", {"top_k_final_rank": 20, "top_k_initial_retrieve": 5}),
    ("top_k_initial_retrieve", {"top_k_initial_retrieve": 100000}),
])
async def test_top_k_out_of_range_is_invalid_argument(ingested, rag, field, kwargs):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(tenant_id=TENANT, user_query_text="battery", **kwargs),
                                timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


async def test_negative_weights_are_invalid_argument(ingested, rag):
    prefs = pb.RankingPreferences(has_weights=True, relevancy_weight=1, recency_weight=-0.5)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(tenant_id=TENANT, user_query_text="battery",
                                                            ranking_prefs=prefs), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "recency_weight" in err.value.details()


async def test_unknown_tenant_is_not_found(rag):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(tenant_id="no-such-tenant", user_query_text="battery"),
                                timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-tenant" in err.value.details()


async def test_mcp_bad_input_is_a_tool_error_naming_the_field(ingested, stack):
    async with http_client(stack["rag_pipeline"]["mcp"]) as client:
        result = await client.call_tool("search_and_rank", {"user_query_text": ""})
    assert "user_query_text" in error_text(result)


def _start_rag(tmp_path, ks_target: str, llm_target: str) -> tuple[subprocess.Popen, dict]:
    ready = tmp_path / "rag.ready.json"
    env = dict(os.environ, NUCLEUS_DATA_DIR=str(tmp_path), NUCLEUS_RAG_GRPC_PORT="0", NUCLEUS_RAG_MCP_PORT="-1",
               NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET=ks_target, NUCLEUS_RAG_LLM_TARGET=llm_target,
               NUCLEUS_RAG_DEADLINE_S="5", NUCLEUS_RAG_RETRIEVAL_TIMEOUT_S="2", NUCLEUS_RAG_EMBED_TIMEOUT_S="2")
    proc = subprocess.Popen([sys.executable, "-m", "services.rag_pipeline.main", "--ready-file", str(ready)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "rag pipeline did not start"
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


async def test_knowledge_store_down_is_unavailable_quickly_not_a_hang(tmp_path, stack):
    dead = "127.0.0.1:1"  # nothing listens there
    proc, address = _start_rag(tmp_path, dead, stack["llm_orchestration"]["grpc"])
    try:
        async with grpc.aio.insecure_channel(address["grpc"]) as channel:
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await rag_grpc.RagPipelineStub(channel).SearchAndRank(
                    rag_pb.SearchAndRankRequest(tenant_id=TENANT, user_query_text="battery"), timeout=30)
            elapsed = time.monotonic() - started
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "KnowledgeStore" in err.value.details() or "retrieval" in err.value.details()
        assert elapsed < 10, f"took {elapsed:.1f}s"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


async def test_embedding_service_down_degrades_to_keyword_only(ingested, tmp_path, stack):
    proc, address = _start_rag(tmp_path, stack["knowledge_store"]["grpc"], "127.0.0.1:1")
    try:
        async with grpc.aio.insecure_channel(address["grpc"]) as channel:
            response = await rag_grpc.RagPipelineStub(channel).SearchAndRank(
                rag_pb.SearchAndRankRequest(tenant_id=TENANT, user_query_text="battery fuse reset",
                                            ranking_prefs=pb.RankingPreferences(explain=True)), timeout=30)
        assert response.degraded
        assert any("embedding" in r for r in response.degraded_reasons)
        assert response.results, "keyword leg still answers"
        assert all(r.explanation.dense_rank == 0 for r in response.results)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


async def test_sigterm_shuts_down_gracefully(tmp_path, stack):
    proc, address = _start_rag(tmp_path, stack["knowledge_store"]["grpc"], stack["llm_orchestration"]["grpc"])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert not (tmp_path / "rag.ready.json").exists()


async def test_concurrent_embedding_callers_get_the_vectors_they_get_one_at_a_time(stack):
    """Concurrent callers are batched together (on LlmOrchestration's concurrent session): each
    still gets its own text's vector, the one a lone call gets. Document purpose: not cached."""
    import numpy as np

    from services.llm_orchestration.client import LlmOrchestrationClient

    target = stack["llm_orchestration"]["grpc"]
    clients = [LlmOrchestrationClient(target) for _ in range(8)]
    texts = [f"Trial {i}: vitamin D supplements and bone mineral density in {i + 40}-year-old adults."
             for i in range(24)]
    try:
        alone = [await clients[0].embed([text], purpose="document") for text in texts]
        together = await asyncio.gather(*(clients[i % 8].embed([text], purpose="document")
                                          for i, text in enumerate(texts)))
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    for one, other in zip(alone, together):
        assert one.shape == other.shape == (1, 384)
        assert float(np.abs(one - other).max()) < 1e-5
    assert len({round(float(v[0, 0]), 6) for v in together}) == len(texts)   # no row handed to two callers
