"""The chat agent (cli/agent) against the loopback OpenAI-compatible server scripted to request
tool calls, calling the real RAGPipeline MCP server of the authenticated stack as alice."""
from __future__ import annotations

import contextlib

import httpx
import pytest

from cli.agent import AgentConfig, ChatAgent, McpToolbox, connect
from cli.agent.loop import NO_LLM, ROUND_LIMIT_NOTE
from tests.integration.secure_stack import LEGAL_CANARY
from tests.support.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def llm():
    with FakeOpenAI() as server:
        yield server


@contextlib.asynccontextmanager
async def agent(stack, llm=None, *, rounds: int = 4, tokens: list[str] | None = None):
    config = AgentConfig(base_url=llm.base_url if llm else "", api_key="sk-test-secret-key-123456",
                         model="fake-model" if llm else "", max_tool_rounds=rounds)
    async with connect(stack.mcp_url, stack.keys["alice"]) as client:
        yield ChatAgent(config, McpToolbox(client), on_token=tokens.append if tokens is not None else None)


def chat_requests(llm):
    return [r.body for r in llm.requests if r.path.endswith("/chat/completions")]


async def test_a_single_tool_call_then_a_streamed_cited_answer(secure_corpus, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_search", '{"search_phrases": ["hotel expense limits for travel"]}')])
    llm.reply_next("Hotel limits are set by the travel policy [1].")
    tokens: list[str] = []
    async with agent(secure_corpus, llm, tokens=tokens) as bot:
        answer = await bot.ask("What are the hotel limits?")
    assert answer.mode == "llm" and answer.text == "Hotel limits are set by the travel policy [1]."
    assert "".join(tokens) == answer.text and len(tokens) > 1            # streamed in pieces
    assert [(c.name, c.ok) for c in answer.tool_calls] == [("rag_search", True)]
    assert [s.n for s in answer.sources] == [1] and answer.sources[0].title
    assert httpx.get(answer.sources[0].url, timeout=30).status_code == 200      # a working signed link
    first, second = chat_requests(llm)
    assert first["tool_choice"] == "auto" and first["stream"] is True
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"rag_search", "rag_topics", "rag_topic_evolution", "rag_recent_developments"} <= offered
    assert all("username" not in t["function"]["parameters"].get("properties", {}) for t in first["tools"])
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and tool_msgs[0]["content"].startswith(("1 passages", "2 passages", "3 passages",
                                                                         "4 passages", "5 passages", "6 passages",
                                                                         "7 passages", "8 passages"))
    assert "[1]" in tool_msgs[0]["content"]
    assert "sk-test-secret" not in str(second["messages"])               # the key never reaches a prompt


