"""Token budgets of the search tools (tools/budget.py), with the real bundled MiniLM tokenizer."""
from __future__ import annotations

import pytest
from mcp_types import ResourceLink

from services.rag_pipeline.results import highlights
from services.rag_pipeline.tools.budget import HITS, SEGMENTS, as_result, count_tokens, fit, result_tokens
from services.rag_pipeline.tools.schemas import (
    HitOut,
    MetaOut,
    RagSearchOut,
    RawOut,
    RawResultsOut,
    RawStatsOut,
    SegmentOut,
)
from shared.errors import InvalidArgument

QUERY = "battery controller reset"
TEXT = ("The battery controller needs a reset after each firmware update; hold the button for ten seconds. "
        "Charging resumes once the controller reports a healthy battery and the fleet dashboard turns green. ") * 3


def raw_out(n: int = 6) -> RawOut:
    hits = [HitOut(id=f"doc-{i}#0", score=1 - i / 10, snippet=TEXT[:300], chunk=TEXT, title=f"Doc {i}",
                   resourceId="kb", highlights=list(highlights(TEXT[:300], QUERY))) for i in range(n)]
    return RawOut(results=RawResultsOut(hits=hits, stats=RawStatsOut(top_k=n, elapsed_ms=1.0)), meta_data=MetaOut())


def test_without_a_budget_the_answer_is_the_model_itself():
    out = raw_out()
    assert fit(out, None, HITS) is out and "budget" not in out.model_dump()


def test_the_tokenizer_is_minilms_word_pieces():
    assert count_tokens("battery controller") == 2 and count_tokens("") == 0
    assert count_tokens("unaffordability") > 1          # word pieces, not words


@pytest.mark.parametrize("budget", [600, 800, 1500, 3000, 20_000])
def test_an_answer_fits_its_budget_texts_first_then_results_left_out(budget):
    full = result_tokens(as_result(raw_out()))
    result = fit(raw_out(), budget, HITS)
    assert result_tokens(result) <= budget
    told = result.structured_content["budget"]
    hits = result.structured_content["results"]["hits"]
    assert told["tokens"] == result_tokens(result) and told["max_tokens"] == budget
    assert told["omitted"] == 6 - len(hits) and [h["id"] for h in hits] == [f"doc-{i}#0" for i in range(len(hits))]
    if budget >= full:
        assert told["shortened"] == told["omitted"] == 0 and hits[0]["chunk"] == TEXT
    if told["omitted"]:                                  # results are left out only once every text is short
        assert all(len(h["snippet"]) <= 40 and len(h["chunk"]) <= 40 for h in hits)
    for h in hits:                                       # highlights stay inside what is left of the snippet
        assert all(h["snippet"][a:b].lower() in {"battery", "controller", "reset"} for a, b in h["highlights"])


def test_every_content_item_counts_so_links_added_later_count_too():
    def with_links(out):
        result = as_result(out)
        result.content += [ResourceLink(type="resource_link", uri=f"https://kb.example/{h.id}", name=h.title or "")
                           for h in out.results.hits]
        return result

    plain, linked = fit(raw_out(), 1500, HITS), fit(raw_out(), 1500, HITS, render=with_links)
    assert result_tokens(linked) <= 1500 and len(linked.content) > 1
    assert linked.structured_content["budget"]["omitted"] >= plain.structured_content["budget"]["omitted"]


def test_rag_search_segments_are_cut_too():
    seg = SegmentOut(segment_uid="a#0", source_file_name="a.md", source_file_type="md", segment_summary=TEXT[:300],
                     raw_text=TEXT, highlights=list(highlights(TEXT[:300], QUERY)))
    result = fit(RagSearchOut(segments=[seg]), 400, SEGMENTS)
    assert result_tokens(result) <= 400 and result.structured_content["budget"] == {
        "max_tokens": 400, "tokens": result_tokens(result), "shortened": 1, "omitted": 0}


def test_a_budget_too_small_for_an_empty_answer_names_the_field_and_the_least_it_takes():
    with pytest.raises(InvalidArgument) as err:
        fit(raw_out(), 100, HITS)
    assert err.value.field == "max_tokens" and "give at least" in err.value.message
