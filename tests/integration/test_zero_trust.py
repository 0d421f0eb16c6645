"""Zero trust inside the stack, against the secure stack (auth on, every port): the internal
ports refuse anyone without a stack credential, end-user credentials are not stack
credentials, the store holds a user assertion to its tenant and groups itself, and one access
decision serves gRPC and MCP alike (the same case matrix over both transports)."""
from __future__ import annotations

import grpc
import httpx
import pytest
from google.protobuf.json_format import MessageToDict

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from nucleus.v1 import llm_orchestration_pb2 as llm_pb
from nucleus.v1 import llm_orchestration_pb2_grpc as llm_grpc
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from shared.auth.service_identity import ServiceSigner
from shared.identity import OPERATOR
from shared.identity import Principal
from tests.integration.secure_stack import SECURITY_TEAM_DOCS
from tests.support.mcp_clients import http_client, structured

pytestmark = pytest.mark.integration

HR_ONLY = "hr-travel-exceptions-2026"
ENGINEERING_WIKI = {"wiki-e214-localization-recovery", "wiki-dock-firmware-compat"}

KS_CALLS = [
    ("GetEntries", ks_pb.GetEntriesRequest(tenant_id="acme", entry_ids=[f"{HR_ONLY}#0"])),
    ("IngestDocuments", ks_pb.IngestDocumentsRequest(tenant_id="acme", documents=[ks_pb.Document(
        artifact=pb.ArtifactMetadata(artifact_id="injected"), content="INJECTED")])),
    ("DeleteArtifacts", ks_pb.DeleteArtifactsRequest(tenant_id="acme", artifact_ids=[HR_ONLY])),
    ("SearchPersonaKnowledgeByFilters", ks_pb.FilterSearchRequest(tenant_id="acme", keywords="travel", top_k=5)),
    ("GetTenantStats", ks_pb.TenantStatsRequest(tenant_id="acme")),
]
LLM_CALLS = [
    ("GenerateEmbeddings", llm_pb.GenerateEmbeddingsRequest(texts=["hello"] * 4)),
    ("Synthesize", llm_pb.SynthesizeRequest(query="q", passages=[llm_pb.Passage(id="p", title="t", text="x")])),
]


def _stub(addresses, service):
    channel = grpc.aio.insecure_channel(addresses[service]["grpc"])
    stub = ks_grpc.KnowledgeStoreStub(channel) if service == "knowledge_store" else llm_grpc.LlmOrchestrationStub(channel)
    return channel, stub


def _signed(stack, signer_name: str, audience: str, user: Principal | None = None, tenant: str = ""):
    token = ServiceSigner.load(stack.identity_dir, signer_name).token(audience, user, tenant=tenant)
    return (("authorization", f"Bearer {token}"),)


@pytest.mark.parametrize("service,calls", [("knowledge_store", KS_CALLS), ("llm_orchestration", LLM_CALLS)])
async def test_internal_grpc_ports_refuse_callers_without_a_stack_credential(secure_corpus, service, calls):
    channel, stub = _stub(secure_corpus.addresses, service)
    try:
        for method, request in calls:
            for metadata in (None, (("authorization", f"Bearer {secure_corpus.keys['sec']}"),),
                             (("authorization", "Bearer " + secure_corpus.jwt()),)):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await getattr(stub, method)(request, timeout=10, metadata=metadata)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, (method, metadata)
    finally:
        await channel.close()


async def test_nothing_was_injected_or_deleted_by_the_refused_calls(secure_corpus):
    channel, ks = _stub(secure_corpus.addresses, "knowledge_store")
    try:
        got = await ks.GetEntries(ks_pb.GetEntriesRequest(tenant_id="acme", entry_ids=[f"{HR_ONLY}#0", "injected#0"]),
                                  timeout=10, metadata=_signed(secure_corpus, OPERATOR, "knowledge_store"))
    finally:
        await channel.close()
    assert [e.entry.artifact_id for e in got.entries] == [HR_ONLY]


