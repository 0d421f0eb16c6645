"""Model re-ranking in SearchAndRank: off by default, chosen by the ranking profile, blended into
Relevancy with the profile's weight, and a failing re-ranker degrades to the first ranking.

A deterministic scorer stands in for the model (it prefers the judged document); the store is a
real KnowledgeStore core (SQLite + FAISS in tmp_path)."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from ranking.profile import BUILTIN_PROFILE, RankingProfile
from services.llm_orchestration.results import RerankResult
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import Preferences, SearchRequest
from shared.errors import InvalidArgument, Unavailable
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

from .test_core_ports import CORPUS, QUERY, TENANT

JUDGED = "garden"            # the document the scorer prefers (the others score 0)


class JudgedScorer(InProcessLanguageModel):
    """Re-ranks deterministically: 1.0 for the judged document's text, 0.0 for the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.reranked: list[tuple[str, int]] = []        # (method, candidates) per call
        self.error: Exception | None = None

    async def rerank(self, query, candidates, *, method="", timeout_s=None) -> RerankResult:
        self._enter("rerank")
        self.reranked.append((method, len(candidates)))
        if self.error is not None:
            raise self.error
        judged = CORPUS[JUDGED][1]
        return RerankResult(tuple(1.0 if text == judged else 0.0 for _, text in candidates), "judged", "cross-encoder")

    async def rerankers(self, *, timeout_s=None) -> list[str]:
        return ["embedding-cosine", "cross-encoder"]        # a stack with a cross-encoder, no rerank API


@pytest.fixture
async def setup(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [doc(aid, body, title=title) for aid, (title, body) in CORPUS.items()])
    llm = JudgedScorer()
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=llm)
    yield pipeline, llm
    await knowledge.close()


def use_profile(pipeline: RagPipeline, profile: RankingProfile) -> None:
    """The tenant's default profile, as the store would answer it (cached for this test)."""
    pipeline._profiles[(TENANT, "", "")] = (time.monotonic() + 3_600, profile)


async def search(pipeline: RagPipeline):
    response = await pipeline.search_and_rank(SearchRequest(tenant_id=TENANT, query=QUERY,
                                                            prefs=Preferences(explain=True)))
    return response, {r.artifact.artifact_id: r for r in response.results}


async def test_no_model_rerank_unless_the_profile_names_a_reranker(setup):
    pipeline, llm = setup
    use_profile(pipeline, replace(BUILTIN_PROFILE, tenant_id=TENANT))
    response, _ = await search(pipeline)
    assert llm.reranked == [] and not response.degraded


@pytest.mark.parametrize("weight", [0.3, 0.8])
async def test_the_judged_document_moves_up_by_exactly_the_profiles_blend(setup, weight):
    pipeline, llm = setup
    base = replace(BUILTIN_PROFILE, tenant_id=TENANT, name="t")
    use_profile(pipeline, base)
    before, by_id = await search(pipeline)
    use_profile(pipeline, replace(base, reranker="cross-encoder", rerank_weight=weight))
    after, by_id_after = await search(pipeline)
    assert llm.reranked == [("cross-encoder", len(CORPUS))] and not after.degraded
    for aid, result in by_id.items():
        want = (1 - weight) * result.scores[0] + weight * (1.0 if aid == JUDGED else 0.0)
        assert by_id_after[aid].scores[0] == pytest.approx(want, abs=1e-5)
        assert by_id_after[aid].explanation.rerank_score == pytest.approx(1.0 if aid == JUDGED else 0.0)
    rank_before = [r.artifact.artifact_id for r in before.results].index(JUDGED)
    rank_after = [r.artifact.artifact_id for r in after.results].index(JUDGED)
    assert rank_after < rank_before


async def test_the_profile_caps_how_many_rows_are_rescored(setup):
    pipeline, llm = setup
    use_profile(pipeline, replace(BUILTIN_PROFILE, tenant_id=TENANT, reranker="cross-encoder", rerank_top_n=2))
    await search(pipeline)
    assert llm.reranked == [("cross-encoder", 2)]


async def test_a_failing_reranker_degrades_to_todays_ranking_with_a_flag(setup):
    pipeline, llm = setup
    base = replace(BUILTIN_PROFILE, tenant_id=TENANT)
    use_profile(pipeline, base)
    plain, by_id = await search(pipeline)
    llm.error = Unavailable("rerank API failed the request (HTTP 503, after 3 attempts)")
    use_profile(pipeline, replace(base, reranker="rerank-api", rerank_weight=0.9))
    degraded, by_id_degraded = await search(pipeline)
    assert degraded.degraded and any(r.startswith("rerank unavailable") for r in degraded.degraded_reasons)
    assert [r.artifact.artifact_id for r in degraded.results] == [r.artifact.artifact_id for r in plain.results]
    assert all(by_id_degraded[a].scores[0] == pytest.approx(r.scores[0]) for a, r in by_id.items())


async def test_a_stored_profile_with_a_reranker_moves_the_judged_document_by_exactly_its_blend(setup):
    pipeline, llm = setup
    before, by_id = await search(pipeline)                       # no profile stored: the built-in one
    assert llm.reranked == []
    stored = await pipeline.put_profile(RankingProfile(tenant_id=TENANT, name="ce", is_default=True,
                                                       reranker="cross-encoder", rerank_top_n=3, rerank_weight=0.6))
    assert (stored.reranker, stored.rerank_top_n, stored.rerank_weight) == ("cross-encoder", 3, 0.6)
    after, by_id_after = await search(pipeline)                  # through the store, not a cached stand-in
    assert after.profile_name == "ce" and llm.reranked == [("cross-encoder", 3)] and not after.degraded
    first_three = [r.artifact.artifact_id for r in before.results][:3]     # the profile's rerank_top_n best
    assert JUDGED in first_three and len(by_id) > 3
    for aid, result in by_id.items():
        relevancy = result.scores[0]
        want = 0.4 * relevancy + 0.6 * (aid == JUDGED) if aid in first_three else relevancy
        assert by_id_after[aid].scores[0] == pytest.approx(want, abs=1e-5)
    assert [r.artifact.artifact_id for r in after.results].index(JUDGED) < \
        [r.artifact.artifact_id for r in before.results].index(JUDGED)


async def test_a_profile_naming_a_reranker_the_stack_lacks_is_refused_and_not_stored(setup):
    pipeline, _ = setup
    with pytest.raises(InvalidArgument, match="reranker.*'rerank-api' is not configured.*'cross-encoder'"):
        await pipeline.put_profile(RankingProfile(tenant_id=TENANT, name="api", reranker="rerank-api"))
    assert [p.name for p in await pipeline.list_profiles(TENANT)] == []
