"""SearchAndRank through the three real services: weights, temporal intent, profiles,
feedback, rerank, expansion and explanations."""
from __future__ import annotations

import time

import grpc
import pytest

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn

pytestmark = pytest.mark.integration
TENANT = "rank-it"
YEAR = 365 * 86_400
NOW = int(time.time())

BATTERY = ("To reset the battery controller, park the robot on its dock, press the emergency stop, "
           "run the soft reset command and wait thirty seconds before releasing the stop.")


def _doc(artifact_id: str, text: str, *, modified: int, reputation: float, source_type: str = "wiki") -> DocumentIn:
    return DocumentIn(artifact=ArtifactMeta(artifact_id=artifact_id, title=artifact_id, source_type=source_type,
                                            modified_unix=modified, created_unix=modified,
                                            reputation_prior=reputation), content=text)


@pytest.fixture(scope="module")
async def corpus(stack):
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    try:
        await client.ingest(TENANT, "", [
            _doc("guide-old", BATTERY, modified=NOW - 5 * YEAR, reputation=0.5),
            _doc("guide-new", BATTERY, modified=NOW - 30 * 86_400, reputation=0.5),
            _doc("twin-a", "Quarterly zeppelin maintenance checklist: inspect the envelope and the gas valves.",
                 modified=NOW - YEAR, reputation=0.5),
            _doc("twin-b", "Quarterly zeppelin maintenance checklist: inspect the envelope and the gas valves.",
                 modified=NOW - YEAR, reputation=0.5),
            _doc("rumour", BATTERY,
                 modified=NOW - 86_400, reputation=0.1, source_type="chat"),
            _doc("unrelated", "The cafeteria serves lentil soup on Thursdays and fish on Fridays.",
                 modified=NOW, reputation=0.9),
        ])
    finally:
        await client.close()


@pytest.fixture
async def rag(stack):
    channel = grpc.aio.insecure_channel(stack["rag_pipeline"]["grpc"])
    yield rag_grpc.RagPipelineStub(channel)
    await channel.close()


async def search(rag, query: str, **kwargs) -> rag_pb.SearchAndRankResponse:
    prefs = kwargs.pop("prefs", pb.RankingPreferences(explain=True))
    return await rag.SearchAndRank(rag_pb.SearchAndRankRequest(
        tenant_id=TENANT, user_query_text=query, ranking_prefs=prefs, **kwargs), timeout=30)


def ids(response) -> list[str]:
    return [r.associated_artifact.artifact_id for r in response.results]


async def test_temporal_intent_turns_recency_on_and_prefers_the_newer_twin(corpus, rag):
    plain = await search(rag, "how to reset the battery controller")
    assert not plain.temporal_intent
    assert all(not r.explanation.recency_applied for r in plain.results)
    latest = await search(rag, "latest procedure to reset the battery controller")
    assert latest.temporal_intent
    order = ids(latest)
    assert order.index("guide-new") < order.index("guide-old")
    new, old = (next(r for r in latest.results if r.associated_artifact.artifact_id == a) for a in ("guide-new", "guide-old"))
    assert new.individual_scores.recency > old.individual_scores.recency
    assert new.explanation.recency_applied and new.explanation.age_days < 40


async def test_request_weights_override_and_explanations_add_up(corpus, rag):
    prefs = pb.RankingPreferences(has_weights=True, relevancy_weight=0.0, recency_weight=0.0, richness_weight=0.0,
                                  reputation_weight=1.0, explain=True)
    response = await search(rag, "battery controller reset", prefs=prefs)
    reps = [r.individual_scores.reputation for r in response.results]
    assert reps == sorted(reps, reverse=True)
    top = response.results[0]
    assert top.explanation.weights.reputation == pytest.approx(1.0)
    assert top.overall_rank_score == pytest.approx(top.individual_scores.reputation, abs=1e-5)
    for r in response.results:
        e = r.explanation
        assert e.dense_rank > 0 or e.bm25_rank > 0
        if e.bm25_rank:
            assert e.bm25 > 0


