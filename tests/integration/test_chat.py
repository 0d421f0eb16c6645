"""`nucleus chat` / `nucleus ask` (cli/agent) through the services: the agent's model is the stack's
chat (RAGPipeline.Chat → LlmOrchestration.GenerateChatCompletion → the loopback OpenAI-compatible
server, scripted to request tool calls), called with the user's own key, and its tools are the
real RAGPipeline MCP server of an authenticated stack. The CLI holds no model key."""
from __future__ import annotations

import contextlib
import json

import httpx
import pytest

from benchmarks.secure_stack import corpus, ingest_corpus, start_secure_stack
from cli.agent import AgentConfig, ChatAgent, McpToolbox, StackChat, connect
from cli.agent.loop import NO_LLM, ROUND_LIMIT_NOTE
from tests.integration.secure_stack import LEGAL_CANARY
from tests.support import background
from tests.support.fake_openai import FakeOpenAI
from tests.support.processes import run_cli, stop_stack

pytestmark = pytest.mark.integration
MODEL_KEY = "sk-test-secret-key-123456"          # the stack's (LlmOrchestration's), never the CLI's
# What the questions below need, of the secure corpus (fewer documents: a quicker start).
CHAT_DOCS = ("travel-policy", "release-notes-pallas-5", "pallas-firmware-update", "legal-hotel-settlement",
             "sales-travel-playbook", "expense-reimbursement")


def _start(data_dir):
    """The loopback model server and an authenticated stack whose LlmOrchestration has a chat model
    (that server), in one process (cheaper to start; the services' own streamed-call signing:
    tests/unit/shared/auth)."""
    server = FakeOpenAI().__enter__()
    try:
        stack, supervisor = start_secure_stack(data_dir, mode="single", extra_env={
            "NUCLEUS_LLM_OPENAI_BASE_URL": server.base_url, "NUCLEUS_LLM_OPENAI_API_KEY": MODEL_KEY,
            "NUCLEUS_LLM_CHAT_MODEL": "fake-model", "NUCLEUS_LLM_CHAT_MODELS_ALLOWED": "analyst-model",
            "NUCLEUS_RAG_CHAT_BURST": "100"})
    except BaseException:
        server.__exit__(None, None, None)
        raise

    def stop() -> None:
        stop_stack(supervisor)
        server.__exit__(None, None, None)
    return (stack, server), stop


def begin_in_background(tmp_path_factory) -> None:
    """Begun at the session's first integration test (tests/integration/conftest.py)."""
    data_dir = tmp_path_factory.mktemp("chat-stack")
    background.begin("chat_stack", lambda: _start(data_dir))


@pytest.fixture(scope="module")
def _chat(tmp_path_factory):
    value, stop = background.take("chat_stack", lambda: _start(tmp_path_factory.mktemp("chat-stack")))
    yield value
    stop()


@pytest.fixture(scope="module")
def llm(_chat):
    return _chat[1]


@pytest.fixture(scope="module")
async def chat_stack(_chat):
    stack, _ = _chat
    await ingest_corpus(stack, {"acme": [d for d in corpus()["acme"] if d.artifact.artifact_id.startswith(CHAT_DOCS)]})
    return stack


@contextlib.asynccontextmanager
async def agent(stack, *, who: str = "alice", rounds: int = 4, tokens: list[str] | None = None):
    key = stack.keys[who] if who else ""
    chat = StackChat(stack.addresses["rag_pipeline"]["grpc"], key)
    try:
        async with connect(stack.mcp_url, stack.keys["alice"]) as client:
            yield ChatAgent(AgentConfig(max_tool_rounds=rounds), McpToolbox(client), llm=chat, secrets=(key,),
                            on_token=tokens.append if tokens is not None else None)
    finally:
        await chat.close()


def chat_requests(llm):
    return [r for r in llm.requests if r.path.endswith("/chat/completions")]


