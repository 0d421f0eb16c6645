"""Resource links after the structured answer, and rag_search's token budget counting them."""
from __future__ import annotations

import json

import pydantic_core

from services.rag_pipeline.tools.links import cited_result, tokens, within_budget
from services.rag_pipeline.tools.registration import _segment_link
from services.rag_pipeline.tools.schemas import RagSearchOut, SegmentOut


def answer(n: int) -> RagSearchOut:
    return RagSearchOut(segments=[SegmentOut(segment_uid=f"a#{i}", source_file_name=f"a{i}.md", source_file_type="md",
                                             headline=f"Heading {i}", raw_text="word " * 40,
                                             source_url=f"https://rag.example/documents/a%23{i}?sig=x")
                                  for i in range(n)])


def test_content_zero_is_the_answer_as_the_sdk_writes_it_and_the_links_follow_in_order() -> None:
    out = answer(3)
    result = cited_result(out, [_segment_link(s) for s in out.segments])
    assert result.content[0].text == pydantic_core.to_json(out, fallback=str, indent=2).decode()
    assert json.loads(result.content[0].text) == result.structured_content
    assert [(c.type, c.uri, c.name) for c in result.content[1:]] == [
        ("resource_link", s.source_url, s.headline) for s in out.segments]


def test_a_token_budget_keeps_segments_best_first_while_they_and_their_links_fit() -> None:
    out = answer(5)
    whole = cited_result(out, [_segment_link(s) for s in out.segments])
    cost = sum(tokens(c.text) if c.type == "text" else tokens(c.model_dump_json(by_alias=True, exclude_none=True))
               for c in whole.content)
    assert within_budget(out, "segments", _segment_link, cost) == out
    trimmed = within_budget(out, "segments", _segment_link, cost - 1)
    assert [s.segment_uid for s in trimmed.segments] == ["a#0", "a#1", "a#2", "a#3"]
    without_links = tokens(pydantic_core.to_json(out, fallback=str, indent=2).decode())
    assert len(within_budget(out, "segments", _segment_link, without_links).segments) < 5     # links count
    assert within_budget(out, "segments", _segment_link, 1).segments == []
    assert within_budget(out, "segments", _segment_link, None) == out
