"""With auth required, gRPC callers are identified like MCP callers: the bearer token in the
call metadata decides tenant, user and groups; a tenant_id in the request cannot override it."""
from __future__ import annotations

import grpc
import pytest

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from shared.identity import LOCAL_PRINCIPAL_METADATA
from tests.integration.secure_stack import GLOBEX_CANARY, SECURITY_TEAM_DOCS, bearer

pytestmark = pytest.mark.integration


@pytest.fixture
def rag(secure_rag):
    return secure_rag


async def test_grpc_search_without_a_token_is_unauthenticated(rag):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(tenant_id="acme", user_query_text="battery"), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_grpc_search_with_an_unknown_key_is_unauthenticated(rag):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(user_query_text="battery"), timeout=10,
                                metadata=(("authorization", "Bearer nrk_forged_key_123456"),))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "nrk_forged" not in err.value.details()


async def test_grpc_tenant_comes_from_the_token_and_cannot_be_overridden(rag, secure_corpus):
    response = await rag.SearchAndRank(rag_pb.SearchAndRankRequest(user_query_text="battery care guide"),
                                       timeout=30, metadata=bearer(secure_corpus, "alice"))
    assert response.results
    assert all(GLOBEX_CANARY not in r.text for r in response.results)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(rag_pb.SearchAndRankRequest(tenant_id="globex", user_query_text=GLOBEX_CANARY),
                                timeout=10, metadata=bearer(secure_corpus, "alice"))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_with_auth_on_asking_for_the_local_principal_of_a_tenant_changes_nothing(rag, secure_corpus):
    """`nucleus search --tenant T` asks (auth off) for the local principal of T; with auth on the
    verified key decides: alice (acme) is refused globex, and no key is still unauthenticated."""
    asks = rag_pb.SearchAndRankRequest(tenant_id="globex", user_query_text=GLOBEX_CANARY)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(asks, timeout=10, metadata=(*bearer(secure_corpus, "alice"), LOCAL_PRINCIPAL_METADATA))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "globex" in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.SearchAndRank(asks, timeout=10, metadata=(LOCAL_PRINCIPAL_METADATA,))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_grpc_results_respect_the_callers_groups(rag, secure_corpus):
    query = rag_pb.SearchAndRankRequest(user_query_text="suspected fleet compromise incident response runbook",
                                        top_k_final_rank=20)
    alice = await rag.SearchAndRank(query, timeout=30, metadata=bearer(secure_corpus, "alice"))
    sec = await rag.SearchAndRank(query, timeout=30, metadata=bearer(secure_corpus, "sec"))
    alice_ids = {r.associated_artifact.artifact_id for r in alice.results}
    sec_ids = {r.associated_artifact.artifact_id for r in sec.results}
    assert not alice_ids & SECURITY_TEAM_DOCS
    assert sec_ids & SECURITY_TEAM_DOCS


async def test_grpc_profiles_are_scoped_to_the_callers_tenant(rag, secure_corpus):
    profile = pb.RankingProfile(name="grpc-scoped", relevancy_weight=1, fusion_method=pb.FUSION_METHOD_RRF)
    stored = await rag.PutRankingProfile(profile, timeout=10, metadata=bearer(secure_corpus, "gina"))
    assert stored.tenant_id == "globex"
    listed = await rag.ListRankingProfiles(pb.ListRankingProfilesRequest(), timeout=10,
                                           metadata=bearer(secure_corpus, "alice"))
    assert "grpc-scoped" not in {p.name for p in listed.profiles}