async def test_the_store_holds_a_user_assertion_to_its_tenant_and_groups(secure_corpus):
    channel, ks = _stub(secure_corpus.addresses, "knowledge_store")
    alice = Principal(tenant_id="acme", user_id="alice")
    hank = Principal(tenant_id="acme", user_id="hr-hank@acme.test", groups=("hr",))
    wanted = ks_pb.GetEntriesRequest(tenant_id="acme", entry_ids=[f"{HR_ONLY}#0"])
    try:
        as_alice = await ks.GetEntries(wanted, timeout=10, metadata=_signed(secure_corpus, "rag_pipeline",
                                                                             "knowledge_store", alice))
        as_hank = await ks.GetEntries(wanted, timeout=10, metadata=_signed(secure_corpus, "rag_pipeline",
                                                                            "knowledge_store", hank))
        search = await ks.SearchPersonaKnowledgeByFilters(
            ks_pb.FilterSearchRequest(tenant_id="acme", keywords="travel exceptions register", top_k=50,
                                      filters=pb.KnowledgeSearchFilters(visibility_groups=["hr"])),
            timeout=10, metadata=_signed(secure_corpus, "rag_pipeline", "knowledge_store", alice))
        with pytest.raises(grpc.aio.AioRpcError) as other_tenant:
            await ks.GetEntries(ks_pb.GetEntriesRequest(tenant_id="globex", entry_ids=["globex-travel#0"]),
                                timeout=10, metadata=_signed(secure_corpus, "rag_pipeline", "knowledge_store", alice))
        with pytest.raises(grpc.aio.AioRpcError) as write:
            await ks.DeleteArtifacts(ks_pb.DeleteArtifactsRequest(tenant_id="acme", artifact_ids=[HR_ONLY]),
                                     timeout=10, metadata=_signed(secure_corpus, "rag_pipeline", "knowledge_store",
                                                                   alice))
    finally:
        await channel.close()
    assert not as_alice.entries and [e.entry.artifact_id for e in as_hank.entries] == [HR_ONLY]
    assert HR_ONLY not in {h.entry.artifact_id for h in search.hits}
    assert other_tenant.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert write.value.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in write.value.details()


@pytest.mark.parametrize("service", ["knowledge_store", "llm_orchestration"])
async def test_internal_mcp_ports_need_a_stack_credential(secure_corpus, service):
    url = secure_corpus.addresses[service]["mcp"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    service_token = _signed(secure_corpus, "rag_pipeline", service)[0][1]    # services use gRPC, not /mcp
    for auth in ({}, {"Authorization": f"Bearer {secure_corpus.keys['sec']}"}, {"Authorization": service_token}):
        response = httpx.post(url, json=body, headers={**headers, **auth}, timeout=30)
        assert response.status_code == 401, (auth, response.status_code)
    token = _signed(secure_corpus, OPERATOR, service, tenant="acme")[0][1]
    async with http_client(url, {"Authorization": token}) as client:
        tools = await client.list_tools()
        assert tools.tools
        if service == "knowledge_store":
            stats = structured(await client.call_tool("tenant_stats", {}))
            assert stats["tenant_id"] == "acme"


# ---------------------------------------------------------------------------- one matrix, two transports
CASES = [
    # who, extra headers, query, filters.source_ids, artifacts that must never come back
    ("alice", {}, "E214 localization lost field notes", ["engineering-wiki"], ENGINEERING_WIKI),
    ("alice", {}, "travel exceptions register approvals", [], {HR_ONLY}),
    ("eng", {}, "suspected fleet compromise incident response runbook", [], SECURITY_TEAM_DOCS),
    ("platform", {"x-user-id": "hr-hank@acme.test", "x-session-tags": '["department:sales"]'},
     "hotel expense limits travel", [], {"engineering-travel-note"}),
]


async def _mcp_ids(stack, who, headers, query, sources) -> list[str]:
    async with http_client(stack.mcp_url, stack.headers(who, **headers)) as client:
        out = structured(await client.call_tool("search_and_rank", {
            "user_query_text": query, "top_k_final_rank": 20, "filters": {"source_ids": sources}}))
    return [r["associated_artifact"]["artifact_id"] for r in out["results"]]


async def _grpc_ids(stack, who, headers, query, sources) -> list[str]:
    async with grpc.aio.insecure_channel(stack.addresses["rag_pipeline"]["grpc"]) as channel:
        response = await rag_grpc.RagPipelineStub(channel).SearchAndRank(
            rag_pb.SearchAndRankRequest(user_query_text=query, top_k_final_rank=20,
                                        filters=pb.KnowledgeSearchFilters(source_ids=sources)),
            timeout=30, metadata=tuple((k.lower(), v) for k, v in stack.headers(who, **headers).items()))
    return [MessageToDict(r)["associatedArtifact"]["artifactId"] for r in response.results]


@pytest.mark.parametrize("case", range(len(CASES)))
async def test_the_same_access_decision_over_mcp_and_grpc(secure_corpus, case):
    who, headers, query, sources, forbidden = CASES[case]
    over_mcp = await _mcp_ids(secure_corpus, who, headers, query, sources)
    over_grpc = await _grpc_ids(secure_corpus, who, headers, query, sources)
    assert not forbidden & set(over_mcp), over_mcp
    assert not forbidden & set(over_grpc), over_grpc
    assert over_mcp == over_grpc


async def test_the_matrix_can_tell_a_leak(secure_corpus):
    """The allowed counterpart of the matrix's first case: an engineer does get the wiki."""
    ids = await _grpc_ids(secure_corpus, "eng", {}, "E214 localization lost field notes", ["engineering-wiki"])
    assert ENGINEERING_WIKI & set(ids)
