"""shared.auth.grpc_auth over a real gRPC server on 127.0.0.1: every call is verified before
its handler runs (health checks excepted), the handler sees the verified caller, and a client
signs as itself or, inside `acting_for`, for the user."""
from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from shared.auth.service_auth import ServiceAuth
from shared.auth.service_identity import ensure_identities
from shared.identity import Principal, acting_for, verified_caller

ECHO = "/test.Echo/Who"


def _echo_handler():
    async def who(request: bytes, context) -> bytes:
        p = verified_caller()
        return f"{p.auth_method}|{p.tenant_id}|{p.user_id}|{','.join(p.groups)}".encode()

    async def who_streamed(request: bytes, context):
        for _ in range(2):                          # the caller holds for the whole stream
            yield (await who(request, context))

    return grpc.method_handlers_generic_handler("test.Echo", {
        "Who": grpc.unary_unary_rpc_method_handler(who, request_deserializer=None, response_serializer=None),
        "WhoStreamed": grpc.unary_stream_rpc_method_handler(who_streamed, request_deserializer=None,
                                                            response_serializer=None)})


@pytest.fixture
async def served(tmp_path):
    ident = ensure_identities(tmp_path / "identity")
    callee = ServiceAuth.load("knowledge_store", ident)
    server = grpc.aio.server(interceptors=[callee.server_interceptor()])
    server.add_generic_rpc_handlers((_echo_handler(),))
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield ident, f"127.0.0.1:{port}"
    await server.stop(None)


async def _who(target: str, interceptors=None, metadata=None) -> str:
    async with grpc.aio.insecure_channel(target, interceptors=interceptors) as channel:
        call = channel.unary_unary(ECHO, request_serializer=None, response_deserializer=None)
        return (await call(b"", timeout=5, metadata=metadata)).decode()


async def test_a_call_without_a_token_never_reaches_the_handler(served):
    _, target = served
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _who(target)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _who(target, metadata=(("authorization", "Bearer nrk_not_a_service_token"),))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_health_checks_need_no_credentials(served):
    _, target = served
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_signed_call_is_served_as_the_calling_service(served):
    ident, target = served
    rag = ServiceAuth.load("rag_pipeline", ident)
    assert await _who(target, rag.client_interceptors("knowledge_store")) == "service||service:rag_pipeline|"


async def test_inside_acting_for_the_call_carries_the_user(served):
    ident, target = served
    rag = ServiceAuth.load("rag_pipeline", ident)
    alice = Principal(tenant_id="acme", user_id="alice", groups=("hr",))
    with acting_for(alice):
        who = await _who(target, rag.client_interceptors("knowledge_store"))
    assert who == "on_behalf_of|acme|alice|hr"


async def test_a_service_that_may_not_call_is_permission_denied(served):
    ident, target = served
    llm = ServiceAuth.load("llm_orchestration", ident)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _who(target, llm.client_interceptors("knowledge_store"))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_call_with_a_streamed_reply_is_signed_and_served_as_the_caller(served):
    ident, target = served
    rag = ServiceAuth.load("rag_pipeline", ident)
    async with grpc.aio.insecure_channel(target, interceptors=rag.client_interceptors("knowledge_store")) as channel:
        call = channel.unary_stream("/test.Echo/WhoStreamed", request_serializer=None, response_deserializer=None)
        replies = [r.decode() async for r in call(b"", timeout=5)]
    assert replies == ["service||service:rag_pipeline|"] * 2
    async with grpc.aio.insecure_channel(target) as channel:          # unsigned: refused before the handler
        call = channel.unary_stream("/test.Echo/WhoStreamed", request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [r async for r in call(b"", timeout=5)]
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