async def test_a_single_tool_call_then_a_streamed_cited_answer(chat_stack, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_search", '{"search_phrases": ["hotel expense limits for travel"]}')])
    llm.reply_next("Hotel limits are set by the travel policy [1].")
    tokens: list[str] = []
    async with agent(chat_stack, tokens=tokens) as bot:
        answer = await bot.ask("What are the hotel limits?")
    assert answer.mode == "llm" and answer.text == "Hotel limits are set by the travel policy [1]."
    assert "".join(tokens) == answer.text and len(tokens) > 1            # streamed in pieces, through gRPC
    assert [(c.name, c.ok) for c in answer.tool_calls] == [("rag_search", True)]
    assert [s.n for s in answer.sources] == [1] and answer.sources[0].title
    assert httpx.get(answer.sources[0].url, timeout=30).status_code == 200      # a working signed link
    first, second = (r.body for r in chat_requests(llm))
    assert first["model"] == "fake-model" and first["tool_choice"] == "auto" and first["stream"] is True
    assert {r.headers["authorization"] for r in chat_requests(llm)} == {f"Bearer {MODEL_KEY}"}   # the stack's key
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"rag_search", "rag_topics", "rag_topic_evolution", "rag_recent_developments"} <= offered
    assert all("username" not in t["function"]["parameters"].get("properties", {}) for t in first["tools"])
    tool_msgs = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and tool_msgs[0]["content"].split(" ", 1)[1].startswith("passages:")
    assert "[1]" in tool_msgs[0]["content"]
    assert chat_stack.keys["alice"] not in json.dumps(second)            # the caller's key never reaches a prompt


async def test_several_tool_calls_in_one_turn(chat_stack, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_topics", "{}"),
                               ("rag_recent_developments", '{"query": "Pallas firmware release", "limit": 3}')])
    llm.reply_next("The collection covers several themes; the newest firmware note is [1].")
    async with agent(chat_stack) as bot:
        answer = await bot.ask("What are the main themes, and what is new on firmware?")
    assert [(c.name, c.ok) for c in answer.tool_calls] == [("rag_topics", True), ("rag_recent_developments", True)]
    tool_msgs = [m for m in chat_requests(llm)[1].body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0", "call_1"]
    assert tool_msgs[0]["content"].count("\ntopic ") >= 2 or tool_msgs[0]["content"].startswith("The topics are")
    assert LEGAL_CANARY not in str(tool_msgs)


async def test_a_failing_tool_and_malformed_arguments_go_back_to_the_model(chat_stack, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_topics", '{"k": 99}'), ("rag_search", '{"search_phrases": ['),
                               ("rag_no_such_tool", "{}")])
    llm.reply_next("I could not use the tools.")
    async with agent(chat_stack) as bot:
        answer = await bot.ask("Topics?")
    assert answer.text == "I could not use the tools."
    failing, malformed, unknown = answer.tool_calls
    assert not failing.ok and failing.result.startswith("error:") and "k" in failing.result
    assert malformed.arguments is None and "not valid JSON" in malformed.result
    assert not unknown.ok and "not available" in unknown.result
    tool_msgs = [m["content"] for m in chat_requests(llm)[1].body["messages"] if m["role"] == "tool"]
    assert tool_msgs == [failing.result, malformed.result, unknown.result]


async def test_the_round_limit_stops_tool_calls(chat_stack, llm):
    llm.clear()
    search = [("rag_search", '{"search_phrases": ["battery"]}')]
    llm.reply_tool_calls_next(search, search, search)
    async with agent(chat_stack, rounds=2) as bot:
        answer = await bot.ask("Battery?")
    assert answer.rounds == 2 and len(answer.tool_calls) == 2
    requests = [r.body for r in chat_requests(llm)]
    assert len(requests) == 3 and "tools" in requests[1] and "tools" not in requests[2]
    assert requests[2]["messages"][-1]["content"] == ROUND_LIMIT_NOTE
    assert "past the round limit" in answer.text and "NUCLEUS_CHAT_MAX_TOOL_ROUNDS" in answer.note


