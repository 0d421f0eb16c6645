"""Fan-out: which sources a caller's query goes to, per-source deadlines and errors, the
remote answers parsed, and de-duplication across sources."""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from services.rag_pipeline.federation.dedupe import LocalKeys, dedupe_remote, url_key
from services.rag_pipeline.federation.fanout import (
    Federation,
    RemoteQuery,
    hits_from_raw_results,
    hits_from_segments,
    resource_ids,
)
from services.rag_pipeline.federation.hits import ERROR, OK, SKIPPED, TIMEOUT, Caller, RemoteHit
from services.rag_pipeline.federation.sources import Source, SourcesConfig
from shared.errors import InvalidArgument
from shared.identity import Principal

FAST = Source(id="fast", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}), timeout_s=2.0, reputation=0.7)
SLOW = Source(id="slow", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}), timeout_s=0.2)
DEAD = Source(id="dead", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}), timeout_s=2.0)
HR = Source(id="hr", url="http://127.0.0.1:9/mcp", groups=frozenset({"hr"}), timeout_s=2.0)
TOOLS = Source(id="jira", kind="tools", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}))
OFF = Source(id="off", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}), enabled=False)
CONFIG = SourcesConfig(sources=(FAST, SLOW, DEAD, HR, TOOLS, OFF), version=1, default_tenants=frozenset({"acme"}))
ENG = Principal(tenant_id="acme", user_id="ann", groups=("eng",))
QUERY = RemoteQuery("battery reset", ("battery reset",), 10, Caller("acme", "ann", ("eng",)))


async def answer(source: Source, query: RemoteQuery, deadline_s: float) -> list[RemoteHit]:
    if source.id == "slow":
        await asyncio.sleep(30)
    if source.id == "dead":
        raise ConnectionRefusedError("connection refused")
    return [RemoteHit(source.id, f"{source.id}-{i}", f"text {i} of {source.id}", score=float(i)) for i in range(3)]


@pytest.fixture
def federation() -> Federation:
    return Federation(lambda: CONFIG, answer)


def test_an_empty_selection_is_every_enabled_rag_source_the_caller_may_see(federation):
    plan = federation.plan([], ENG)
    assert plan.local and [s.id for s in plan.remotes] == ["fast", "slow", "dead"] and plan.federated
    assert [s.id for s in federation.plan([], None, "acme").remotes] == ["fast", "slow", "dead", "hr"]   # auth off
    assert federation.plan([], None, "other").remotes == ()          # auth off, another tenant: none


def test_a_source_outside_the_callers_groups_is_refused_exactly_like_an_unknown_one(federation):
    with pytest.raises(InvalidArgument) as hidden:
        federation.plan(["hr"], ENG)
    with pytest.raises(InvalidArgument) as unknown:
        federation.plan(["nosuch"], ENG)
    assert hidden.value.field == unknown.value.field == "sources"
    assert "accepted: local, dead, fast, jira, slow" in str(hidden.value)
    assert str(hidden.value).replace("hr", "X") == str(unknown.value).replace("nosuch", "X")
    with pytest.raises(InvalidArgument, match="sources"):
        federation.plan(["off"], ENG)                       # disabled: not selectable


def test_a_selection_names_local_and_remotes_and_a_tools_source_is_skipped(federation):
    plan = federation.plan(["fast", "jira"], ENG)
    assert not plan.local and [s.id for s in plan.remotes] == ["fast"]
    assert [(r.source_id, r.status) for r in plan.skipped] == [("jira", SKIPPED)]
    assert federation.plan(["local"], ENG).local and not federation.plan(["local"], ENG).remotes


async def test_a_slow_and_a_dead_source_are_reported_and_never_hold_up_the_others(federation):
    started = time.perf_counter()
    hits, reports = await federation.gather(federation.plan([], ENG), QUERY, budget_s=5.0)
    elapsed = time.perf_counter() - started
    assert elapsed < 5.0                                    # the slow one (30 s) was cut at its 0.2 s
    by_id = {r.source_id: r for r in reports}
    assert (by_id["fast"].status, by_id["fast"].result_count) == (OK, 3)
    assert by_id["slow"].status == TIMEOUT and "0.20s" in by_id["slow"].error
    assert by_id["dead"].status == ERROR and "connection refused" in by_id["dead"].error
    assert [h.source_id for h in hits] == ["fast"] * 3


