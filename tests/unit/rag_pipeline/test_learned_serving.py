"""The learned ranking served by SearchAndRank: a profile naming a stored model re-orders its top N
(read once from the store, cached by hash); a missing or mismatched model falls back to the
untrained ranking with the reason flagged. Real KnowledgeStore core (SQLite + FAISS in tmp_path)."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ranking.features import FEATURE_NAMES
from ranking.profile import RankingProfile
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import Preferences, SearchRequest
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.support.ranking_models import linear_model
from tests.unit.knowledge_store.helpers import doc

from .test_core_ports import CORPUS, QUERY, TENANT

RELEVANCY_ONLY = RankingProfile(tenant_id=TENANT, name="default", relevancy_weight=1.0, recency_weight=0.0,
                                richness_weight=0.0, reputation_weight=0.0)
# score = 10 · fused − 100 · fused: the model turns today's order upside down
REVERSING = linear_model(0.0, weights=[-100.0 if n == "fused" else 0.0 for n in FEATURE_NAMES])


@pytest.fixture
async def setup(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [doc(aid, body, title=title) for aid, (title, body) in CORPUS.items()])
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())
    yield pipeline, knowledge
    await knowledge.close()


async def search(pipeline: RagPipeline):
    pipeline._profiles.clear()
    response = await pipeline.search_and_rank(SearchRequest(tenant_id=TENANT, query=QUERY,
                                                            prefs=Preferences(explain=True)))
    return response, [r.artifact.artifact_id for r in response.results]


async def test_a_stored_model_named_by_the_profile_reorders_the_top_n_and_is_read_once(setup):
    pipeline, knowledge = setup
    await knowledge.store.put_profile(RELEVANCY_ONLY)
    untrained, today = await search(pipeline)
    assert len(today) == 4 and not untrained.degraded
    _, tuned = await knowledge.store.put_ranking_model(TENANT, REVERSING, RELEVANCY_ONLY)
    response, order = await search(pipeline)
    assert not response.degraded and response.profile_version == tuned.version == 2
    assert today[0] == "battery" and order[-1] == "battery" and sorted(order) == sorted(today)   # best -> last
    assert "learned=linear N30" in response.debug
    assert [r.explanation.rerank_score for r in response.results] == sorted(
        (r.explanation.rerank_score for r in response.results), reverse=True)      # the learned Relevancy
    assert knowledge.calls.count("get_ranking_model") == 1                      # read once ...
    await search(pipeline)
    assert knowledge.calls.count("get_ranking_model") == 1                      # ... then cached by hash


@pytest.mark.parametrize("change,flag", [({"model_sha256": "ab" * 32}, "learned_model_missing"),
                                         ({"feature_version": 2}, "learned_model_mismatch")])
async def test_a_missing_or_mismatched_model_falls_back_to_the_untrained_ranking_with_a_flag(setup, change, flag):
    pipeline, knowledge = setup
    await knowledge.store.put_profile(RELEVANCY_ONLY)
    _, today = await search(pipeline)
    sha, _ = await knowledge.store.put_ranking_model(TENANT, REVERSING)
    named = replace(RELEVANCY_ONLY, **{"model_sha256": sha, "feature_version": 1, **change})
    pipeline._profiles[(TENANT, "", "")] = (time.monotonic() + 3_600, named)
    response = await pipeline.search_and_rank(SearchRequest(tenant_id=TENANT, query=QUERY))
    assert response.degraded and any(r.startswith(flag) for r in response.degraded_reasons)
    assert [r.artifact.artifact_id for r in response.results] == today
    asked = knowledge.calls.count("get_ranking_model")
    again = await pipeline.search_and_rank(SearchRequest(tenant_id=TENANT, query=QUERY))
    assert again.degraded_reasons == response.degraded_reasons                  # the same flag, from memory:
    assert knowledge.calls.count("get_ranking_model") == asked                  # no store call per query


async def test_put_ranking_profile_naming_a_model_is_refused_naming_the_field_and_an_edit_keeps_the_model(setup):
    from shared.errors import InvalidArgument
    pipeline, knowledge = setup
    sha, tuned = await knowledge.store.put_ranking_model(TENANT, REVERSING, RELEVANCY_ONLY)
    for field, value in (("model_sha256", sha), ("feature_version", 1)):     # what the MCP tool and gRPC pass on
        with pytest.raises(InvalidArgument, match=field):
            await pipeline.put_profile(replace(RELEVANCY_ONLY, **{field: value}))
    edited = await pipeline.put_profile(replace(RELEVANCY_ONLY, richness_weight=0.3))
    assert (edited.version, edited.model_sha256, edited.feature_version) == (tuned.version + 1, sha, 1)


async def test_each_result_the_model_scored_lists_feature_contributions_summing_with_the_base_to_its_score(setup):
    pipeline, knowledge = setup
    # score = 10 · fused − 100 · (fused − 0.5) over the top 2 of the 4 results: the last two are not scored
    two = linear_model(0.0, top_n=2, weights=[-100.0 if n == "fused" else 0.0 for n in FEATURE_NAMES],
                       center=[0.5 if n == "fused" else 0.0 for n in FEATURE_NAMES])
    await knowledge.store.put_profile(RELEVANCY_ONLY)
    await knowledge.store.put_ranking_model(TENANT, two, RELEVANCY_ONLY)
    response, order = await search(pipeline)
    assert len(order) == 4 and "learned=linear N2" in response.debug
    for r in response.results[:2]:
        e = r.explanation
        fused = next(c for c in e.feature_contributions if c.name == "fused")
        assert [c.name for c in e.feature_contributions] == ["fused"]           # the one non-zero weight
        assert e.learned_base == pytest.approx(10.0 * fused.value, rel=1e-6)
        assert e.learned_base + sum(c.contribution for c in e.feature_contributions) == pytest.approx(
            10.0 * fused.value - 100.0 * (fused.value - 0.5), rel=1e-6)         # the model's score
    for r in response.results[2:]:
        assert r.explanation.feature_contributions == () and r.explanation.learned_base == 0.0
    untrained = replace(RELEVANCY_ONLY, name="plain")
    await knowledge.store.put_profile(untrained)
    pipeline._profiles.clear()
    plain = await pipeline.search_and_rank(SearchRequest(tenant_id=TENANT, query=QUERY,
                                                         prefs=Preferences(explain=True, profile_name="plain")))
    assert all(r.explanation.feature_contributions == () for r in plain.results)


def test_the_largest_contributions_are_listed_and_the_rest_summed_as_other_features():
    import numpy as np

    from services.rag_pipeline.feedback import MAX_LISTED, listed
    from services.rag_pipeline.models import OTHER_FEATURES
    rng = np.random.default_rng(4)
    c = rng.normal(size=len(FEATURE_NAMES))
    c[[0, 5]] = 0.0
    values = rng.normal(size=len(FEATURE_NAMES)).astype(np.float32)
    values[1] = np.nan
    out = listed(c, values)
    assert len(out) == MAX_LISTED + 1 and out[-1].name == OTHER_FEATURES and out[-1].value is None
    shown = [abs(x.contribution) for x in out[:-1]]
    assert shown == sorted(shown, reverse=True) and min(shown) >= np.sort(np.abs(c))[-MAX_LISTED]
    assert sum(x.contribution for x in out) == pytest.approx(c.sum())
    assert all(x.value is None for x in out if x.name == FEATURE_NAMES[1])
