"""Chat for end users (services/rag_pipeline/chat.py): the caller is checked, then their rate
and token budget, before GenerateChatCompletion is called over real gRPC on 127.0.0.1 (the
chat model is a loopback server speaking the OpenAI API)."""
from __future__ import annotations

import contextlib

import grpc
import pytest

from services.llm_orchestration.chat import ChatChunk, ChatRequest, Message, ToolCall
from services.rag_pipeline.chat import ChatGate, whole_reply
from shared.errors import InvalidArgument, NotFound, ResourceExhausted, Unauthenticated, Unavailable
from shared.identity import OPERATOR, Principal
from tests.support.fake_openai import FakeOpenAI
from tests.support.llm_grpc import served_over_grpc
from tests.unit.llm_orchestration.conftest import Clock, running

ALICE = Principal(tenant_id="acme", user_id="alice", auth_method="api_key")
BOB = Principal(tenant_id="acme", user_id="bob", auth_method="api_key")
ROOT = Principal(tenant_id="", user_id="ops", auth_method=OPERATOR, roles=(OPERATOR,))
ASK = ChatRequest(messages=(Message("user", "hello there"),))


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI(dimension=16) as server:
        yield server


@contextlib.asynccontextmanager
async def llm_over_grpc(fake: FakeOpenAI):
    async with running(fake) as orch, served_over_grpc(orch) as client:
        yield client


def gate(llm, clock, **limits) -> ChatGate:
    values = dict(rate_per_s=0.001, burst=100, token_budget=0, window_s=60.0, require_caller=True)
    values.update(limits)
    return ChatGate(llm, clock=clock, **values)


async def test_without_a_verified_caller_nothing_reaches_the_model(fake):
    async with llm_over_grpc(fake) as llm:
        with pytest.raises(Unauthenticated):
            await whole_reply(gate(llm, Clock()).chat(ASK, None))
        assert not fake.requests
        reply = await whole_reply(gate(llm, Clock(), require_caller=False).chat(ASK, None))   # auth off
        assert reply["content"] == "I am a fake model." and reply["usage"]["input_tokens"] == 7


async def test_each_user_has_their_own_request_rate_and_operators_none(fake):
    async with llm_over_grpc(fake) as llm:
        g = gate(llm, Clock(), burst=2)
        for _ in range(2):
            await whole_reply(g.chat(ASK, ALICE))
        with pytest.raises(ResourceExhausted, match="chat requests") as caught:
            await whole_reply(g.chat(ASK, ALICE))
        assert caught.value.retry_after_s > 0 and len(fake.requests) == 2
        await whole_reply(g.chat(ASK, BOB))
        for _ in range(3):
            await whole_reply(g.chat(ASK, ROOT))
        assert len(fake.requests) == 6


async def test_the_token_budget_caps_max_tokens_refuses_when_spent_and_frees_up(fake):
    clock = Clock()
    async with llm_over_grpc(fake) as llm:
        g = gate(llm, clock, token_budget=20, window_s=60.0)
        first = await whole_reply(g.chat(ASK, ALICE))           # 7 in + 5 out
        assert fake.requests[-1].body["max_tokens"] == 20
        used = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
        assert g.budget.remaining("acme\x1falice") == 20 - used
        await whole_reply(g.chat(ASK, ALICE))
        assert fake.requests[-1].body["max_tokens"] == 20 - used   # capped at what is left
        sent = len(fake.requests)
        with pytest.raises(ResourceExhausted, match="token budget"):
            await whole_reply(g.chat(ASK, ALICE))
        assert len(fake.requests) == sent
        await whole_reply(g.chat(ASK, BOB))                      # another user's budget is untouched
        clock.now += 61.0
        await whole_reply(g.chat(ASK, ALICE))


async def test_whole_reply_joins_streamed_tool_call_pieces():
    async def pieces():
        yield ChatChunk(content="Let me look. ")
        yield ChatChunk(tool_calls=(ToolCall(0, "call_a", "rag_search", '{"search'),))
        yield ChatChunk(tool_calls=(ToolCall(0, "", "", '_phrases": ["x"]}'), ToolCall(1, "call_b", "rag_topics", "{}")))
        yield ChatChunk(finish_reason="tool_calls", input_tokens=3, output_tokens=4, done=True, model="m")
    reply = await whole_reply(pieces())
    assert reply["tool_calls"] == [{"id": "call_a", "name": "rag_search", "arguments": '{"search_phrases": ["x"]}'},
                                   {"id": "call_b", "name": "rag_topics", "arguments": "{}"}]
    assert reply["finish_reason"] == "tool_calls" and reply["usage"] == {"input_tokens": 3, "output_tokens": 4}


