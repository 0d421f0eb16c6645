import numpy as np
import pytest

from services.llm_orchestration.rerank import cosine_to_unit, parse_scores
from services.llm_orchestration.synthesis import (ELLIPSIS, cited_ids, extract_answer,
                                                  fit_passages, split_sentences, truncate_text)
from shared.errors import UpstreamFailed


def test_truncate_text_keeps_short_text_untouched():
    assert truncate_text("  Short answer [p1].  ", 100) == ("Short answer [p1].", False)


def test_truncate_text_cuts_at_the_last_sentence_end_in_the_window():
    text = "First claim holds [p1]. Second claim is longer and runs on [p2]. Third [p3]."
    out, cut = truncate_text(text, 40)
    assert cut
    assert out == "First claim holds [p1]."


def test_truncate_text_prefers_a_word_boundary_over_losing_more_than_half():
    text = "First claim holds [p1]. Second claim is longer and runs on [p2]. Third [p3]."
    out, cut = truncate_text(text, 60)
    assert cut and out == "First claim holds [p1]. Second claim is longer and runs on…"


def test_truncate_text_falls_back_to_a_word_boundary_with_an_ellipsis():
    text = "one two three four five six seven eight nine ten eleven twelve"
    out, cut = truncate_text(text, 30)
    assert cut and len(out) <= 30
    assert out.endswith(ELLIPSIS)
    assert out[:-1] == text[: len(out) - 1]            # a prefix of the text
    assert text[len(out) - 1] == " "                   # cut where a word ended


@pytest.mark.parametrize("limit", [1, 5, 17, 64, 200])
def test_truncate_text_never_exceeds_the_limit(limit):
    text = "Alpha beta gamma. Delta epsilon zeta eta theta! Iota kappa lambda mu nu xi omicron. " * 3
    out, _ = truncate_text(text, limit)
    assert len(out) <= limit


def test_cited_ids_keeps_only_known_ids_in_first_citation_order():
    answer = "A [p2]. B [p1, p2]. C [nope]. D [p3; p1]. E [sic]."
    assert cited_ids(answer, ["p1", "p2", "p3"]) == ["p2", "p1", "p3"]


def test_cited_ids_matches_ids_that_contain_commas_whole():
    assert cited_ids("See [doc,7].", ["doc,7"]) == ["doc,7"]


def test_fit_passages_drops_tail_passages_beyond_the_budget():
    passages = [("a", "", "x" * 40), ("b", "", "y" * 40), ("c", "", "z" * 40)]
    fitted = fit_passages(passages, budget_chars=100)
    assert [p[0] for p in fitted.passages] == ["a", "b"]
    assert fitted.dropped == 1 and not fitted.clipped


def test_fit_passages_clips_a_single_oversized_first_passage():
    fitted = fit_passages([("a", "T", "x" * 500), ("b", "", "y")], budget_chars=100)
    assert [p[0] for p in fitted.passages] == ["a"]
    assert len(fitted.passages[0][1]) + len(fitted.passages[0][2]) == 100
    assert fitted.clipped and fitted.dropped == 1


def test_split_sentences_splits_on_terminal_punctuation_only():
    text = "Dr. Smith found 3.5 mg/dl. Levels rose! Why? (Nobody knows.) The end"
    assert split_sentences(text) == ["Dr.", "Smith found 3.5 mg/dl.", "Levels rose!", "Why?",
                                     "(Nobody knows.)", "The end"]


def test_extract_answer_quotes_best_sentences_first_with_their_ids_within_max_chars():
    pool = [("p1", "Low relevance sentence here."), ("p2", "Most relevant sentence here."),
            ("p1", "Second most relevant one.")]
    cos = np.array([0.3, 0.9, 0.6], dtype=np.float32)
    out = extract_answer(pool, cos, max_chars=200, style="concise")
    assert out.answer == ("Most relevant sentence here [p2]. Second most relevant one [p1]. "
                          "Low relevance sentence here [p1].")
    assert out.passage_ids == ("p2", "p1") and not out.truncated
    short = extract_answer(pool, cos, max_chars=70, style="concise")
    assert short.truncated and len(short.answer) <= 70
    assert short.answer.startswith("Most relevant sentence here [p2].")


def test_extract_answer_skips_unrelated_sentences_after_the_best_one():
    pool = [("p1", "Related sentence one."), ("p2", "Unrelated sentence two.")]
    out = extract_answer(pool, np.array([0.5, 0.05], dtype=np.float32), max_chars=500,
                         style="detailed")
    assert out.answer == "Related sentence one [p1]." and out.passage_ids == ("p1",)


def test_extract_answer_bullets_one_per_line():
    pool = [("a", "First point."), ("b", "Second point.")]
    out = extract_answer(pool, np.array([0.9, 0.8], dtype=np.float32), max_chars=500,
                         style="bullets")
    assert out.answer == "- First point [a].\n- Second point [b]."


def test_cosine_to_unit_matches_a_naive_loop():
    rng = np.random.default_rng(7)
    cands = rng.standard_normal((20, 8)).astype(np.float32)
    cands /= np.linalg.norm(cands, axis=1, keepdims=True)
    query = cands[3]
    got = cosine_to_unit(query, cands)
    want = [min(1.0, max(0.0, (float(np.dot(c, query)) + 1) / 2)) for c in cands]
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert got.dtype == np.float32 and abs(got[3] - 1.0) < 1e-6


def test_parse_scores_maps_0_10_to_unit_interval_in_candidate_order():
    content = '{"scores": [{"id": "b", "score": 2.5}, {"id": "a", "score": 10}, {"id": "x", "score": 1}]}'
    assert parse_scores(content, ["a", "b"]) == [1.0, 0.25]


@pytest.mark.parametrize("content,match", [
    ('{"scores": [{"id": "a", "score": 3}]}', "unscored: 'b'"),
    ('{"scores": [{"id": "a", "score": 11}, {"id": "b", "score": 1}]}', "less than or equal"),
    ('{"scores": "high"}', "scores"),
    ("nope", "not JSON"),
])
def test_parse_scores_rejects_incomplete_or_out_of_range_replies(content, match):
    with pytest.raises(UpstreamFailed, match=match):
        parse_scores(content, ["a", "b"])
