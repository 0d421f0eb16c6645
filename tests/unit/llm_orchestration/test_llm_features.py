"""Expansion, re-ranking and synthesis through a chat model (the loopback FakeOpenAI)."""
from __future__ import annotations

import json

import pytest

from services.llm_orchestration.synthesis import PROMPT_BUDGET_CHARS
from shared.errors import Unavailable, UpstreamFailed

from .conftest import CHAT_MODEL, Clock, running

QUERY = "how does aspirin reduce stroke risk"


def chat_requests(server):
    return [r for r in server.requests if r.path.endswith("/chat/completions")]


async def test_llm_expansion_keeps_the_original_first_and_adds_alternatives(server):
    async with running(server) as orch:
        result = await orch.expand(QUERY, max_alternatives=3)
    assert result.method == "llm" and result.model == CHAT_MODEL
    assert result.phrases == (QUERY, f"{QUERY} explained", f"what is known about {QUERY}",
                              f"{QUERY} evidence")
    [request] = chat_requests(server)
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.body["messages"][0]["content"].startswith("Task: expand-query")
    assert json.loads(request.body["messages"][1]["content"]) == {"query": QUERY,
                                                                 "max_alternatives": 3}


async def test_llm_expansion_is_capped_at_max_alternatives(server):
    async with running(server) as orch:
        result = await orch.expand(QUERY, max_alternatives=1)
    assert result.phrases == (QUERY, f"{QUERY} explained")


async def test_llm_alternatives_are_validated_deduplicated_and_emptied_out(server):
    async with running(server) as orch:
        server.reply_next(json.dumps({"alternatives": [
            "", "  ", QUERY.upper(), "aspirin  stroke prevention", "Aspirin stroke prevention",
            "antiplatelet therapy and cerebrovascular events"]}))
        result = await orch.expand(QUERY)
    assert result.phrases == (QUERY, "aspirin stroke prevention",
                              "antiplatelet therapy and cerebrovascular events")


async def test_bad_llm_json_falls_back_to_keywords_and_says_so(server):
    async with running(server) as orch:
        server.fail_next("bad_content", 1)
        result = await orch.expand(QUERY)
    assert result.method == "keywords"
    assert result.phrases == (QUERY, "aspirin reduce stroke risk")
    assert result.note.startswith("chat model failed (upstream_failed:")
    assert "malformed query expansion" in result.note
    assert result.note.endswith("; keyword extraction (non-LLM)")
    assert len(server.requests) == 1                  # malformed content is not retried


async def test_llm_json_without_usable_alternatives_falls_back_to_keywords(server):
    async with running(server) as orch:
        server.reply_next(json.dumps({"alternatives": [QUERY, ""]}))
        result = await orch.expand(QUERY)
    assert result.method == "keywords"
    assert result.note.startswith("chat model returned no usable alternatives")


async def test_expansion_never_raises_for_upstream_outages(server):
    async with running(server, max_attempts=2) as orch:
        server.fail_next("500", 2)
        result = await orch.expand(QUERY)
    assert result.method == "keywords" and "unavailable" in result.note
    assert len(server.requests) == 2


async def test_expansion_with_an_open_breaker_falls_back_without_a_request(server):
    clock = Clock()
    async with running(server, clock=clock, max_attempts=1, breaker_failure_threshold=1) as orch:
        server.fail_next("500", 1)
        await orch.expand(QUERY)
        sent = len(server.requests)
        result = await orch.expand(QUERY)
    assert "circuit open" in result.note and result.method == "keywords"
    assert len(server.requests) == sent


async def test_llm_rerank_scores_every_candidate_in_request_order(server):
    candidates = [("off-topic", "the weather in paris was sunny"),
                  ("on-topic", "aspirin reduces stroke risk in adults"),
                  ("partial", "aspirin is an old drug")]
    async with running(server) as orch:
        result = await orch.rerank(QUERY, candidates)
    assert result.method == "llm" and result.model == CHAT_MODEL
    assert len(result.scores) == 3 and all(0.0 <= s <= 1.0 for s in result.scores)
    assert result.scores[1] > result.scores[2] > result.scores[0]
    [request] = chat_requests(server)
    assert request.body["messages"][0]["content"].startswith("Task: rerank")
    assert request.body["response_format"] == {"type": "json_object"}


async def test_llm_rerank_of_many_candidates_is_split_into_groups(server):
    candidates = [(f"c{i}", "aspirin stroke" if i % 2 else "unrelated text") for i in range(45)]
    async with running(server) as orch:
        result = await orch.rerank(QUERY, candidates)
    assert len(chat_requests(server)) == 3
    assert len(result.scores) == 45
    assert all(result.scores[i] > result.scores[i - 1] for i in range(1, 45, 2))


async def test_llm_rerank_with_a_missing_candidate_raises_upstream_failed(server):
    async with running(server) as orch:
        server.reply_next(json.dumps({"scores": [{"id": "a", "score": 5}]}))
        with pytest.raises(UpstreamFailed, match="unscored: 'b'"):
            await orch.rerank(QUERY, [("a", "x"), ("b", "y")])


async def test_llm_rerank_errors_are_raised_for_the_pipeline_to_handle(server):
    async with running(server, max_attempts=2) as orch:
        server.fail_next("503", 2, retry_after=0)
        with pytest.raises(Unavailable):
            await orch.rerank(QUERY, [("a", "x")])


PASSAGES = [("p1", "Aspirin trial", "Aspirin reduced stroke risk by 20% in the trial."),
            ("p2", "Mechanism", "Aspirin inhibits platelet aggregation."),
            ("p3", "Unrelated", "Paris is the capital of France.")]


async def test_llm_synthesis_cites_only_passages_that_exist(server):
    async with running(server) as orch:
        result = await orch.synthesize(QUERY, PASSAGES)
    assert result.method == "llm" and result.model == CHAT_MODEL
    assert "[not-a-passage]" in result.answer                 # the model made one up...
    assert [c.passage_id for c in result.citations] == ["p1", "p2", "p3"]   # ...it is dropped
    assert result.citations[0].title == "Aspirin trial"
    assert not result.truncated and result.truncation_reason == ""
    [request] = chat_requests(server)
    system, user = (m["content"] for m in request.body["messages"])
    assert system.startswith("Task: synthesize-answer") and "ONLY the passages" in system
    assert "response_format" not in request.body
    assert "[p2] Mechanism\nAspirin inhibits platelet aggregation." in user


async def test_llm_synthesis_is_truncated_to_max_chars_and_cites_only_what_is_left(server):
    async with running(server) as orch:
        result = await orch.synthesize(QUERY, PASSAGES, max_chars=60)
    assert len(result.answer) <= 60
    assert result.truncated and "answer cut to max_chars=60" in result.truncation_reason
    assert result.answer == "Passage p1 is relevant to the question [p1]."
    assert [c.passage_id for c in result.citations] == ["p1"]


async def test_passages_beyond_the_prompt_budget_are_dropped_and_reported(server):
    big = PROMPT_BUDGET_CHARS // 2 - 100
    passages = [(f"p{i}", f"T{i}", "word " * (big // 5)) for i in range(1, 4)]
    async with running(server) as orch:
        result = await orch.synthesize(QUERY, passages)
    user = chat_requests(server)[0].body["messages"][1]["content"]
    assert "[p1] T1" in user and "[p2] T2" in user and "[p3]" not in user
    assert result.truncated and "used 2 of 3 passages" in result.truncation_reason
    assert [c.passage_id for c in result.citations] == ["p1", "p2"]