async def test_reputation_outranks_a_rumour_with_the_same_relevance(corpus, rag):
    response = await search(rag, "reset the battery controller")
    order = ids(response)
    assert order.index("guide-new") < order.index("rumour")


async def test_profiles_are_versioned_and_used_and_reported(corpus, rag):
    profile = pb.RankingProfile(tenant_id=TENANT, name="fresh-first", relevancy_weight=0.3, recency_weight=0.7,
                                richness_weight=0.0, reputation_weight=0.0, fusion_method=pb.FUSION_METHOD_RRF,
                                recency_mode=pb.RECENCY_MODE_ALWAYS, recency_half_life_days=30)
    v1 = await rag.PutRankingProfile(profile, timeout=10)
    assert v1.version >= 1
    profile.recency_half_life_days = 60
    v2 = await rag.PutRankingProfile(profile, timeout=10)
    assert v2.version == v1.version + 1
    got_v1 = await rag.GetRankingProfile(pb.GetRankingProfileRequest(tenant_id=TENANT, name="fresh-first",
                                                                     version=v1.version), timeout=10)
    assert got_v1.recency_half_life_days == pytest.approx(30)
    listed = await rag.ListRankingProfiles(pb.ListRankingProfilesRequest(tenant_id=TENANT), timeout=10)
    assert "fresh-first" in {p.name for p in listed.profiles}

    response = await search(rag, "battery controller reset",
                            prefs=pb.RankingPreferences(profile_name="fresh-first", explain=True))
    assert (response.profile_name, response.profile_version) == ("fresh-first", v2.version)
    assert response.results[0].explanation.fusion_method == "rrf"
    assert response.results[0].explanation.recency_applied
    order = ids(response)
    assert order.index("guide-new") < order.index("guide-old")


async def test_persona_default_profile_applies_only_to_that_persona(corpus, rag):
    await rag.PutRankingProfile(pb.RankingProfile(
        tenant_id=TENANT, persona_id="archivist", name="archivist-default", relevancy_weight=0.2,
        recency_weight=0.0, richness_weight=0.0, reputation_weight=0.8, fusion_method=pb.FUSION_METHOD_CONVEX,
        recency_mode=pb.RECENCY_MODE_NEVER, recency_half_life_days=180, is_default=True), timeout=10)
    persona = await search(rag, "battery controller reset", persona_id="archivist")
    assert persona.profile_name == "archivist-default"
    other = await search(rag, "battery controller reset")
    assert other.profile_name != "archivist-default"


