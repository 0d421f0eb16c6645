"""Pure helpers of the RAG pipeline core: snippets, merge/pooling of candidate columns, validation."""
from __future__ import annotations

import math

import pytest

from shared.records import CandidateColumns
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.merge import merge as _merge, ranking_candidates as _candidates
from services.rag_pipeline.results import make_snippet
from services.rag_pipeline.models import Preferences, SearchRequest
from shared.errors import InvalidArgument
from shared.settings import RagPipelineSettings


def cols(*hits: tuple[str, float]) -> CandidateColumns:
    """One leg's answer, best first; entry ids 'artifact#chunk'. Each entry's signals are derived
    from its id so that tests can tell which chunk represents a pooled artifact."""
    rows = [(eid, eid.split("#")[0], 1_000 + int(eid.split("#")[1]), 0.1 * (1 + int(eid.split("#")[1])), 0.5, 2, 1)
            for eid, _ in hits]
    return CandidateColumns.from_rows(rows, [score for _, score in hits])


def test_snippet_is_the_window_sharing_most_words_with_the_query():
    text = ("Intro sentence about nothing in particular. " * 5 + "The battery controller reset needs a soft reset. "
            + "Unrelated closing words follow here. " * 5)
    snippet = make_snippet(text, "battery controller reset")
    assert snippet.startswith("The battery controller reset")
    assert len(snippet) <= 321


def test_snippet_prefers_the_window_with_most_distinct_query_words_and_stays_within_the_limit():
    filler = "Nothing relevant is said in this sentence at all. " * 8
    text = (filler + "Battery here. " + filler + "The battery controller needs a reset after the update. " + filler)
    snippet = make_snippet(text, "battery controller reset update")
    assert snippet.startswith("The battery controller needs a reset")
    assert len(snippet) <= 320


def test_snippet_without_query_words_is_the_opening_cut_at_a_word():
    text = "Alpha beta gamma delta. " * 40
    snippet = make_snippet(text, "zebra")
    assert text.startswith(snippet.rstrip("…")) and len(snippet) <= 321


def test_snippet_positions_stay_exact_when_lower_casing_changes_the_length():
    # "İ" lower-cases to two code points; a naive str.lower() search would shift every position.
    text = "İİİİ. " * 60 + "The turbine blade inspection checklist is here. " + "Other words follow. " * 20
    snippet = make_snippet(text, "turbine inspection checklist")
    assert snippet.startswith("The turbine blade inspection checklist")


def test_short_text_is_its_own_snippet():
    assert make_snippet("  short text  ", "anything") == "short text"


def test_merge_keeps_best_signals_per_entry_across_phrases():
    keyword = cols(("z#0", 9.0), ("y#0", 8.0), ("x#0", 7.0), ("a#0", 3.0))
    merged = {m.entry_id: m for m in _merge([cols(("z#0", 0.9), ("a#0", 0.5)), cols(("a#0", 0.7))], keyword,
                                            collapse=False)}
    assert set(merged) == {"a#0", "x#0", "y#0", "z#0"}
    m = merged["a#0"]
    assert (m.dense, m.dense_rank, m.bm25, m.bm25_rank) == (pytest.approx(0.7), 1, 3.0, 4)
    assert math.isnan(merged["y#0"].dense) and merged["y#0"].dense_rank == 0


def test_merge_pools_chunks_of_one_artifact():
    dense = [cols(("a#0", 0.8), ("b#0", 0.6), ("a#1", 0.4))]
    keyword = cols(("a#1", 9.0), ("b#0", 2.0))
    by_artifact = {m.artifact_id: m for m in _merge(dense, keyword, collapse=True)}
    assert set(by_artifact) == {"a", "b"}
    a = by_artifact["a"]
    assert (a.dense, a.bm25, a.dense_rank, a.bm25_rank) == (pytest.approx(0.8), 9.0, 1, 1)
    unpooled = _merge(dense, keyword, collapse=False)
    assert len(unpooled) == 3 and any(math.isnan(m.bm25) for m in unpooled)


def test_pooled_artifact_is_represented_by_its_strongest_chunk_and_its_signals():
    # a#1 is first in the keyword leg (rank 1) but only third by cosine; a#0 has dense rank 2.
    dense = [cols(("b#0", 0.9), ("a#0", 0.8), ("a#1", 0.4))]
    keyword = cols(("a#1", 9.0))
    a = {m.artifact_id: m for m in _merge(dense, keyword, collapse=True)}["a"]
    assert a.entry_id == "a#1"
    candidates = _candidates([a])
    assert candidates.timestamp[0] == 1_001 and candidates.richness[0] == pytest.approx(0.2)
    assert (candidates.helpful[0], candidates.unhelpful[0]) == (2, 1)


def test_candidates_of_nothing_is_empty():
    assert len(_candidates([]).dense) == 0


@pytest.mark.parametrize("kwargs,field", [
    ({"query": " "}, "user_query_text"),
    ({"top_k_final": 500}, "top_k_final_rank"),
    ({"top_k_final": 20, "top_k_initial": 10}, "top_k_initial_retrieve"),
    ({"prefs": Preferences(weights=(0.0, 0.0, 0.0, 0.0))}, "weights"),
    ({"prefs": Preferences(weights=(1.0, -1.0, 0.0, 0.0))}, "recency_weight"),
    ({"prefs": Preferences(fusion="magic")}, "fusion_method"),
    ({"query_vector": (float("nan"),)}, "user_query_vector"),
    ({"extra_phrases": ("a", "b", "c", "d", "e")}, "extra_query_phrases"),
    ({"tenant_id": ""}, "tenant_id"),
])
async def test_validation_names_the_field(kwargs, field):
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=None, llm=None)  # validate() needs no I/O
    request = SearchRequest(**{"tenant_id": "t", "query": "battery", **kwargs})
    with pytest.raises(InvalidArgument) as err:
        pipeline.validate(request)
    assert field in str(err.value)
