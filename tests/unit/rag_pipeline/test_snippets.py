"""Highlights: the ranges of a snippet where the query's analysed terms match, in code points."""
from __future__ import annotations

import random
import re

from services.rag_pipeline.results import highlights, make_snippet
from shared.analysis import analyse


def test_highlights_slice_the_snippet_to_the_words_whose_stems_match_the_query():
    text = "Batteries drain; the battery's controller RESET resets nothing. The manual is old."
    ranges = highlights(text, "battery controller reset the")
    assert [text[a:b] for a, b in ranges] == ["Batteries", "battery", "controller", "RESET", "resets"]
    assert all(a < b for a, b in ranges) and ranges == tuple(sorted(ranges))


def test_highlights_count_code_points_not_utf16_units_or_bytes():
    # "😀" is one code point but two UTF-16 units and four UTF-8 bytes; "İ" lower-cases to two code points.
    text = "😀😀 İİ résumé of the turbine 😀 inspection"
    ranges = highlights(text, "Résumé turbine inspection")
    assert [text[a:b] for a, b in ranges] == ["résumé", "turbine", "inspection"]
    assert ranges[0] == (6, 12)


def test_highlights_match_a_naive_word_by_word_analysis_on_random_texts():
    rng = random.Random(7)
    vocab = ["battery", "Batteries", "charging", "charge", "the", "of", "İstanbul", "naïve", "😀", "fleet's",
             "reset", "RESETS", "snake_case", "x" * 70, "émigré", "2026", "co-operate"]
    for _ in range(200):
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30)))
        query = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 4)))
        want_terms = set(analyse(query))
        want = tuple((m.start(), m.end()) for m in re.finditer(r"[^\W_]+", text)
                     if set(analyse(m.group())) & want_terms)
        assert highlights(text, query) == want, (text, query)


def test_a_query_of_stopwords_highlights_nothing():
    assert highlights("the battery of the fleet", "the of") == ()


def test_highlights_of_a_made_snippet_point_into_that_snippet():
    text = "Filler sentence with nothing. " * 20 + "The battery controller reset needs care. " + "More. " * 30
    snippet = make_snippet(text, "battery controller reset")
    ranges = highlights(snippet, "battery controller reset")
    assert {snippet[a:b].lower() for a, b in ranges} == {"battery", "controller", "reset"}
