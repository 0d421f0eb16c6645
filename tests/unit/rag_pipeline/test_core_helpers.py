"""Pure helpers of the RAG pipeline core: snippets, merge/pooling, lean retrieval, validation."""
from __future__ import annotations

import math

import pytest

from services.knowledge_store.models import ArtifactSummary, Entry, Hit
from services.rag_pipeline.core import RagPipeline, _lean, _merge, make_snippet
from services.rag_pipeline.models import Preferences, SearchRequest
from shared.errors import InvalidArgument
from shared.settings import RagPipelineSettings


def hit(entry_id: str, score: float, rank: int) -> Hit:
    artifact_id = entry_id.split("#")[0]
    entry = Entry(id=entry_id, tenant_id="t", persona_id="", artifact_id=artifact_id, chunk_index=0, text="x",
                  headline="", content_summary="", timestamp_unix=0, richness=0.5)
    return Hit(entry=entry, artifact=ArtifactSummary(artifact_id=artifact_id), score=score, rank=rank)


def test_snippet_is_the_window_sharing_most_words_with_the_query():
    text = ("Intro sentence about nothing in particular. " * 5 + "The battery controller reset needs a soft reset. "
            + "Unrelated closing words follow here. " * 5)
    snippet = make_snippet(text, "battery controller reset")
    assert snippet.startswith("The battery controller reset")
    assert len(snippet) <= 321


def test_short_text_is_its_own_snippet():
    assert make_snippet("  short text  ", "anything") == "short text"


def test_merge_keeps_best_signals_per_entry_across_phrases():
    merged = _merge([[hit("a#0", 0.5, 2)], [hit("a#0", 0.7, 1)]], [hit("a#0", 3.0, 4)], collapse=False)
    assert len(merged) == 1
    m = merged[0]
    assert (m.dense, m.dense_rank, m.bm25, m.bm25_rank) == (0.7, 1, 3.0, 4)


def test_merge_pools_chunks_of_one_artifact():
    dense = [[hit("a#0", 0.8, 1), hit("b#0", 0.6, 2), hit("a#1", 0.4, 3)]]
    keyword = [hit("a#1", 9.0, 1), hit("b#0", 2.0, 2)]
    by_artifact = {m.hit.entry.artifact_id: m for m in _merge(dense, keyword, collapse=True)}
    assert set(by_artifact) == {"a", "b"}
    a = by_artifact["a"]
    assert (a.dense, a.bm25, a.dense_rank, a.bm25_rank) == (0.8, 9.0, 1, 1)
    unpooled = _merge(dense, keyword, collapse=False)
    assert len(unpooled) == 3 and any(math.isnan(m.bm25) for m in unpooled)


def test_lean_retrieval_only_when_few_candidates_are_returned():
    assert _lean(SearchRequest(tenant_id="t", query="q", top_k_initial=50, top_k_final=10))
    assert not _lean(SearchRequest(tenant_id="t", query="q", top_k_initial=100, top_k_final=100))


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
