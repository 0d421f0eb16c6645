"""Merging with score completion, against a naive loop: every candidate of either leg gets the
store's completed signals, pooled per artifact as the best chunk's; retrieval ranks stay the
legs'; "absent" is left only where nothing could be computed."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.rag_pipeline.merge import merge, ranking_candidates
from shared.records import CandidateColumns, ScoreCompletion

ENTRIES = [(f"a{a}#{c}", f"a{a}", 100 + 10 * a + c) for a in range(6) for c in range(3)]   # id, artifact, row


def columns(rows: list[tuple[str, str, int]], scores: list[float]) -> CandidateColumns:
    return CandidateColumns.from_rows([(e, a, 0, 0.5, 0.0, 0, 0) for e, a, _ in rows], scores,
                                      row_ids=[r for _, _, r in rows])


@st.composite
def legs(draw):
    """Dense leg (1-3 phrases), keyword leg and a completion over (most of) their union."""
    def leg(lo: float, hi: float):
        picked = draw(st.lists(st.sampled_from(ENTRIES), unique=True, max_size=8))
        scores = sorted(draw(st.lists(st.floats(lo, hi, width=32), min_size=len(picked), max_size=len(picked))),
                        reverse=True)
        return picked, scores

    dense = [leg(-1.0, 1.0) for _ in range(draw(st.integers(1, 3)))]
    keyword = leg(0.0, 30.0)
    union = sorted({r for rows, _ in dense + [keyword] for _, _, r in rows})
    known = [r for r in union if draw(st.booleans()) or draw(st.booleans())]     # some rows not completed
    value = st.one_of(st.just(math.nan), st.floats(-1.0, 1.0, width=32))
    completion = ScoreCompletion(
        row_ids=np.asarray(known, np.int64),
        dense=np.asarray(draw(st.lists(value, min_size=len(known), max_size=len(known))), np.float32),
        bm25=np.asarray(draw(st.lists(st.one_of(st.just(math.nan), st.floats(0.0, 30.0, width=32)),
                                      min_size=len(known), max_size=len(known))), np.float32))
    return dense, keyword, completion


def naive(dense, keyword, completion, collapse: bool) -> dict[str, tuple[float, float, int, int]]:
    """{entry or artifact: (dense, bm25, dense rank, bm25 rank)}, NaN = absent, rank 0 = not retrieved."""
    per_entry: dict[str, list] = {}
    rows: dict[str, int] = {}
    for phrase_rows, scores in dense:
        for rank_, ((e, _, r), s) in enumerate(zip(phrase_rows, scores), start=1):
            v = per_entry.setdefault(e, [math.nan, math.nan, 0, 0])
            v[0] = float(np.float32(s)) if math.isnan(v[0]) else max(v[0], float(np.float32(s)))
            v[2] = rank_ if v[2] == 0 else min(v[2], rank_)
            rows[e] = r
    for rank_, ((e, _, r), s) in enumerate(zip(*keyword), start=1):
        v = per_entry.setdefault(e, [math.nan, math.nan, 0, 0])
        v[1], v[3] = float(np.float32(s)), rank_
        rows[e] = r
    done = {int(r): (float(d), float(b)) for r, d, b in zip(completion.row_ids, completion.dense, completion.bm25)}
    for e, v in per_entry.items():
        d, b = done.get(rows[e], (math.nan, math.nan))
        v[0] = v[0] if math.isnan(d) else d
        v[1] = v[1] if math.isnan(b) else b
    if not collapse:
        return {e: tuple(v) for e, v in per_entry.items()}
    pooled: dict[str, list] = {}
    for e, v in per_entry.items():
        p = pooled.setdefault(e.split("#")[0], [math.nan, math.nan, 0, 0])
        for i in (0, 1):
            if not math.isnan(v[i]) and (math.isnan(p[i]) or v[i] > p[i]):
                p[i] = v[i]
        for i in (2, 3):
            if v[i]:
                p[i] = v[i] if p[i] == 0 else min(p[i], v[i])
    return {a: tuple(v) for a, v in pooled.items()}


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=100, deadline=None)          # Hypothesis's default: most of the time is drawing the legs
@given(data=legs(), collapse=st.booleans())
def test_merge_with_completion_matches_a_naive_loop(data, collapse):
    dense, keyword, completion = data
    merged = merge([columns(r, s) for r, s in dense], columns(*keyword), collapse=collapse, completion=completion)
    expected = naive(dense, keyword, completion, collapse)
    got = {(m.artifact_id if collapse else m.entry_id): m for m in merged}
    assert set(got) == set(expected)
    for key, (d, b, dr, br) in expected.items():
        m = got[key]
        assert same(m.dense, d) and same(m.bm25, b), key
        assert (m.dense_rank, m.bm25_rank) == (dr, br), key
        assert m.source("dense") == ("absent" if math.isnan(d) else "retrieved" if dr else "completed")
        assert m.source("bm25") == ("absent" if math.isnan(b) else "retrieved" if br else "completed")
    cands = ranking_candidates(merged)          # valid columns: ranks derived from the completed scores
    assert ((cands.dense_rank == 0) == np.isnan(cands.dense)).all()
    assert ((cands.bm25_rank == 0) == np.isnan(cands.bm25)).all()


def test_a_candidate_only_the_keyword_leg_found_gets_its_real_cosine_not_zero():
    dense = [columns([ENTRIES[0], ENTRIES[3]], [0.8, 0.6])]
    keyword = columns([ENTRIES[6]], [12.0])
    completion = ScoreCompletion(np.asarray([100, 110, 120], np.int64), np.asarray([0.8, 0.6, 0.55], np.float32),
                                 np.asarray([0.0, 1.5, 12.0], np.float32))
    by_id = {m.entry_id: m for m in merge(dense, keyword, collapse=False, completion=completion)}
    needle = by_id[ENTRIES[6][0]]
    assert (needle.dense, needle.bm25) == (np.float32(0.55), 12.0)
    assert (needle.source("dense"), needle.source("bm25")) == ("completed", "retrieved")
    assert by_id[ENTRIES[0][0]].bm25 == 0.0 and by_id[ENTRIES[0][0]].source("bm25") == "completed"
    without = {m.entry_id: m for m in merge(dense, keyword, collapse=False)}
    assert math.isnan(without[ENTRIES[6][0]].dense) and without[ENTRIES[6][0]].source("dense") == "absent"
