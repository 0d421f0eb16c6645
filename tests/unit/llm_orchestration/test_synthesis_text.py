import math
import numpy as np
import pytest

from services.llm_orchestration.rerank import cosine_to_unit, parse_scores
from services.llm_orchestration.sentences import Unit, answer_units, bm25_scores, split_sentences, terms
from services.llm_orchestration.synthesis import (ELLIPSIS, EXTRACTIVE_BUDGET, EXTRACTIVE_SENTENCES, cited_ids,
                                                  extract_answer, fit_passages, truncate_text, unit_scores)
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


def _units(*texts_by_pid: tuple[str, str]) -> list[Unit]:
    return [Unit(pid, 0 if pid == "p1" else 1, i, text, text, text, "sentence")
            for i, (pid, text) in enumerate(texts_by_pid)]


def test_extract_answer_quotes_the_best_units_in_reading_order_with_their_ids():
    units = _units(("p1", "Low relevance sentence here."), ("p1", "Second most relevant one."),
                   ("p2", "Most relevant sentence here."))
    out = extract_answer(units, np.array([0.3, 0.6, 0.9], dtype=np.float32), max_chars=2_000, style="concise")
    assert out.answer == "Second most relevant one [p1]. Most relevant sentence here [p2]."
    assert out.passage_ids == ("p1", "p2") and not out.truncated


def test_extract_answer_stays_within_the_style_budget_and_max_chars():
    units = _units(*[("p1", f"Sentence number {i} says something rather long about the topic.") for i in range(20)])
    scores = np.linspace(1.0, 0.9, 20).astype(np.float32)
    concise = extract_answer(units, scores, max_chars=2_000, style="concise")
    assert len(concise.answer) <= EXTRACTIVE_BUDGET["concise"] and not concise.truncated
    assert concise.answer.count("[p1]") == EXTRACTIVE_SENTENCES["concise"]
    short = extract_answer(units, scores, max_chars=70, style="concise")
    assert short.truncated and len(short.answer) <= 70 and short.answer.startswith("Sentence number 0")


def test_extract_answer_skips_units_far_below_the_best():
    units = _units(("p1", "Related sentence one."), ("p2", "Unrelated sentence two."))
    out = extract_answer(units, np.array([0.8, 0.1], dtype=np.float32), max_chars=500, style="detailed")
    assert out.answer == "Related sentence one [p1]." and out.passage_ids == ("p1",)


def test_extract_answer_bullets_one_per_line():
    units = _units(("p1", "First point."), ("p2", "Second point."))
    out = extract_answer(units, np.array([0.9, 0.8], dtype=np.float32), max_chars=500, style="bullets")
    assert out.answer == "- First point [p1].\n- Second point [p2]."


def test_answer_units_split_table_rows_list_items_and_code_after_a_colon():
    text = ("An intro line. Second sentence here.\n\n## Before you start\n"
            "- The robot must run **4.2 or later**. Robots on 3.x need the bridge.\n"
            "2. Run a soft reset from the shell:\n   ```\n   pallasctl bms reset --soft\n   ```\n\n"
            "| Zone | Maximum speed |\n|------|------|\n| Mixed zone | 1.2 m/s |\n")
    units = answer_units([("S1", "Guide", text)])
    assert [u.text for u in units] == [
        "An intro line.", "Second sentence here.", "The robot must run 4.2 or later.",
        "Robots on 3.x need the bridge.", "Run a soft reset from the shell: pallasctl bms reset --soft",
        "Mixed zone | 1.2 m/s"]
    assert [u.kind for u in units][-1] == "row"
    assert units[2].context == "Guide: Before you start: The robot must run 4.2 or later."
    assert units[-1].terms_text == "Zone: Mixed zone; Maximum speed: 1.2 m/s"      # scored with its header


def test_answer_units_keep_a_table_that_starts_mid_passage_without_a_header():
    units = answer_units([("S1", "", "| Mixed zone | yes | 1.2 m/s |\n| Service mode | yes | 0.3 m/s |")])
    assert [u.text for u in units] == ["Mixed zone | yes | 1.2 m/s", "Service mode | yes | 0.3 m/s"]


def test_answer_units_join_a_question_with_its_answer_and_split_chat_lines():
    faq = "**When do I get paid?**\nApproved claims are paid with the next payroll run."
    chat = "[09:12] ann: the update bricks robots\n[09:13] bob: wait really"
    units = answer_units([("a", "FAQ", faq), ("b", "Chat", chat)])
    assert [u.text for u in units] == [
        "When do I get paid? Approved claims are paid with the next payroll run.",
        "[09:12] ann: the update bricks robots", "[09:13] bob: wait really"]
    assert units[0].kind == "qa" and [u.passage for u in units] == [0, 1, 1]


def test_bm25_scores_match_a_naive_okapi_formula():
    docs = ["robot firmware update", "battery charge robot robot", "travel policy", ""]
    got = bm25_scores("robots firmware", docs)
    tokenised = [terms(d) for d in docs]
    avg = sum(map(len, tokenised)) / len(docs)
    want = []
    for toks in tokenised:
        total = 0.0
        for t in set(terms("robots firmware")):
            df = sum(t in d for d in tokenised)
            if df:
                tf = toks.count(t)
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                total += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(toks) / avg))
        want.append(total)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got[0] > got[1] > got[2] == 0


def test_unit_scores_prefer_lexical_matches_earlier_passages_and_complete_units():
    units = [Unit("S1", 0, 0, "The robot must run 4.2 or later.", "x", "The robot must run 4.2 or later.", "item"),
             Unit("S2", 1, 0, "Travel is booked in Expensa.", "x", "Travel is booked in Expensa.", "sentence"),
             Unit("S2", 1, 1, "Before updating the robot:", "x", "Before updating the robot:", "sentence")]
    cos = np.array([0.5, 0.5, 0.5], dtype=np.float32)
    scores = unit_scores("which version must the robot run", units, cos)
    assert scores[0] > scores[1] and scores[0] > scores[2]
    same = unit_scores("zzz", units, cos)           # no lexical match: the passage prior and the penalty decide
    assert same[0] > same[1] > same[2]


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
