"""GenerateChatCompletion: streamed through the OpenAI-compatible client (loopback fake), over
real gRPC on 127.0.0.1, with GenAI spans that carry no message text unless capture is on."""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.llm_orchestration.chat import ChatRequest, Message, Tool
from services.llm_orchestration.core import LlmOrchestrator
from shared.errors import InvalidArgument, Unavailable, UpstreamFailed
from shared.telemetry import genai as content
from tests.support.llm_grpc import served_over_grpc

from .conftest import API_KEY, CHAT_MODEL, fake_settings, running

SECRET_TEXT = "my private question about the payroll"
TOOL = Tool("rag_search", "Search the documents", '{"type": "object", "properties": {"q": {"type": "string"}}}')


def request(text: str = SECRET_TEXT, **more) -> ChatRequest:
    return ChatRequest(messages=(Message("system", "Be brief."), Message("user", text)), **more)


async def collect(stream):
    return [chunk async for chunk in stream]


@pytest.fixture
def spans():
    content.capture_content.cache_clear()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()
    content.capture_content.cache_clear()


async def test_chat_streams_text_then_a_last_chunk_with_usage_and_finish_reason(server, spans, monkeypatch):
    monkeypatch.delenv(content.CAPTURE_CONTENT_ENV, raising=False)
    provider, exporter = spans
    async with running(server) as orch:
        orch.tracer_provider = provider
        server.reply_next("The answer is forty two, from the documents.")
        chunks = await collect(orch.chat_completion(request(max_tokens=50)))
    assert len(chunks) >= 3 and "".join(c.content for c in chunks) == "The answer is forty two, from the documents."
    last = chunks[-1]
    assert last.done and last.finish_reason == "stop" and (last.input_tokens, last.output_tokens) == (7, 8)
    assert not any(c.done for c in chunks[:-1])
    [sent] = server.requests
    assert sent.body["stream"] is True and sent.body["max_tokens"] == 50 and sent.body["model"] == CHAT_MODEL
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    [span] = [s for s in exporter.get_finished_spans() if s.name == f"chat {CHAT_MODEL}"]
    attrs = dict(span.attributes)
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == CHAT_MODEL
    assert attrs["gen_ai.usage.input_tokens"] == 7 and attrs["gen_ai.usage.output_tokens"] == 8
    assert list(attrs["gen_ai.response.finish_reasons"]) == ["stop"]
    assert not any(SECRET_TEXT in str(v) or "forty two" in str(v) for v in attrs.values())


async def test_message_content_reaches_spans_only_with_capture_on(server, spans, monkeypatch):
    monkeypatch.setenv(content.CAPTURE_CONTENT_ENV, "true")
    content.capture_content.cache_clear()
    provider, exporter = spans
    async with running(server) as orch:
        orch.tracer_provider = provider
        server.reply_next("forty two")
        await collect(orch.chat_completion(request()))
    [span] = [s for s in exporter.get_finished_spans() if s.name == f"chat {CHAT_MODEL}"]
    assert SECRET_TEXT in list(span.attributes["gen_ai.input.messages"])
    assert span.attributes["gen_ai.output.messages"] == "forty two"


async def test_tools_and_tool_choice_go_out_and_tool_calls_come_back(server):
    async with running(server) as orch:
        server.reply_tool_calls_next([("rag_search", '{"q": "payroll"}')])
        chunks = await collect(orch.chat_completion(request(tools=(TOOL,), tool_choice="rag_search")))
    calls = [c for chunk in chunks for c in chunk.tool_calls]
    assert [(c.index, c.name, c.arguments) for c in calls] == [(0, "rag_search", '{"q": "payroll"}')]
    assert chunks[-1].finish_reason == "tool_calls"
    body = server.requests[0].body
    assert body["tools"][0]["function"]["name"] == "rag_search"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "rag_search"}}


async def test_opening_the_stream_is_retried_like_every_call(server):
    async with running(server) as orch:
        server.fail_next("503", 2)
        server.reply_next("ok then")
        chunks = await collect(orch.chat_completion(request()))
    assert len(server.requests) == 3 and "".join(c.content for c in chunks) == "ok then"


@pytest.mark.parametrize("bad, field", [
    (ChatRequest(messages=()), "messages"),
    (ChatRequest(messages=(Message("robot", "x"),)), "messages[0].role"),
    (ChatRequest(messages=(Message("tool", "x"),)), "messages[0].tool_call_id"),
    (request(tools=(Tool("bad name!"),)), "tools[0].name"),
    (request(tools=(Tool("t", parameters_json="[1]"),)), "tools[0].parameters_json"),
    (request(tool_choice="other"), "tool_choice"),
    (request(max_tokens=-1), "max_tokens"),
])
async def test_bad_requests_name_the_field_and_send_nothing(server, bad, field):
    async with running(server) as orch:
        with pytest.raises(InvalidArgument) as caught:
            await collect(orch.chat_completion(bad))
    assert caught.value.field == field and not server.requests


async def test_chat_over_grpc_streams_chunks_and_maps_errors(server):
    async with running(server) as orch, served_over_grpc(orch) as client:
        server.reply_next("streamed over gRPC, token by token")
        chunks = await collect(client.chat(request()))
        assert "".join(c.content for c in chunks) == "streamed over gRPC, token by token"
        assert chunks[-1].done and chunks[-1].output_tokens > 0 and len(chunks) >= 3
        with pytest.raises(InvalidArgument, match="tool_choice"):
            await collect(client.chat(request(tool_choice="nope")))
        server.clear()
        server.fail_next("400", 1)                  # rejected upstream: not retried anywhere
        with pytest.raises(UpstreamFailed, match="HTTP 400"):
            await collect(client.chat(request()))
        assert len(server.requests) == 1


async def test_without_a_chat_model_chat_is_unavailable(server):
    async with running(server, chat_model="", embedding_provider="openai") as orch:
        with pytest.raises(Unavailable, match="no chat model"):
            await collect(orch.chat_completion(request()))


async def test_a_request_may_name_only_a_model_the_operator_allows(server, spans):
    provider, exporter = spans
    async with running(server, chat_models_allowed="analyst-model, big-model") as orch:
        orch.tracer_provider = provider
        assert orch.chat_models == (CHAT_MODEL, "analyst-model", "big-model")
        server.reply_next("from the analyst model")
        await collect(orch.chat_completion(request(model="analyst-model")))
        assert server.requests[-1].body["model"] == "analyst-model"
        await collect(orch.chat_completion(request()))                   # "" = the configured chat model
        assert server.requests[-1].body["model"] == CHAT_MODEL
        sent = len(server.requests)
        with pytest.raises(InvalidArgument, match="analyst-model, big-model") as caught:
            await collect(orch.chat_completion(request(model="gpt-expensive")))
        assert caught.value.field == "model" and len(server.requests) == sent
    assert [s.attributes["gen_ai.request.model"] for s in exporter.get_finished_spans()
            if s.name.startswith("chat ")] == ["analyst-model", CHAT_MODEL]
    with pytest.raises(InvalidArgument) as caught:
        LlmOrchestrator(fake_settings(server, chat_models_allowed="good, two words"))
    assert caught.value.field == "chat_models_allowed"
    async with running(server) as orch:                                  # default: only the chat model
        with pytest.raises(InvalidArgument, match=f"accepted: {CHAT_MODEL} "):
            await collect(orch.chat_completion(request(model="analyst-model")))
        assert not server.requests