async def test_rag_chat_mcp_tool_answers_whole_replies_and_reports_a_spent_budget(fake):
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from services.rag_pipeline.chat_mcp import register_chat_tool
    from tests.support.mcp_clients import error_text, structured

    async with llm_over_grpc(fake) as llm:
        mcp = MCPServer("chat-test")
        register_chat_tool(mcp, gate(llm, Clock(), token_budget=12), lambda ctx: ALICE)   # one reply: 7 + 5
        async with Client(mcp) as client:
            body = structured(await client.call_tool("rag_chat", {"messages": [{"role": "user", "content": "hi"}]}))
            assert body["content"] == "I am a fake model." and body["finish_reason"] == "stop"
            assert body["usage"] == {"input_tokens": 7, "output_tokens": 5}
            assert "token budget" in error_text(await client.call_tool(
                "rag_chat", {"messages": [{"role": "user", "content": "again"}]}))


async def test_rag_pipeline_grpc_chat_streams_the_reply(fake):
    from nucleus.v1 import llm_orchestration_pb2 as llm_pb
    from nucleus.v1 import rag_pipeline_pb2 as rag_pb
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
    from services.rag_pipeline.grpc_api import RagPipelineServicer

    async with llm_over_grpc(fake) as llm:
        server = grpc.aio.server()
        rag_grpc.add_RagPipelineServicer_to_server(
            RagPipelineServicer(None, chat=gate(llm, Clock(), require_caller=False)), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rag_grpc.RagPipelineStub(channel)
                chunks = [c async for c in stub.Chat(rag_pb.ChatRequest(completion=llm_pb.ChatCompletionRequest(
                    messages=[llm_pb.ChatMessage(role="user", content="hi")])), timeout=10)]
                assert "".join(c.content for c in chunks) == "I am a fake model." and chunks[-1].done
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    async for _ in stub.Chat(rag_pb.ChatRequest(), timeout=10):
                        pass
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            await server.stop(None)


async def test_a_failing_model_is_attempted_only_by_llm_orchestration_not_again_by_the_channel(fake):
    """Split mode: the pipeline's channel retries UNAVAILABLE (shared/grpc_client.py), but an
    Unavailable LlmOrchestration answers after its own attempts carries server pushback -1."""
    async with llm_over_grpc(fake) as llm:
        fake.fail_next("500", n=50)                              # the model fails every time
        with pytest.raises(Unavailable, match="HTTP 500, after 3 attempts"):
            await whole_reply(gate(llm, Clock()).chat(ASK, ALICE))
        assert len(fake.requests) == 3                           # LlmOrchestration's max_attempts, not 3 x 3
        with pytest.raises(Unavailable, match="after 3 attempts"):
            await llm.synthesize("q", [("p1", "t", "some passage text")])
        assert len(fake.requests) == 6                           # synthesis: the same, 3
        fake.clear()


async def test_the_persona_decides_the_model_and_the_caller_cannot(fake):
    asked: list[tuple[str, str]] = []

    async def persona_model(persona_id: str, caller) -> str:      # stands in for the persona store lookup
        asked.append((persona_id, caller.user_id))
        if persona_id != "analyst":
            raise NotFound(f"persona '{persona_id}' does not exist")
        return "fake-chat-1"

    async with llm_over_grpc(fake) as llm:
        g = gate(llm, Clock(), persona_model=persona_model)
        reply = await whole_reply(g.chat(ASK, ALICE, persona_id="analyst"))
        assert fake.requests[-1].body["model"] == "fake-chat-1" and reply["model"] == "fake-chat-1"
        with pytest.raises(NotFound):
            await whole_reply(g.chat(ASK, ALICE, persona_id="someone-else"))
        with pytest.raises(InvalidArgument) as caught:
            await whole_reply(g.chat(ChatRequest(messages=ASK.messages, model="gpt-expensive"), ALICE))
        assert caught.value.field == "model" and asked == [("analyst", "alice"), ("someone-else", "alice")]
        with pytest.raises(InvalidArgument) as caught:           # a gate without personas says so
            await whole_reply(gate(llm, Clock()).chat(ASK, ALICE, persona_id="analyst"))
        assert caught.value.field == "persona_id" and len(fake.requests) == 1
