"""The learned ranking served with the store's per-field signals (services/rag_pipeline/feedback.py):
the model's top N local rows are sent to GetFieldSignals once; a failing or slow store leaves
those features NaN with the reason flagged, never failing the search; `nucleus tune`'s capture
carries the signals of every local candidate; the feature contributions name the per-field
features. Real KnowledgeStore core (SQLite + FAISS in tmp_path), except the explanation test,
which is pure (constructed FieldSignals)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ranking import Candidates, RankingConfig
from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.learned import RowSignals, fused_scores, learned_ranking, served_features
from ranking.trees import load_model
from services.rag_pipeline.feedback import Captured, LearnedExplainer
from services.rag_pipeline.merge import Merged
from shared.errors import DeadlineExceeded, Unavailable
from shared.records import FieldSignals
from tests.support.ranking_models import linear_model

from .test_core_ports import CORPUS, TENANT
from .test_learned_serving import RELEVANCY_ONLY, search
from .test_learned_serving import setup as setup_serving  # noqa: F401 - the fixture, reused

NAMES = list(FEATURE_NAMES)
# score = 10 · fused − 100 · cover_title: the one result whose title holds query terms ("Battery
# controller reset") falls to the bottom — only when the store served the title statistics
TITLE_AVERSE = linear_model(0.0, weights=[-100.0 if n == "cover_title" else 0.0 for n in FEATURE_NAMES])


@pytest.fixture
async def setup(setup_serving):
    pipeline, knowledge = setup_serving               # test_learned_serving's store and pipeline
    await knowledge.store.put_ranking_model(TENANT, TITLE_AVERSE, RELEVANCY_ONLY)
    return pipeline, knowledge


async def test_the_served_model_sees_the_stores_title_statistics_asked_once_for_its_top_n(setup):
    pipeline, knowledge = setup
    response, order = await search(pipeline)
    assert not response.degraded, response.degraded_reasons
    assert knowledge.calls.count("get_field_signals") == 1
    assert "field_signals=4" in response.debug
    assert sorted(order) == sorted(CORPUS) and order[-1] == "battery"        # its title coverage cost it
    battery = next(r for r in response.results if r.artifact.artifact_id == "battery").explanation
    cover = next(c for c in battery.feature_contributions if c.name == "cover_title")
    assert cover.value > 0 and cover.contribution == pytest.approx(-100.0 * cover.value, rel=1e-6)


@pytest.mark.parametrize("error", [Unavailable("KnowledgeStore unavailable: connection refused"),
                                   DeadlineExceeded("KnowledgeStore did not answer before the deadline")])
async def test_a_failing_or_slow_store_leaves_the_per_field_features_missing_and_flags_it(setup, error):
    pipeline, knowledge = setup
    knowledge.fail("get_field_signals", error)
    response, order = await search(pipeline)
    assert response.degraded
    assert [r for r in response.degraded_reasons if r.startswith("learned_signals_unavailable")] == [
        f"learned_signals_unavailable: {error}"]
    assert order[0] == "battery" and len(order) == 4             # cover_title missing: the model leaves it first
    assert "field_signals=0" in response.debug and "learned=linear N30" in response.debug
    assert all(c.name != "cover_title" for r in response.results for c in r.explanation.feature_contributions)


async def test_without_a_query_vector_the_signals_are_not_asked_and_the_reason_says_so(setup):
    pipeline, knowledge = setup
    pipeline._llm.fail("embed", Unavailable("LlmOrchestration unavailable"))
    response, order = await search(pipeline)
    assert order and "get_field_signals" not in knowledge.calls
    assert "learned_signals_unavailable: no query vector (embedding unavailable)" in response.degraded_reasons


async def test_tune_captures_the_signals_of_every_local_candidate_and_trains_on_what_is_served(setup):
    pipeline, knowledge = setup
    captured: list[Captured] = []
    pipeline.learned.capture = captured.append
    await search(pipeline)
    got = captured[-1]
    assert got.why == "" and got.signals is not None and len(got.signals.rows) == len(got.candidates) == 4
    rows = np.arange(4, dtype=np.intp)
    x = got.features_of()(rows, fused_scores(got.candidates, got.config))
    assert np.isfinite(x[:, [NAMES.index(n) for n in ("bm25_doc", "cover_body", "length")]]).all()
    assert knowledge.calls.count("get_field_signals") == 1        # the model's top N reuse the captured ones
    knowledge.fail("get_field_signals", Unavailable("KnowledgeStore unavailable"))
    await search(pipeline)
    assert captured[-1].signals is None and "KnowledgeStore unavailable" in captured[-1].why


def test_the_feature_contributions_name_the_per_field_features_of_a_result_with_signals():
    """Pure: constructed signals for rows 0–2 of four candidates; row 3 is a federated hit."""
    weights = [2.0 if n in ("bm25_doc", "cover_title") else 0.0 for n in FEATURE_NAMES]
    model = load_model(linear_model(0.0, top_n=4, weights=weights), FEATURE_NAMES, FEATURE_VERSION)
    c = Candidates.build(dense=[0.9, 0.8, 0.7, 0.6], bm25=[3.0, 2.0, 1.0, math.nan])
    cfg = RankingConfig(fusion="convex", weights=(1.0, 0.0, 0.0, 0.0))
    merged = [Merged(f"a{i}#0", f"a{i}", (0, 0.5, 0.0, 0, 0), origin="" if i < 3 else "peer") for i in range(4)]
    t, n = 2, 3
    signals = FieldSignals(query_terms=("reset", "battery"), idf=np.array([1.5, 2.0], np.float32),
                           avg_length=(3.0, 20.0, 23.0), found=np.array([True, True, False]),
                           title_tf=np.array([[1, 1], [0, 1], [np.nan, np.nan]], np.float32),
                           body_tf=np.array([[2, 0], [1, 1], [np.nan, np.nan]], np.float32),
                           title_length=np.array([3, 4, np.nan], np.float32),
                           body_length=np.array([18, 25, np.nan], np.float32),
                           title_positions=np.full((n, 4), -1, np.int32), body_positions=np.full((n, 8), -1, np.int32),
                           dense_title=np.array([0.7, 0.2, np.nan], np.float32),
                           chunk_position=np.zeros(n, np.float32))
    given = RowSignals(signals, np.arange(3, dtype=np.intp))
    learned = learned_ranking(c, cfg, model, 4, lambda rows, fused: served_features(c, cfg, t, rows, fused, given))
    explained = dict(zip((m_.artifact_id for m_ in merged), LearnedExplainer(model, learned, merged).explain(merged)))
    for aid in ("a0", "a1"):                                  # found: both per-field features listed with values
        listed = {f.name: f for f in explained[aid][1]}
        assert set(listed) == {"bm25_doc", "cover_title"}
        assert listed["cover_title"].value == pytest.approx(1.0 if aid == "a0" else 0.5)
        assert listed["bm25_doc"].contribution == pytest.approx(2.0 * listed["bm25_doc"].value, rel=1e-6)
    assert explained["a2"][1] == () and explained["a3"][1] == ()   # not found / federated: missing, not listed


async def test_a_model_that_reads_no_per_field_feature_does_not_ask_the_store(setup):
    pipeline, knowledge = setup
    fused_only = linear_model(0.0, weights=[1.0 if n == "fused" else 0.0 for n in FEATURE_NAMES])
    await knowledge.store.put_ranking_model(TENANT, fused_only, RELEVANCY_ONLY)
    response, _ = await search(pipeline)
    assert not response.degraded, response.degraded_reasons
    assert "learned=linear" in response.debug and "field_signals=0" in response.debug
    assert "get_field_signals" not in knowledge.calls
