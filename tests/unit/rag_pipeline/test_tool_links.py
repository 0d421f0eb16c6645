"""Resource links after the structured answer."""
from __future__ import annotations

import json

import pydantic_core

from services.rag_pipeline.tools.links import cited_result
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