async def test_the_request_budget_caps_every_source_deadline(federation):
    _, reports = await federation.gather(federation.plan(["slow", "fast"], ENG), QUERY, budget_s=0.05)
    assert {r.source_id: r.status for r in reports} == {"slow": TIMEOUT, "fast": OK}
    assert "0.05s" in [r for r in reports if r.source_id == "slow"][0].error


def test_seed000_raw_results_and_seed002_segments_are_parsed_as_untrusted_hits():
    raw = {"results": {"hits": [
        {"id": "e1", "score": 17.5, "chunk": "full text", "snippet": "snip", "title": "T",
         "uri": "https://r.example/d/e1?sig=x", "resourceId": "r1", "timestamp": "2024-01-02T00:00:00Z",
         "provenance": {"artifact_id": "a1", "source_uri": "https://docs.example/a1"}},
        {"id": "", "chunk": "no id"}, {"id": "e3", "snippet": "only a snippet", "score": "high"}, "junk"]}}
    hits = hits_from_raw_results("far", raw)
    assert [(h.id, h.text, h.score, h.rank) for h in hits] == [("e1", "full text", 17.5, 1),
                                                               ("e3", "only a snippet", None, 2)]
    assert hits[0].url == "https://docs.example/a1" and hits[0].artifact_id == "a1"
    assert hits[0].timestamp_unix == 1704153600 and hits[0].entry_id == "far:e1"
    segments = {"status": "success", "segments": [
        {"segment_uid": "s1", "raw_text": "body", "headline": "H", "source_url": "https://x.example/1"}]}
    [seg] = hits_from_segments("two", segments)
    assert (seg.id, seg.title, seg.score, seg.document_id) == ("s1", "H", None, "two:s1")
    assert hits_from_raw_results("far", {"error": "x"}) == [] and hits_from_segments("two", None) == []
    assert resource_ids({"results": {"resources": [{"id": "r1"}, {"name": "no id"}, {"id": "r2"}]}}) == ["r1", "r2"]


def test_duplicates_across_sources_keep_the_more_reputable_sources_copy():
    hits = [RemoteHit("a", "1", "The Battery controller, reset!", url="https://Docs.example/x/"),
            RemoteHit("b", "9", "something else entirely", url="https://docs.example/x"),   # same URL
            RemoteHit("b", "2", "the battery controller reset"),                             # same words
            RemoteHit("c", "3", "a third text"),
            RemoteHit("c", "4", "a near copy of the third text")]
    vectors = np.eye(5, dtype=np.float32)
    vectors[4] = vectors[3]                                                                  # cosine 1.0
    kept, dropped = dedupe_remote(hits, vectors, {"a": 0.4, "b": 0.9, "c": 0.5}, ["a", "b", "c"])
    assert kept == [1, 2, 3] and dropped == 2     # b's two copies of a win over it; 4 repeats 3
    assert url_key("https://Docs.example/x/#frag") == url_key("https://docs.example/x")
    local = LocalKeys([("Battery controller reset", ""), ("", "https://docs.example/y")])
    assert local.repeats("battery   CONTROLLER reset.", "") and local.repeats("other", "https://docs.example/y/")
    assert not local.repeats("other", "https://docs.example/z")


def test_a_nucleus_hit_keeps_its_heading_context_and_its_own_reputation_moved_by_the_source_prior():
    from services.rag_pipeline.federation.fanout import context_line
    from services.rag_pipeline.federation.unify import prior

    raw = {"results": {"hits": [{"id": "e1", "chunk": "Hold the fuse.", "title": "Battery guide",
                                 "provenance": {"headline": "Battery guide › Fuse reset",
                                                "scores": {"reputation": 0.8}}},
                                {"id": "e2", "chunk": "plain", "title": "T", "provenance": {"headline": "T"}}]}}
    first, second = hits_from_raw_results("nuc", raw)
    assert first.context == first.title_line == "Battery guide › Fuse reset" and first.reputation == 0.8
    assert second.context == "" and second.title_line == "T" and second.reputation is None
    assert context_line("Guide", "Intro › Setup", "x") == "Guide › Intro › Setup"
    assert context_line("", "one two three", "one two three") == ""
    assert prior(first, 0.5) == pytest.approx(0.8) and prior(first, 0.9) == pytest.approx(1.0)
    assert prior(first, 0.2) == pytest.approx(0.5) and prior(second, 0.7) == 0.7