async def test_several_tool_calls_in_one_turn(secure_corpus, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_topics", "{}"),
                               ("rag_recent_developments", '{"query": "Pallas firmware release", "limit": 3}')])
    llm.reply_next("The collection covers several themes; the newest firmware note is [1].")
    async with agent(secure_corpus, llm) as bot:
        answer = await bot.ask("What are the main themes, and what is new on firmware?")
    assert [(c.name, c.ok) for c in answer.tool_calls] == [("rag_topics", True), ("rag_recent_developments", True)]
    tool_msgs = [m for m in chat_requests(llm)[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0", "call_1"]
    assert tool_msgs[0]["content"].count("\ntopic ") >= 2 or tool_msgs[0]["content"].startswith("The topics are")
    assert LEGAL_CANARY not in str(tool_msgs)


async def test_a_failing_tool_and_malformed_arguments_go_back_to_the_model(secure_corpus, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_topics", '{"k": 99}'), ("rag_search", '{"search_phrases": ['),
                               ("rag_no_such_tool", "{}")])
    llm.reply_next("I could not use the tools.")
    async with agent(secure_corpus, llm) as bot:
        answer = await bot.ask("Topics?")
    assert answer.text == "I could not use the tools."
    failing, malformed, unknown = answer.tool_calls
    assert not failing.ok and failing.result.startswith("error:") and "k" in failing.result
    assert malformed.arguments is None and "not valid JSON" in malformed.result
    assert not unknown.ok and "not available" in unknown.result
    tool_msgs = [m["content"] for m in chat_requests(llm)[1]["messages"] if m["role"] == "tool"]
    assert tool_msgs == [failing.result, malformed.result, unknown.result]


async def test_the_round_limit_stops_tool_calls(secure_corpus, llm):
    llm.clear()
    search = [("rag_search", '{"search_phrases": ["battery"]}')]
    llm.reply_tool_calls_next(search, search, search)
    async with agent(secure_corpus, llm, rounds=2) as bot:
        answer = await bot.ask("Battery?")
    assert answer.rounds == 2 and len(answer.tool_calls) == 2
    requests = chat_requests(llm)
    assert len(requests) == 3 and "tools" in requests[1] and "tools" not in requests[2]
    assert requests[2]["messages"][-1]["content"] == ROUND_LIMIT_NOTE
    assert "past the round limit" in answer.text and "NUCLEUS_CHAT_MAX_TOOL_ROUNDS" in answer.note


async def test_without_an_llm_the_answer_is_retrieval_only(secure_corpus):
    async with agent(secure_corpus) as bot:
        answer = await bot.ask("current travel expense limits for hotels and meals")
    assert answer.mode == "retrieval-only" and answer.text.startswith(NO_LLM)
    assert "Extractive synthesis:" in answer.text and "Ranked results:" in answer.text
    assert [c.name for c in answer.tool_calls] == ["rag_search", "rag_get_synthesized_results"]
    assert answer.sources and all(s.url.startswith("http") for s in answer.sources)


async def test_an_unreachable_llm_degrades_to_retrieval_only(secure_corpus):
    config = AgentConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-unreachable-key-1234567")
    async with connect(secure_corpus.mcp_url, secure_corpus.keys["alice"]) as client:
        bot = ChatAgent(config, McpToolbox(client))
        answer = await bot.ask("hotel limits")
    assert answer.mode == "retrieval-only" and "failed" in answer.note
    assert "sk-unreachable" not in answer.note
    assert len(bot.messages) == 1                      # the failed turn left no history


async def test_a_persona_sets_prompt_tools_and_model(secure_corpus, secure_rag, llm, monkeypatch):
    import argparse

    import grpc

    from cli.chat import _agent
    from nucleus.v1 import common_pb2 as pb
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
    from tests.integration.secure_stack import bearer

    persona = pb.Persona(tenant_id="acme", persona_id="fleet-analyst", display_name="Fleet analyst",
                         system_prompt="You are the fleet analyst. PERSONA-MARK-77", allowed_tools=["rag_topics"],
                         llm_model="analyst-model")
    async with grpc.aio.insecure_channel(secure_corpus.addresses["rag_pipeline"]["grpc"],
                                         interceptors=secure_corpus.operator("rag_pipeline")) as channel:
        stored = await rag_grpc.RagPipelineStub(channel).PutPersona(persona, timeout=30)
    assert stored.updated_unix > 0 and list(stored.allowed_tools) == ["rag_topics"]
    with pytest.raises(grpc.aio.AioRpcError) as err:           # a user without the admin role
        await secure_rag.PutPersona(persona, metadata=bearer(secure_corpus, "alice"), timeout=30)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        bad = pb.Persona(tenant_id="acme", persona_id="x", allowed_tools=["no spaces please"])
        async with grpc.aio.insecure_channel(secure_corpus.addresses["rag_pipeline"]["grpc"],
                                             interceptors=secure_corpus.operator("rag_pipeline")) as channel:
            await rag_grpc.RagPipelineStub(channel).PutPersona(bad, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "allowed_tools[0]" in err.value.details()
    listed = await secure_rag.ListPersonas(pb.ListPersonasRequest(), metadata=bearer(secure_corpus, "alice"),
                                           timeout=30)
    assert [p.persona_id for p in listed.personas] == ["fleet-analyst"]
    with pytest.raises(grpc.aio.AioRpcError) as err:           # another tenant has no such persona
        await secure_rag.GetPersona(pb.GetPersonaRequest(persona_id="fleet-analyst"),
                                    metadata=bearer(secure_corpus, "gina"), timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND

    monkeypatch.setenv("NUCLEUS_LLM_OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("NUCLEUS_LLM_CHAT_MODEL", "default-model")
    llm.clear()
    llm.reply_next("Here are the themes.")
    args = argparse.Namespace(persona="fleet-analyst", token=secure_corpus.keys["alice"])
    async with connect(secure_corpus.mcp_url, secure_corpus.keys["alice"]) as client:
        bot, loaded = await _agent(client, args)
        answer = await bot.ask("What are the themes?")
    assert loaded["display_name"] == "Fleet analyst" and answer.text == "Here are the themes."
    request = chat_requests(llm)[0]
    assert request["model"] == "analyst-model"
    assert "PERSONA-MARK-77" in request["messages"][0]["content"]
    assert [t["function"]["name"] for t in request["tools"]] == ["rag_topics"]


async def test_a_persona_s_sources_restrict_the_synthesis(secure_corpus):
    async with connect(secure_corpus.mcp_url, secure_corpus.keys["alice"]) as client:
        box = McpToolbox(client, sources=("hr-policies",))
        text, ok, cited = await box.call("rag_get_synthesized_results", {"query": "hotel and meal limits"},
                                         check=False)
        everywhere = McpToolbox(client)
        _, _, cited_all = await everywhere.call("rag_get_synthesized_results", {"query": "hotel and meal limits"},
                                                check=False)
    assert ok and cited, text
    urls = [s.url for s in box.sources.by_key.values() if s.n in cited]
    hr = ("/documents/travel-policy-", "/documents/hr-travel-", "/documents/expense-reimbursement-",
          "/documents/email-travel-")
    assert urls and all(any(p in u for p in hr) for u in urls)
    others = [s.url for s in everywhere.sources.by_key.values() if s.n in cited_all]
    assert any(not any(p in u for p in hr) for u in others)          # without the persona's sources: more


def test_nucleus_ask_for_scripts(secure_corpus):
    import json
    import os
    import subprocess
    import sys

    from tests.integration.secure_stack import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("NUCLEUS_LLM_")}
    done = subprocess.run([sys.executable, "-m", "cli.main", "ask", "--url", secure_corpus.mcp_url, "--token",
                           secure_corpus.keys["alice"], "--json", "current travel expense limits for hotels"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["mode"] == "retrieval-only" and body["answer"].startswith(NO_LLM)
    assert body["sources"] and [c["name"] for c in body["tool_calls"]] == ["rag_search", "rag_get_synthesized_results"]
    assert secure_corpus.keys["alice"] not in done.stdout + done.stderr