async def test_a_stack_without_a_chat_model_answers_retrieval_only(secure_corpus):
    async with agent(secure_corpus) as bot:
        answer = await bot.ask("current travel expense limits for hotels and meals")
    assert answer.mode == "retrieval-only" and answer.text.startswith(NO_LLM) and not answer.note
    assert "Extractive synthesis:" in answer.text and "Ranked results:" in answer.text
    assert [c.name for c in answer.tool_calls] == ["rag_search", "rag_get_synthesized_results"]
    assert answer.sources and all(s.url.startswith("http") for s in answer.sources)


async def test_a_failing_or_refused_chat_degrades_to_retrieval_only_and_keeps_no_half_turn(chat_stack, llm):
    llm.clear()
    llm.fail_next("500", n=3)                                   # every attempt of LlmOrchestration's retries
    async with agent(chat_stack) as bot:
        answer = await bot.ask("hotel limits")
        assert answer.mode == "retrieval-only" and "the stack's chat failed (Unavailable" in answer.note
        assert len(bot.messages) == 1                          # the failed turn left no history
    assert chat_stack.keys["alice"] not in answer.note and MODEL_KEY not in answer.note
    llm.clear()
    async with agent(chat_stack, who="") as bot:               # no key: RAGPipeline refuses, nothing is sent
        answer = await bot.ask("hotel limits")
    assert answer.mode == "retrieval-only" and "Unauthenticated" in answer.note
    assert not [r for r in chat_requests(llm) if "tools" in r.body]   # only the fallback's synthesis reached it


def test_nucleus_ask_goes_through_the_stack_as_the_user(chat_stack, llm):
    llm.clear()
    llm.reply_tool_calls_next([("rag_search", '{"search_phrases": ["hotel limits"]}')])
    llm.reply_next("Hotels are capped by the travel policy [1].")
    done = run_cli(["ask", "--url", chat_stack.mcp_url, "--rag-pipeline-target",
                    chat_stack.addresses["rag_pipeline"]["grpc"], "--token", chat_stack.keys["alice"], "--json",
                    "What are the hotel limits?"], env={"NUCLEUS_LLM_OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
                   timeout_s=120)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["mode"], body["answer"]) == ("llm", "Hotels are capped by the travel policy [1].")
    assert [c["name"] for c in body["tool_calls"]] == ["rag_search"] and [s["n"] for s in body["sources"]] == [1]
    assert len(chat_requests(llm)) == 2                        # the stack's model, not the CLI's environment
    assert chat_stack.keys["alice"] not in done.stdout + done.stderr


