"""The chat agent's configuration and its compact formatting of tool results (cli/agent)."""
from __future__ import annotations

import pytest

from cli.agent.config import AgentConfig
from cli.agent.loop import _parse_arguments
from cli.agent.tools import Sources, format_result
from shared.errors import InvalidArgument
from shared.settings import CliSettings, settings_from_env


def test_config_holds_only_the_agents_limits_the_model_is_the_stacks():
    assert AgentConfig().max_tool_rounds == 4
    assert not hasattr(AgentConfig(), "api_key") and not hasattr(AgentConfig(), "base_url")   # no model client


@pytest.mark.parametrize("rounds", ["many", "21", "-1"])
def test_a_bad_max_tool_rounds_is_refused_naming_the_variable(rounds, monkeypatch):
    monkeypatch.setenv("NUCLEUS_CHAT_MAX_TOOL_ROUNDS", rounds)
    with pytest.raises(InvalidArgument) as err:
        settings_from_env(CliSettings)
    assert err.value.field == "NUCLEUS_CHAT_MAX_TOOL_ROUNDS"


def test_openai_style_messages_and_tools_become_a_chat_request():
    from cli.agent.stack_chat import chat_request
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "rag_search", "arguments": '{"q": 1}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "1 passages: …"}]
    tools = [{"type": "function", "function": {"name": "rag_search", "description": "search",
                                               "parameters": {"type": "object"}}}]
    request = chat_request(messages, tools, "auto")
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool"]
    assert request.messages[2].content == "" and request.messages[2].tool_calls[0].arguments == '{"q": 1}'
    assert request.messages[3].tool_call_id == "c1" and request.tool_choice == "auto"
    assert request.tools[0].parameters_json == '{"type": "object"}'
    assert chat_request(messages[:2], None, "auto").tool_choice == ""       # no tools: no tool choice


def test_malformed_arguments_are_described():
    assert _parse_arguments('{"k": 3}') == ({"k": 3}, "")
    assert _parse_arguments("") == ({}, "")
    args, problem = _parse_arguments('{"k": ')
    assert args is None and "not valid JSON" in problem
    args, problem = _parse_arguments("[1, 2]")
    assert args is None and "JSON object" in problem and "list" in problem


def test_results_are_compact_and_cited_once_per_document():
    sources = Sources()
    segment = {"segment_uid": "a#0", "headline": "Travel policy", "raw_text": "word " * 500,
               "source_url": "http://h/documents/a%230?sig=1"}
    text, cited = format_result("rag_search", {"status": "success", "segments": [segment]}, sources)
    assert text.splitlines()[0] == "1 passages:" and text.splitlines()[1].startswith("[1] Travel policy: word")
    assert len(text) < 500 and cited == [1]
    again = dict(segment, source_url="http://h/documents/a%230?sig=2")        # re-signed: same document
    assert format_result("rag_search", {"segments": [again]}, sources)[1] == [1]
    topics = {"status": "ready", "documents": 9, "criterion": "k=2 as requested", "topics": [
        {"topic_id": 0, "size": 5, "terms": [{"term": "firmware"}, {"term": "dock"}],
         "date_span": {"from": "2021-01-01", "to": "2026-10-01"}, "representative_documents": [{"title": "Notes"}]}]}
    text, _ = format_result("rag_topics", topics, sources)
    assert "topic 0 (5 docs, 2021-01-01..2026-10-01): firmware, dock | e.g. Notes" in text
    assert "being computed" in format_result("rag_topics", {"status": "computing", "progress": 0.5}, sources)[0]