async def test_unknown_profile_name_is_not_found(corpus, rag):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await search(rag, "battery", prefs=pb.RankingPreferences(profile_name="does-not-exist"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "does-not-exist" in err.value.details()


async def test_helpful_feedback_raises_reputation_and_rank(corpus, rag):
    query = "zeppelin maintenance checklist envelope gas valves"
    before = await search(rag, query, top_k_final_rank=2)
    assert set(ids(before)) == {"twin-a", "twin-b"}
    loser = ids(before)[1]
    loser_before = next(r for r in before.results if r.associated_artifact.artifact_id == loser)
    acks = [await rag.RecordFeedback(pb.Feedback(tenant_id=TENANT, target=pb.FEEDBACK_TARGET_ARTIFACT,
                                                 target_id=loser, helpful=True, user_id=f"user-{i}"), timeout=10)
            for i in range(3)]
    assert acks[-1].feedback_helpful == acks[0].feedback_helpful + 2
    assert acks[-1].reputation > acks[0].reputation > 0.5
    after = await search(rag, query, top_k_final_rank=2)
    assert ids(after)[0] == loser
    loser_after = after.results[0]
    assert loser_after.individual_scores.reputation > loser_before.individual_scores.reputation


async def test_unhelpful_feedback_on_an_entry_lowers_reputation(corpus, rag):
    response = await search(rag, "cafeteria lentil soup")
    entry = next(r for r in response.results if r.associated_artifact.artifact_id == "unrelated")
    ack = await rag.RecordFeedback(pb.Feedback(tenant_id=TENANT, target=pb.FEEDBACK_TARGET_ENTRY,
                                               target_id=entry.persona_knowledge_entry_id, helpful=False,
                                               user_id="u2", search_id=response.search_id), timeout=10)
    assert ack.artifact_id == "unrelated" and ack.feedback_unhelpful >= 1
    assert ack.reputation < entry.individual_scores.reputation
    with pytest.raises(grpc.aio.AioRpcError) as err:            # a search id SearchAndRank never returned
        await rag.RecordFeedback(pb.Feedback(tenant_id=TENANT, target=pb.FEEDBACK_TARGET_ENTRY,
                                             target_id=entry.persona_knowledge_entry_id, helpful=False,
                                             user_id="u2", search_id="x" * 24), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "search_id" in err.value.details()


async def test_rerank_blends_a_score_into_relevancy(corpus, rag):
    response = await search(rag, "reset the battery controller",
                            prefs=pb.RankingPreferences(rerank=True, explain=True))
    assert not response.degraded, response.degraded_reasons
    assert "rerank" in {t.stage for t in response.timings}
    assert any(r.explanation.rerank_score > 0 for r in response.results)


async def test_expansion_without_an_llm_is_labelled_not_faked(corpus, rag):
    response = await search(rag, "what is the procedure to reset the battery controller",
                            expand_query_with_llm=True)
    assert "expansion=" in response.debug_information
    assert "llm" not in response.debug_information.split("expansion=")[1].split(":")[0]
    assert response.query_phrases[0] == "what is the procedure to reset the battery controller"
    assert response.results


async def test_extra_phrases_are_searched_and_deduplicated(corpus, rag):
    response = await search(rag, "battery controller", extra_query_phrases=["battery controller", "soft reset"])
    assert list(response.query_phrases) == ["battery controller", "soft reset"]
    assert len(set(ids(response))) == len(ids(response))


async def test_bad_ranking_input_names_the_field(corpus, rag):
    cases = [
        (pb.RankingPreferences(has_weights=True), "weights"),
        (pb.RankingPreferences(recency_half_life_days=-3), "recency_half_life_days"),
    ]
    for prefs, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await search(rag, "battery", prefs=prefs)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await rag.PutRankingProfile(pb.RankingProfile(tenant_id=TENANT, name="bad", relevancy_weight=-1,
                                                      fusion_method=pb.FUSION_METHOD_CONVEX), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "relevancy_weight" in err.value.details()
    for rerank, field in [(dict(reranker="cross-encoder"), "reranker"), (dict(rerank_top_n=51), "rerank_top_n"),
                          (dict(rerank_weight=1.5), "rerank_weight")]:     # the stack has no cross-encoder
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rag.PutRankingProfile(pb.RankingProfile(tenant_id=TENANT, name="bad-rerank", relevancy_weight=1,
                                                          **rerank), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.value.details()


async def test_profile_rerank_fields_travel_over_grpc_both_ways(corpus, rag):
    info = await rag.PutRankingProfile(pb.RankingProfile(tenant_id=TENANT, name="rerank-fields", relevancy_weight=1,
                                                         rerank_top_n=9, rerank_weight=0.0), timeout=10)
    got = await rag.GetRankingProfile(pb.GetRankingProfileRequest(tenant_id=TENANT, name="rerank-fields"), timeout=10)
    for p in (info, got):
        assert (p.reranker, p.rerank_top_n, p.HasField("rerank_weight"), p.rerank_weight) == ("", 9, True, 0.0)
    unset = await rag.PutRankingProfile(pb.RankingProfile(tenant_id=TENANT, name="rerank-unset", relevancy_weight=1),
                                        timeout=10)
    assert (unset.rerank_top_n, unset.rerank_weight) == (20, pytest.approx(0.5))      # the defaults
