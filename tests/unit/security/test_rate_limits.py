"""Per-principal rate limits on the RAGPipeline's transports: MCP tool calls over the limit get
JSON-RPC -32029 with `data.retry_after`, gRPC calls RESOURCE_EXHAUSTED with a `retry-after`
trailing metadata entry; one caller's bucket never limits another; operators are not limited."""
from __future__ import annotations

import grpc
import pytest

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.grpc_api import RagPipelineServicer
from services.rag_pipeline.main import build
from shared.auth.grpc_auth import AuthServerInterceptor
from shared.errors import Unauthenticated
from shared.identity import Principal
from shared.ratelimit import RateLimiter
from shared.ratelimit_adapters import RateLimitInterceptor
from shared.service_runner import mcp_http_app
from shared.settings import RagPipelineSettings
from tests.support.auth_material import ALICE_KEY, make_jwt
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.support.raw_mcp import http_to, session

RATE_LIMITED = -32029


async def test_mcp_tool_calls_over_the_limit_are_refused_with_retry_after_per_caller(config_file, keys, tmp_path):
    # 2 calls of burst and a refill so slow that the test's own run time cannot add a token
    settings = RagPipelineSettings(knowledge_store_target="127.0.0.1:1", llm_target="127.0.0.1:1",
                                   audit_log=tmp_path / "audit.jsonl", link_secret="s" * 32, require_auth=True,
                                   auth_config=config_file, rate_limit_per_s=0.001, rate_limit_burst=2)
    spec = build(settings, stdio=False)
    app = mcp_http_app(spec, settings)
    call = {"name": "list_ranking_profiles", "arguments": {}}
    async with http_to(app) as client:
        alice = await session(client, {"Authorization": f"Bearer {ALICE_KEY}"})
        answers = [await alice.request("tools/call", call) for _ in range(3)]
        assert all("result" in a for a in answers[:2]), answers        # tool errors (no backend), not limited
        refused = answers[2]["error"]
        assert refused["code"] == RATE_LIMITED and "retry after" in refused["message"]
        assert 900 <= refused["data"]["retry_after"] <= 1000
        assert "result" in await alice.request("tools/list", {})        # only tool calls are counted
        carol = await session(client, {"Authorization": f"Bearer {make_jwt(keys)}"})
        assert "result" in await carol.request("tools/call", call)      # her own bucket
    await spec.close()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _authenticate(metadata) -> Principal:
    who = metadata.get("authorization", "").removeprefix("Bearer ")
    if who == "operator":
        return Principal(tenant_id="", user_id="operator", roles=("admin", "operator"), auth_method="operator")
    if who in ("alice", "bob"):
        return Principal(tenant_id="acme", user_id=who, auth_method="api_key")
    raise Unauthenticated("unknown caller")


@pytest.fixture
async def rag_stub(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    clock = Clock()
    server = grpc.aio.server(interceptors=[AuthServerInterceptor(_authenticate),
                                           RateLimitInterceptor(RateLimiter(1.0, 2, clock=clock))])
    rag_grpc.add_RagPipelineServicer_to_server(
        RagPipelineServicer(RagPipeline(RagPipelineSettings(), knowledge, InProcessLanguageModel())), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield rag_grpc.RagPipelineStub(channel), clock
    await channel.close()
    await server.stop(None)
    await knowledge.close()


async def _list(stub, who: str):
    return await stub.ListRankingProfiles(pb.ListRankingProfilesRequest(tenant_id="acme"), timeout=10,
                                          metadata=(("authorization", f"Bearer {who}"),))


async def test_grpc_calls_over_the_limit_are_resource_exhausted_with_retry_after(rag_stub):
    stub, clock = rag_stub
    await _list(stub, "alice")
    await _list(stub, "alice")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _list(stub, "alice")
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(err.value.trailing_metadata() or ())["retry-after"] == "1"
    assert "retry after 1 s" in err.value.details()
    await _list(stub, "bob")                                    # another caller: his own bucket
    for _ in range(10):
        await _list(stub, "operator")                           # the stack's operator: not limited
    clock.now += 1.0
    await _list(stub, "alice")                                  # one token back after 1 s
