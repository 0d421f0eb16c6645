"""Feedback that can be trusted: every answer names its search, a vote naming it is checked
(same tenant, same verified user, the item among its results), one vote per user per document,
and votes on federated results count on their source and move its hits' Reputation by the
smoothed amount."""
from __future__ import annotations

from dataclasses import replace

import pytest

from ranking.inputs import DEFAULT_REPUTATION
from ranking.profile import BUILTIN_PROFILE
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.federation.fanout import Federation
from services.rag_pipeline.federation.sources import SourcesConfig
from shared.errors import InvalidArgument, PermissionDenied
from shared.identity import Principal
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc
from tests.unit.rag_pipeline.federation.test_unified_ranking import (FAR, LOCAL, TENANT, remote_answer, request,
                                                                     store_with)

ALICE = Principal(tenant_id=TENANT, user_id="alice", groups=("eng",), auth_method="api_key")
BOB = replace(ALICE, user_id="bob")
CAROL = replace(ALICE, user_id="carol")
ALICE_ELSEWHERE = replace(ALICE, tenant_id="globex")          # the same name in another tenant
STRENGTH = BUILTIN_PROFILE.reputation_prior_strength


def pipeline(knowledge: InProcessKnowledge, federation: Federation | None = None) -> RagPipeline:
    return RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel(), federation=federation)


def smoothed(prior: float, helpful: int, unhelpful: int) -> float:
    return (STRENGTH * prior + helpful) / (STRENGTH + helpful + unhelpful)


async def test_a_vote_naming_its_search_counts_once_and_only_for_its_user_and_results(tmp_path):
    knowledge = await store_with(tmp_path, "local", LOCAL)
    await knowledge.store.ingest("globex", "", [doc(a, body, title=t) for a, (t, body) in LOCAL.items()])
    try:
        p = pipeline(knowledge)
        answer = await p.search(request(top_k_final=2), ALICE)
        sid = answer.search_id
        assert len(sid) >= 22 and sid != (await p.search(request(top_k_final=2), ALICE)).search_id
        shown = {r.entry.id for r in answer.results}
        hidden = next(f"{a}#0" for a in LOCAL if f"{a}#0" not in shown)
        top = answer.results[0]
        ack, rep = await p.record_feedback(TENANT, "entry", top.entry.id, True, "", principal=ALICE, search_id=sid)
        prior = ack.reputation_prior or DEFAULT_REPUTATION
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 0)
        assert rep == pytest.approx(smoothed(prior, 1, 0))
        for target, target_id in (("entry", top.entry.id), ("artifact", top.artifact.artifact_id)):
            ack, _ = await p.record_feedback(TENANT, target, target_id, True, "", principal=ALICE, search_id=sid)
            assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 0)      # still one vote: the cap
        ack, _ = await p.record_feedback(TENANT, "entry", top.entry.id, True, "", principal=BOB)
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (2, 0)
        for who, target_id in ((BOB, top.entry.id), (ALICE, hidden)):
            with pytest.raises(InvalidArgument) as err:
                await p.record_feedback(TENANT, "entry", target_id, False, "", principal=who, search_id=sid)
            assert err.value.field == "search_id", (who.user_id, target_id)
        with pytest.raises(InvalidArgument) as err:             # globex holds the same documents
            await p.record_feedback("", "entry", top.entry.id, False, "", principal=ALICE_ELSEWHERE,
                                    search_id=sid)
        assert err.value.field == "search_id"
        with pytest.raises(PermissionDenied, match="verified user"):
            await p.record_feedback(TENANT, "entry", top.entry.id, False, "mallory",
                                    principal=replace(ALICE, user_id=""))
        ack, _ = await p.record_feedback(TENANT, "entry", top.entry.id, True, "", principal=BOB)
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (2, 0)          # nothing refused was counted
    finally:
        await knowledge.close()


async def test_votes_on_federated_results_move_the_sources_reputation_by_the_smoothed_amount(tmp_path):
    knowledge = await store_with(tmp_path, "local", LOCAL)
    far = replace(FAR, reputation=0.7)
    try:
        p = pipeline(knowledge, Federation(lambda: SourcesConfig((far,)), remote_answer(float)))
        before = await p.search(request(), ALICE)
        remote = {r.entry.id: r for r in before.results if r.source_id == "far"}
        assert remote["far:seg-battery"].scores[3] == pytest.approx(0.7)
        sid = before.search_id
        ack, rep = await p.record_feedback(TENANT, "entry", "far:seg-battery", True, "", principal=ALICE,
                                           search_id=sid)
        assert (ack.artifact_id, ack.feedback_helpful, ack.feedback_unhelpful) == ("far", 1, 0)
        assert rep == pytest.approx(smoothed(0.7, 1, 0))
        await p.record_feedback(TENANT, "entry", "far:seg-kitchen", True, "", principal=ALICE, search_id=sid)
        with pytest.raises(InvalidArgument) as err:           # bob may not vote under alice's search
            await p.record_feedback(TENANT, "entry", "far:seg-battery", True, "", principal=BOB, search_id=sid)
        assert err.value.field == "search_id"
        await p.record_feedback(TENANT, "entry", "far:seg-kitchen", True, "", principal=BOB)
        ack, rep = await p.record_feedback(TENANT, "entry", "far:seg-battery", False, "", principal=CAROL)
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (2, 1)         # alice counted once
        after = await p.search(request(), ALICE)
        hit = next(r for r in after.results if r.entry.id == "far:seg-battery")
        assert hit.scores[3] == pytest.approx(smoothed(0.7, 2, 1)) == pytest.approx(rep)
        assert hit.explanation.reputation_basis.startswith("source far: prior 0.70, 2 helpful / 1 unhelpful")
        local = next(r for r in after.results if r.source_id == "local")
        assert local.explanation.reputation_basis.startswith("artifact: prior")
        assert local.scores[3] == next(r for r in before.results if r.entry.id == local.entry.id).scores[3]
    finally:
        await knowledge.close()


async def test_the_search_log_write_is_not_on_the_answers_path_and_a_vote_naming_it_waits_for_it(tmp_path):
    import asyncio
    knowledge = await store_with(tmp_path, "local", LOCAL)
    release, write = asyncio.Event(), knowledge.record_search

    async def slow_record_search(record):          # the store's log write held until released
        await release.wait()
        await write(record)

    knowledge.record_search = slow_record_search
    try:
        p = pipeline(knowledge)
        answer = await asyncio.wait_for(p.search(request(top_k_final=2), ALICE), 10.0)   # answered, write held
        assert answer.search_id and "record_search" not in knowledge.calls
        vote = asyncio.create_task(p.record_feedback(TENANT, "entry", answer.results[0].entry.id, True, "",
                                                     principal=ALICE, search_id=answer.search_id))
        await asyncio.sleep(0.05)
        assert not vote.done()                     # the vote waits for its search's log entry
        release.set()
        ack, _ = await asyncio.wait_for(vote, 10.0)
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 0)
    finally:
        await knowledge.close()