async def test_a_persona_sets_prompt_and_tools(chat_stack, llm):
    import argparse

    import grpc

    from cli.chat import _agent
    from nucleus.v1 import common_pb2 as pb
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
    from tests.integration.secure_stack import bearer

    persona = pb.Persona(tenant_id="acme", persona_id="fleet-analyst", display_name="Fleet analyst",
                         system_prompt="You are the fleet analyst. PERSONA-MARK-77", allowed_tools=["rag_topics"],
                         llm_model="analyst-model")
    async with grpc.aio.insecure_channel(chat_stack.addresses["rag_pipeline"]["grpc"],
                                         interceptors=chat_stack.operator("rag_pipeline")) as channel:
        rag = rag_grpc.RagPipelineStub(channel)
        stored = await rag.PutPersona(persona, timeout=30)
        assert stored.updated_unix > 0 and list(stored.allowed_tools) == ["rag_topics"]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rag.PutPersona(pb.Persona(tenant_id="acme", persona_id="x", allowed_tools=["no spaces please"]),
                                 timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "allowed_tools[0]" in err.value.details()
    async with grpc.aio.insecure_channel(chat_stack.addresses["rag_pipeline"]["grpc"]) as channel:
        rag = rag_grpc.RagPipelineStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:           # a user without the admin role
            await rag.PutPersona(persona, metadata=bearer(chat_stack, "alice"), timeout=30)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        listed = await rag.ListPersonas(pb.ListPersonasRequest(), metadata=bearer(chat_stack, "alice"), timeout=30)
        assert [p.persona_id for p in listed.personas] == ["fleet-analyst"]
        with pytest.raises(grpc.aio.AioRpcError) as err:           # another tenant has no such persona
            await rag.GetPersona(pb.GetPersonaRequest(persona_id="fleet-analyst"),
                                 metadata=bearer(chat_stack, "gina"), timeout=30)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

    llm.clear()
    llm.reply_next("Here are the themes.")
    args = argparse.Namespace(persona="fleet-analyst", token=chat_stack.keys["alice"])
    chat = StackChat(chat_stack.addresses["rag_pipeline"]["grpc"], chat_stack.keys["alice"])
    try:
        async with connect(chat_stack.mcp_url, chat_stack.keys["alice"]) as client:
            bot, loaded = await _agent(client, args, chat)
            answer = await bot.ask("What are the themes?")
    finally:
        await chat.close()
    assert loaded["display_name"] == "Fleet analyst" and answer.text == "Here are the themes."
    request = chat_requests(llm)[0].body
    assert request["model"] == "analyst-model"         # the persona's llm_model, allowed by the operator
    assert "PERSONA-MARK-77" in request["messages"][0]["content"]
    assert [t["function"]["name"] for t in request["tools"]] == ["rag_topics"]


async def test_chat_uses_only_a_persona_of_the_caller_s_tenant_and_a_model_the_operator_allows(chat_stack, llm):
    import grpc

    from nucleus.v1 import common_pb2 as pb
    from nucleus.v1 import llm_orchestration_pb2 as llm_pb
    from nucleus.v1 import rag_pipeline_pb2 as rag_pb
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
    from tests.integration.secure_stack import bearer

    async with grpc.aio.insecure_channel(chat_stack.addresses["rag_pipeline"]["grpc"],
                                         interceptors=chat_stack.operator("rag_pipeline")) as channel:
        await rag_grpc.RagPipelineStub(channel).PutPersona(pb.Persona(
            tenant_id="acme", persona_id="big-spender", llm_model="gpt-expensive"), timeout=30)
    hi = llm_pb.ChatCompletionRequest(messages=[llm_pb.ChatMessage(role="user", content="hi")])
    llm.clear()
    async with grpc.aio.insecure_channel(chat_stack.addresses["rag_pipeline"]["grpc"]) as channel:
        rag = rag_grpc.RagPipelineStub(channel)

        async def refused(who: str, request) -> grpc.aio.AioRpcError:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in rag.Chat(request, metadata=bearer(chat_stack, who), timeout=30):
                    pass
            return err.value
        err = await refused("alice", rag_pb.ChatRequest(completion=hi, persona_id="big-spender"))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and err.details().startswith("model: 'gpt-expensive'")
        err = await refused("gina", rag_pb.ChatRequest(completion=hi, persona_id="big-spender"))   # another tenant
        assert err.code() == grpc.StatusCode.NOT_FOUND
        err = await refused("alice", rag_pb.ChatRequest(completion=llm_pb.ChatCompletionRequest(
            messages=hi.messages, model="analyst-model")))                  # the caller never names a model
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and err.details().startswith("model:")
    assert not chat_requests(llm)                                          # nothing reached the model


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
                           secure_corpus.keys["alice"], "--rag-pipeline-target",
                           secure_corpus.addresses["rag_pipeline"]["grpc"], "--json",
                           "current travel expense limits for hotels"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["mode"] == "retrieval-only" and body["answer"].startswith(NO_LLM)
    assert body["sources"] and [c["name"] for c in body["tool_calls"]] == ["rag_search", "rag_get_synthesized_results"]
    assert secure_corpus.keys["alice"] not in done.stdout + done.stderr
