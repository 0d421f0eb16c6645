"""Query-adaptive fusion: what a query is (features from its text and its terms' rarity) and the
dense weight that follows, always inside the profile's bounds."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ranking.inputs import RankingConfig
from ranking.rank import query_dense_weight
from ranking.query_features import (
    ADAPTIVE_SPAN,
    QueryFeatures,
    adaptive_dense_weight,
    bm25_idf,
    dense_weight_bounds,
    lexical_pressure,
    query_features,
    quoted_phrases,
)
from shared.errors import InvalidArgument
from tests.unit.ranking.strategies import query_features as features_strategy

N = 10_000


@pytest.mark.parametrize("text,identifiers", [
    ("error E4471 on the dock", 1), ("IL-17A and p53 levels", 2), ("call get_user_id twice", 1),
    ("see v2.3/build#12", 1), ("parseHttpHeader fails", 1), ("battery controller reset.", 0),
    ("the 2024 budget", 0), ("Q3 report", 1),
])
def test_identifier_shaped_tokens_are_counted(text, identifiers):
    assert query_features(text).identifiers == identifiers


def test_quoted_phrases_need_two_words_and_both_quote_styles_count():
    assert quoted_phrases('find "connection reset by peer" or “disk full now” but not "E42"') == [
        "connection reset by peer", "disk full now"]
    assert query_features('"connection reset by peer"').quoted
    assert not query_features('"E42"').quoted


def test_rarity_is_the_rarest_held_terms_idf_relative_to_a_single_holder():
    assert query_features("x", [1, 500], N).rarity == pytest.approx(1.0)
    assert query_features("x", [500, 0], N).rarity == pytest.approx(bm25_idf(500, N) / bm25_idf(1, N))
    assert query_features("x", [0, 0], N).rarity == 0.0          # terms nobody holds match nothing
    assert query_features("x", [1], 0).rarity == 0.0             # no statistics


BASE = 0.6
LO, HI = dense_weight_bounds(BASE)


@pytest.mark.parametrize("text,dfs,expected", [
    ("XK4471", [1], LO),                                         # a bare identifier
    ('"connection reset by peer" after upgrade', [40, 300, 200], LO),   # a quoted phrase
    ("mangrove", [1], LO),                                       # one rare word
    ("what is the maximum robot speed in mixed zones with people around", [50] * 8, BASE),   # a question
    ("vitamin D deficiency is associated with higher mortality in older adults", [30] * 8, BASE),
])
def test_dense_weight_follows_what_the_query_is(text, dfs, expected):
    f = query_features(text, dfs, N)
    assert adaptive_dense_weight(f, BASE, (LO, HI)) == pytest.approx(expected)


def test_rare_ordinary_words_do_not_make_a_query_a_lookup():
    f = query_features("latest firmware update procedure", [40, 1, 30, 25], N)
    assert f.rarity == pytest.approx(1.0) and adaptive_dense_weight(f, BASE, (LO, HI)) == BASE


def test_a_rare_identifier_pulls_a_short_query_further_than_a_long_one():
    short = query_features("reset dock E4471 now", [300, 200, 1, 900], N)
    long = query_features("after the firmware update the dock shows E4471 every morning at startup", [9] * 11, N)
    assert adaptive_dense_weight(short, BASE, (LO, HI)) < adaptive_dense_weight(long, BASE, (LO, HI))


@settings(max_examples=300, deadline=None)
@given(f=features_strategy(), base=st.floats(0.0, 1.0))
def test_the_dense_weight_always_stays_within_the_bounds(f: QueryFeatures, base: float):
    lo, hi = dense_weight_bounds(base)
    assert hi == base and base - lo <= ADAPTIVE_SPAN + 1e-12
    assert lo <= adaptive_dense_weight(f, base, (lo, hi)) <= hi
    assert 0.0 <= lexical_pressure(f) <= 1.0


@settings(max_examples=200, deadline=None)
@given(f=features_strategy(), more=st.floats(0.0, 1.0))
def test_more_rarity_never_raises_the_dense_weight(f: QueryFeatures, more: float):
    rarer = QueryFeatures(f.words, f.quoted, f.identifiers, max(f.rarity, more))
    bounds = dense_weight_bounds(BASE)
    assert adaptive_dense_weight(rarer, BASE, bounds) <= adaptive_dense_weight(f, BASE, bounds) + 1e-12


def test_only_the_adaptive_fusion_adapts_and_bad_bounds_are_refused():
    f = query_features("XK4471", [1], N)
    assert query_dense_weight(RankingConfig(fusion="convex", dense_weight=BASE, query=f)) == BASE
    assert query_dense_weight(RankingConfig(fusion="adaptive", dense_weight=BASE, query=f)) == pytest.approx(LO)
    assert query_dense_weight(RankingConfig(fusion="adaptive", dense_weight=BASE)) == BASE
    with pytest.raises(InvalidArgument):
        adaptive_dense_weight(f, 0.9, (0.0, 0.5))
    with pytest.raises(InvalidArgument, match="query"):
        RankingConfig(fusion="adaptive", query="XK4471")


def test_features_are_described_for_explanations():
    assert query_features('"a b" E42?', [1], N).describe() == "words=3 quoted=1 identifiers=1 rarity=1.00"
