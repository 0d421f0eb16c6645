"""RagPipeline.search_and_rank through its ports, with in-process adapters: a real KnowledgeStore
(SQLite + FAISS in tmp_path) and a feature-hashing language model. A port told to fail stands
for a dead or slow service; the answer degrades, and says how, instead of failing."""
from __future__ import annotations

import asyncio

import pytest

from ranking.profile import BUILTIN_PROFILE
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import Preferences, SearchRequest, SearchResponse
from shared.errors import DeadlineExceeded, InvalidArgument, NotFound, Unavailable, Unimplemented
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

TENANT = "acme"
QUERY = "how do I reset the battery controller"
CORPUS = {
    "battery": ("Battery controller reset", "When the battery controller hangs, hold the reset button for ten "
                "seconds until the status light blinks green. The controller then reloads its firmware."),
    "turbine": ("Turbine inspection checklist", "Inspect the turbine blades for cracks, check the gearbox oil "
                "level and record the vibration readings of every bearing."),
    "sales": ("Quarterly sales report", "Revenue grew in the northern region while marketing costs stayed flat "
              "over the quarter."),
    "garden": ("Garden irrigation schedule", "Water the tomato beds early in the morning and mulch them so that "
               "the soil stays moist through the afternoon."),
}
STORE_DOWN = Unavailable("KnowledgeStore unavailable: connection refused")
LLM_SLOW = DeadlineExceeded("LlmOrchestration did not answer before the deadline")


@pytest.fixture
async def ports(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [doc(aid, body, title=title) for aid, (title, body) in CORPUS.items()])
    llm = InProcessLanguageModel()
    yield knowledge, llm
    await knowledge.close()


@pytest.fixture
def pipeline(ports) -> RagPipeline:
    knowledge, llm = ports
    return RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=llm)


async def search(pipeline: RagPipeline, query: str = QUERY, **fields) -> SearchResponse:
    fields.setdefault("tenant_id", TENANT)
    fields.setdefault("prefs", Preferences(explain=True))
    return await pipeline.search_and_rank(SearchRequest(query=query, **fields))


async def test_search_ranks_the_document_both_legs_agree_on_first_and_reads_its_text(pipeline, ports):
    knowledge, llm = ports
    response = await search(pipeline)
    assert not response.degraded and response.degraded_reasons == ()
    assert [r.artifact.artifact_id for r in response.results][0] == "battery"
    assert {r.artifact.artifact_id for r in response.results} == set(CORPUS)     # the dense leg sees all four
    top, runner_up = response.results[0], response.results[1]
    assert top.explanation.dense_rank == 1 and top.explanation.bm25_rank == 1
    assert top.overall > runner_up.overall
    assert [r.overall for r in response.results] == sorted((r.overall for r in response.results), reverse=True)
    assert top.entry.text.startswith("When the battery controller hangs")
    assert "reset" in top.snippet and top.artifact.title == "Battery controller reset"
    assert (response.profile_name, response.profile_version) == (BUILTIN_PROFILE.name, BUILTIN_PROFILE.version)
    assert {"dense_leg", "keyword_leg", "get_entries"} <= set(knowledge.calls)
    assert llm.calls == ["embed"]


def _answer(response: SearchResponse) -> list[tuple]:
    return [(r.entry.id, r.overall, r.explanation.dense_rank, r.explanation.bm25_rank) for r in response.results]


async def test_both_legs_are_one_store_call_with_the_answer_of_two_calls(pipeline, ports):
    knowledge, llm = ports
    separate = await search(pipeline)
    assert "both_legs" not in knowledge.calls
    knowledge.calls.clear()
    combined = await asyncio.gather(search(pipeline), search(pipeline))     # concurrent: one call each
    retrieval = {"both_legs", "keyword_leg", "dense_leg"}
    # the in-process adapter logs the two legs it runs inside the one call
    assert [c for c in knowledge.calls if c in retrieval][:3] == ["both_legs", "keyword_leg", "dense_leg"]
    assert all(_answer(c) == _answer(separate) and not c.degraded and len(c.results) == 4 for c in combined)


