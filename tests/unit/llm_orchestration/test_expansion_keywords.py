import pytest

from services.llm_orchestration.expansion import (clean_alternatives, keyword_phrase, keywords,
                                                  parse_alternatives)
from shared.errors import UpstreamFailed


def test_keywords_drop_stopwords_and_question_words_but_keep_content_words():
    assert keywords("What are the effects of vitamin D on bone density in older adults?") == [
        "effects", "vitamin", "D", "bone", "density", "older", "adults"]


def test_keywords_keep_hyphenated_and_numeric_terms_once():
    assert keywords("Does COVID-19 affect COVID-19 patients' 5-year survival?") == [
        "COVID-19", "affect", "patients", "5-year", "survival"]


def test_keyword_phrase_is_none_when_it_would_not_differ_from_the_query():
    assert keyword_phrase("vitamin D deficiency") is None
    assert keyword_phrase("what is it?") is None


def test_keyword_phrase_is_the_content_words_joined():
    assert keyword_phrase("how does aspirin reduce the risk of stroke") == "aspirin reduce risk stroke"


def test_clean_alternatives_dedupes_drops_empties_and_copies_of_the_query_and_caps():
    query = "aspirin and stroke"
    raw = ["  Aspirin   and stroke ", "", "   ", "aspirin stroke prevention",
           "ASPIRIN STROKE PREVENTION", "acetylsalicylic acid cerebrovascular events",
           "antiplatelet therapy stroke", "fourth one"]
    assert clean_alternatives(query, raw, cap=2) == [
        "aspirin stroke prevention", "acetylsalicylic acid cerebrovascular events"]


@pytest.mark.parametrize("content", ["not json", '{"alternatives": "one string"}',
                                     '{"alts": ["x"]}', '[1, 2]', '{"alternatives": [1, 2]}'])
def test_parse_alternatives_rejects_anything_but_a_list_of_strings(content):
    with pytest.raises(UpstreamFailed, match="malformed query expansion"):
        parse_alternatives(content)


def test_parse_alternatives_ignores_extra_fields():
    assert parse_alternatives('{"alternatives": ["a", "b"], "why": "x"}') == ["a", "b"]


def test_a_reply_wrapped_in_a_markdown_fence_is_still_read():
    assert parse_alternatives('```json\n{"alternatives": ["a"]}\n```') == ["a"]
    assert parse_alternatives('```\n{"alternatives": ["b"]}\n```') == ["b"]
