"""The chat agent's configuration and its compact formatting of tool results (cli/agent)."""
from __future__ import annotations

import pytest

from cli.agent.config import AgentConfig
from cli.agent.loop import _parse_arguments
from cli.agent.tools import Sources, format_result
from shared.errors import InvalidArgument


def test_config_reads_the_llm_orchestration_names(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-from-file-123456\n")
    config = AgentConfig.from_env({"NUCLEUS_LLM_OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
                                   "NUCLEUS_LLM_OPENAI_API_KEY_FILE": str(key), "NUCLEUS_LLM_CHAT_MODEL": "m",
                                   "NUCLEUS_CHAT_MAX_TOOL_ROUNDS": "2"})
    assert (config.base_url, config.api_key, config.model, config.max_tool_rounds) == \
        ("http://127.0.0.1:1/v1", "sk-from-file-123456", "m", 2)
    assert config.llm_configured
    assert not AgentConfig.from_env({"NUCLEUS_LLM_CHAT_MODEL": "m"}).llm_configured       # no base URL
    assert AgentConfig.from_env({"NUCLEUS_LLM_CHAT_MODEL": "m"}, model="persona-model").model == "persona-model"


@pytest.mark.parametrize("env, field", [
    ({"NUCLEUS_CHAT_MAX_TOOL_ROUNDS": "many"}, "NUCLEUS_CHAT_MAX_TOOL_ROUNDS"),
    ({"NUCLEUS_CHAT_MAX_TOOL_ROUNDS": "21"}, "NUCLEUS_CHAT_MAX_TOOL_ROUNDS"),
    ({"NUCLEUS_LLM_OPENAI_API_KEY_FILE": "/nonexistent/key"}, "NUCLEUS_LLM_OPENAI_API_KEY_FILE"),
])
def test_bad_settings_name_the_variable(env, field):
    with pytest.raises(InvalidArgument) as err:
        AgentConfig.from_env(env)
    assert err.value.field == field


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