async def test_a_lone_search_keeps_its_keyword_leg_beside_the_embedding_concurrent_ones_combine(pipeline, ports):
    knowledge, _ = ports
    alone = await search(pipeline)
    assert "both_legs" not in knowledge.calls and "keyword_leg" in knowledge.calls
    knowledge.calls.clear()
    together = await asyncio.gather(*(search(pipeline) for _ in range(4)))
    assert 1 <= knowledge.calls.count("both_legs") <= 4      # the first may still run alone
    assert all(_answer(r) == _answer(alone) and not r.degraded for r in together)


async def test_a_failed_combined_call_falls_back_to_the_two_calls_silently(pipeline, ports):
    knowledge, llm = ports
    expected = _answer(await search(pipeline))
    knowledge.calls.clear()
    knowledge.fail("both_legs", Unimplemented("an older KnowledgeStore"))
    responses = await asyncio.gather(search(pipeline), search(pipeline))
    assert all(not r.degraded and _answer(r) == expected for r in responses)
    legs = [c for c in knowledge.calls if c in ("both_legs", "keyword_leg", "dense_leg")]
    assert legs[:3] == ["both_legs", "keyword_leg", "dense_leg"]


async def test_no_embedding_answers_from_the_keyword_leg_and_says_so(pipeline, ports):
    knowledge, llm = ports
    llm.fail("embed", LLM_SLOW)
    response = await search(pipeline)
    assert response.degraded
    assert response.degraded_reasons == (f"embedding unavailable: {LLM_SLOW}",)
    assert [r.artifact.artifact_id for r in response.results] == ["battery"]      # only it shares the words
    assert all(r.explanation.dense_rank == 0 and r.explanation.bm25_rank >= 1 for r in response.results)
    assert "dense_leg" not in knowledge.calls


async def test_a_failed_vector_leg_answers_keyword_only_and_says_so(pipeline, ports):
    knowledge, _ = ports
    knowledge.fail("dense_leg", STORE_DOWN)
    response = await search(pipeline)
    assert response.degraded
    assert response.degraded_reasons == (f"vector retrieval unavailable: {STORE_DOWN}",)
    assert [r.artifact.artifact_id for r in response.results] == ["battery"]
    assert response.results[0].entry.text.startswith("When the battery controller hangs")
    assert all(r.explanation.dense_rank == 0 and r.explanation.bm25_rank >= 1 for r in response.results)


async def test_a_failed_keyword_leg_answers_vector_only_and_says_so(pipeline, ports):
    knowledge, _ = ports
    knowledge.fail("keyword_leg", STORE_DOWN)
    response = await search(pipeline)
    assert response.degraded
    assert response.degraded_reasons == (f"keyword retrieval unavailable: {STORE_DOWN}",)
    assert response.results[0].artifact.artifact_id == "battery"
    assert {r.artifact.artifact_id for r in response.results} == set(CORPUS)
    assert all(r.explanation.bm25_rank == 0 and r.explanation.dense_rank >= 1 for r in response.results)


@pytest.mark.parametrize("llm_fails,vector_fails,first_reason", [
    (False, True, "keyword retrieval unavailable"),     # the keyword leg is awaited before the vector call
    (True, False, "embedding unavailable"),
])
async def test_both_legs_failing_is_unavailable_naming_each_cause(pipeline, ports, llm_fails, vector_fails,
                                                                  first_reason):
    knowledge, llm = ports
    if llm_fails:
        llm.fail("embed", LLM_SLOW)
    if vector_fails:
        knowledge.fail("dense_leg", STORE_DOWN)
    knowledge.fail("keyword_leg", STORE_DOWN)
    with pytest.raises(Unavailable) as err:
        await search(pipeline)
    message = str(err.value)
    assert message.startswith(f"both retrieval legs failed: {first_reason}: ")
    assert f"keyword retrieval unavailable: {STORE_DOWN}" in message
    assert (f"vector retrieval unavailable: {STORE_DOWN}" in message) == vector_fails
    assert "get_entries" not in knowledge.calls


async def test_entry_texts_unavailable_still_returns_ranked_ids_and_says_so(pipeline, ports):
    knowledge, _ = ports
    knowledge.fail("get_entries", STORE_DOWN)
    response = await search(pipeline)
    assert response.degraded_reasons == (f"entry texts unavailable, ids and scores returned: {STORE_DOWN}",)
    top = response.results[0]
    assert top.artifact.artifact_id == "battery" and top.entry.id.startswith("battery")
    assert top.entry.text == "" and top.overall > 0


