"""The why-not's deciding factor (services/rag_pipeline/why_not.py `decide`, `failed_filter`,
`checked_ids`) over candidates ranked by the real ranking core."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from ranking import RankingConfig, rank
from services.rag_pipeline.merge import Merged, ranking_candidates
from services.rag_pipeline.models import RankedResult, SearchRequest
from services.rag_pipeline.capture import Captured
from services.rag_pipeline.why_not import Probed, checked_ids, decide, failed_filter, remote
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


def test_a_remote_document_is_explained_from_the_captured_remote_hits_and_an_unreturned_id_is_not():
    """Two remote hits ranked with the local candidates by the same `rank`: one repeating the text
    of the shown local result (dropped as its repeat), one a year older ranked last; an id no
    source returned: None (it answers as missing)."""
    captured, request, _ = _captured(top_k_final=1)
    shown = captured.results[0]
    captured.results = (replace(shown, entry=replace(shown.entry, text="the same words")),)

    def row(name: str, text: str) -> Merged:
        entry = replace(_hit(f"wiki:{name}", ts=NOW - 500 * DAY).entry, id=f"wiki:{name}", text=text)
        hit = Hit(entry=entry, artifact=ArtifactSummary(artifact_id=f"wiki:{name}", source_id="wiki"), score=7.0,
                  rank=1)
        return Merged(f"wiki:{name}", f"wiki:{name}", (NOW - 500 * DAY, 0.5, 0.5, 0, 0), dense=0.6, bm25=3.0,
                      hit=hit, origin="wiki", remote_score=7.0)

    captured.merged = captured.merged + [row("copy", "The same  words!"), row("old", "other words")]
    captured.candidates = ranking_candidates(captured.merged)
    ranked = rank(captured.candidates, captured.config, len(captured.merged))
    copy, old = (remote(f"wiki:{n}", captured, request, ranked) for n in ("copy", "old"))
    assert (copy.deciding_factor, copy.folded_into, copy.source) == ("folded", shown.artifact.artifact_id, "wiki")
    assert (old.deciding_factor, old.rank, old.remote_score, old.source) == ("out_ranked", 10, 7.0, "wiki")
    assert old.overall == round(float(ranked.overall[9]), 6) and old.versus.factor == "recency"
    assert (old.dense.how, old.dense.last_candidate) == ("rescored", None)
    assert remote("wiki:never", captured, request, ranked) is None and remote("d7", captured, request, ranked) is None


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
