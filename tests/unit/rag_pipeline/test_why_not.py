"""The why-not's deciding factor (services/rag_pipeline/why_not.py `decide`, `failed_filter`,
`checked_ids`) over candidates ranked by the real ranking core."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from ranking import RankingConfig, rank
from services.rag_pipeline.merge import Merged, ranking_candidates
from services.rag_pipeline.models import RankedResult, SearchRequest
from services.rag_pipeline.capture import Captured
from services.rag_pipeline.why_not import Probed, checked_ids, decide, failed_filter
from shared.errors import InvalidArgument
from shared.records import ArtifactSummary, Entry, Hit, SearchFilters

NOW = 1_800_000_000
DAY = 86_400


def _hit(aid: str, *, ts: int = NOW, tags=(), owners=(), source_type="policy", persona="") -> Hit:
    return Hit(entry=Entry(id=f"{aid}#0", tenant_id="t", persona_id=persona, artifact_id=aid, chunk_index=0,
                           text="x", headline="", content_summary="", timestamp_unix=ts, richness=0.5),
               artifact=ArtifactSummary(artifact_id=aid, source_type=source_type, tags=tuple(tags),
                                        owners=tuple(owners)), score=0.0, rank=0)


def _captured(top_k_final: int) -> tuple[Captured, SearchRequest, object]:
    """Eight candidates, equally relevant, d0 the newest and d7 a year old; ranked on recency
    mostly (weights 0.2 / 0.8), the first `top_k_final` shown."""
    merged = [Merged(f"d{i}#0", f"d{i}", (NOW - i * 45 * DAY, 0.5, 0.5, 0, 0), dense=0.6, dense_rank=i + 1,
                     bm25=3.0, bm25_rank=i + 1) for i in range(8)]
    config = RankingConfig(weights=(0.2, 0.8, 0.0, 0.0), apply_recency=True, now_unix=NOW)
    candidates = ranking_candidates(merged)
    ranked = rank(candidates, config, len(merged))
    shown = tuple(RankedResult(entry=_hit(merged[int(r)].artifact_id).entry,
                               artifact=_hit(merged[int(r)].artifact_id).artifact, snippet="", overall=0.0,
                               scores=(0, 0, 0, 0), explanation=None) for r in ranked.rows[:top_k_final])
    request = SearchRequest(tenant_id="t", query="q", top_k_initial=50, top_k_final=top_k_final)
    legs = SimpleNamespace(dense=None, keyword=None)
    return Captured(request, legs, merged, candidates, config, shown), request, ranked


def test_a_candidate_beyond_the_pages_is_out_ranked_by_the_factor_of_the_largest_weighted_gap():
    captured, request, ranked = _captured(top_k_final=1)
    doc = decide("d7", captured, request, Probed(entry_id="d7#0"), None, ranked)
    assert doc.deciding_factor == "out_ranked" and doc.rank == 8
    assert doc.versus.factor == "recency" and doc.versus.entry_id == "d0#0"
    assert doc.versus.document < doc.versus.shown
    assert doc.weights == {"relevancy": 0.2, "recency": 0.8, "richness": 0.0, "reputation": 0.0}
    assert (doc.dense.rank, doc.dense.how, doc.keyword.rank) == (8, "retrieved", 8)


def test_a_candidate_within_the_pages_is_cut_by_the_page_size_and_a_shown_one_says_so():
    captured, request, ranked = _captured(top_k_final=3)
    later = decide("d4", captured, request, Probed(entry_id="d4#0"), None, ranked)
    assert later.deciding_factor == "page_cut" and later.rank == 5 and "page 2" in later.detail
    first = decide("d0", captured, request, Probed(entry_id="d0#0"), None, ranked)
    assert first.deciding_factor == "shown" and first.rank == 1


def test_a_document_no_leg_retrieved_is_a_filter_when_one_excludes_it_else_not_retrieved():
    captured, request, ranked = _captured(top_k_final=1)
    dated = SearchRequest(tenant_id="t", query="q", top_k_initial=50, top_k_final=1,
                          filters=SearchFilters(date_from_unix=NOW - DAY))
    probed = Probed(entry_id="old#0", dense=0.2, dense_last=0.5, bm25=0.0)
    doc = decide("old", captured, dated, probed, _hit("old", ts=NOW - 400 * DAY), ranked)
    assert (doc.deciding_factor, doc.filter, doc.rank) == ("filter", "date_from_unix", 0)
    assert "before" in doc.value
    doc = decide("old", captured, request, probed, _hit("old", ts=NOW - 400 * DAY), ranked)
    assert doc.deciding_factor == "not_retrieved" and "no analysed query term" in doc.detail
    assert (doc.dense.score, doc.dense.last_candidate, doc.dense.how) == (0.2, 0.5, "probed")


@pytest.mark.parametrize("filters,hit,expected", [
    (SearchFilters(tags=("travel",)), _hit("a", tags=("hr",)), ("tags", "hr")),
    (SearchFilters(owners=("ann",)), _hit("a"), ("owners", "(none)")),
    (SearchFilters(source_types=("wiki",)), _hit("a"), ("source_types", "policy")),
    (SearchFilters(persona_id="p1"), _hit("a", persona="p2"), ("persona_id", "p2")),
    (SearchFilters(date_to_unix=NOW - DAY), _hit("a", ts=0), ("date_to_unix", "unknown date")),
    (SearchFilters(tags=("hr",), date_from_unix=NOW - DAY), _hit("a", tags=("hr",)), None),
])
def test_failed_filter_names_the_filter_and_the_documents_value(filters, hit, expected):
    assert failed_filter(filters, hit) == expected


def test_ids_are_one_to_five_distinct_and_more_are_refused_naming_the_field():
    assert checked_ids(["a", "b", "a"]) == ("a", "b")
    with pytest.raises(InvalidArgument) as err:
        checked_ids([f"d{i}" for i in range(6)])
    assert err.value.field == "artifact_ids" and "at most 5" in err.value.message
    with pytest.raises(InvalidArgument):
        checked_ids([])