async def test_a_failed_rerank_keeps_the_first_ranking_and_says_so(pipeline, ports):
    _, llm = ports
    ranked = await search(pipeline, prefs=Preferences(explain=True, rerank=True))
    assert "rerank" in llm.calls and not ranked.degraded
    assert ranked.results[0].explanation.rerank_score > 0
    llm.fail("rerank", LLM_SLOW)
    response = await search(pipeline, prefs=Preferences(explain=True, rerank=True))
    assert response.degraded_reasons == (f"rerank unavailable: {LLM_SLOW}",)
    assert response.results[0].artifact.artifact_id == "battery"
    assert all(r.explanation.rerank_score == 0.0 for r in response.results)


@pytest.mark.parametrize("fields,field", [
    (dict(tenant_id=""), "tenant_id"),
    (dict(query="   "), "user_query_text"),
    (dict(top_k_final=101), "top_k_final_rank"),
    (dict(top_k_initial=5, top_k_final=10), "top_k_initial_retrieve"),
    (dict(prefs=Preferences(fusion="bogus")), "ranking_prefs.fusion_method"),
    (dict(prefs=Preferences(weights=(1.0, -1.0, 0.0, 0.0))), "ranking_prefs.recency_weight"),
    (dict(extra_phrases=("battery", " ")), "extra_query_phrases[1]"),
])
async def test_invalid_arguments_name_the_field_before_any_port_is_called(pipeline, ports, fields, field):
    knowledge, llm = ports
    with pytest.raises(InvalidArgument) as err:
        await search(pipeline, **fields)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert knowledge.calls == [] and llm.calls == []


async def test_a_query_vector_of_the_wrong_dimension_names_the_field_and_is_not_degraded(pipeline):
    with pytest.raises(InvalidArgument) as err:
        await search(pipeline, query_vector=(1.0, 0.0, 0.0), extra_phrases=("controller reset",))
    assert err.value.field == "user_query_vector"
    assert str(err.value) == "user_query_vector: expected 384 dimensions, got 3"


async def test_a_tenant_without_knowledge_is_not_found_not_a_degraded_answer(pipeline):
    with pytest.raises(NotFound) as err:
        await search(pipeline, tenant_id="nobody")
    assert "nobody" in str(err.value)


async def test_an_identifier_only_the_keyword_leg_finds_is_ranked_first_with_both_signals(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    decoys = [doc(f"dock-{i}", f"Dock firmware notes {i}: the dock firmware update restarts the dock; "
                               f"dock firmware logs go to the dock console.", title=f"Dock firmware {i}")
              for i in range(12)]
    needle = doc("ticket", "Customer reports XK4471 after the update; the robot stops at the charger.",
                 title="Ticket 99")
    await knowledge.store.ingest(TENANT, "", [*decoys, needle])
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())
    try:
        response = await search(pipeline, "dock firmware XK4471", top_k_initial=3, top_k_final=3)
        top = response.results[0]
        assert top.artifact.artifact_id == "ticket"
        e = top.explanation
        assert (e.dense_source, e.bm25_source, e.dense_rank, e.bm25_rank) == ("completed", "retrieved", 0, 1)
        assert e.dense_cosine > 0.0                           # its real cosine, not the 0 of "absent"
        assert e.dense_weight < BUILTIN_PROFILE.dense_weight   # an identifier pulls toward the keyword leg
        assert "identifiers=1" in e.query_profile
        for r in response.results:                            # every result: both raw signals, and how
            assert {r.explanation.dense_source, r.explanation.bm25_source} <= {"retrieved", "completed"}
            assert 0.0 <= r.probability <= 1.0
        assert response.results[0].probability >= response.results[-1].probability
    finally:
        await knowledge.close()


async def test_a_failed_keyword_leg_leaves_bm25_absent_but_the_vector_call_still_completes_it(pipeline, ports):
    knowledge, _ = ports
    knowledge.fail("keyword_leg", STORE_DOWN)
    response = await search(pipeline)
    assert response.degraded
    assert all(r.explanation.bm25_source == "completed" and r.explanation.bm25_rank == 0 for r in response.results)
    assert response.results[0].artifact.artifact_id == "battery"
