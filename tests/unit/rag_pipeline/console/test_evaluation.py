"""RBO, nDCG, recall and the query-set reader of the console's comparisons."""
from __future__ import annotations

import json
import math
import random

import pytest

from services.rag_pipeline.console.evaluation import (MAX_QUERY_SET_BYTES, movements, ndcg_at, parse_query_set, rbo,
                                                      recall_at)
from shared.errors import InvalidArgument


def naive_rbo(a: list[str], b: list[str], p: float) -> float:
    """RBO_ext by the definitions: the overlap at each depth counted from sets (equal lengths)."""
    k = len(a)
    x = [len(set(a[:d]) & set(b[:d])) for d in range(1, k + 1)]
    return (x[-1] / k) * p ** k + (1 - p) / p * sum(x[d - 1] / d * p ** d for d in range(1, k + 1))


def test_rbo_matches_the_definition_on_random_rankings():
    rng = random.Random(7)
    for _ in range(200):
        items = [f"d{i}" for i in range(30)]
        k = rng.randint(1, 15)
        a, b = rng.sample(items, k), rng.sample(items, k)
        assert math.isclose(rbo(a, b, 0.9), naive_rbo(a, b, 0.9), abs_tol=1e-12)


def test_rbo_is_one_for_identical_and_zero_for_disjoint_rankings():
    assert rbo(list("abcdef"), list("abcdef")) == pytest.approx(1.0)
    assert rbo(list("abc"), list("xyz")) == 0.0
    assert rbo([], []) == 1.0 and rbo(["a"], []) == 0.0
    assert rbo(list("abc"), list("abcdef")) == pytest.approx(1.0)      # a prefix agrees as far as it goes
    assert 0.0 < rbo(list("abcd"), list("dcba")) < 1.0


def test_movements_mark_up_down_same_and_new():
    assert movements(list("abc"), list("cbx")) == [("up", 2), ("same", 0), ("new", 0)]
    assert movements(list("ab"), list("ba")) == [("up", 1), ("down", -1)]


def test_ndcg_and_recall_count_each_document_once():
    grades = {"a": 2.0, "b": 1.0, "z": 0.0}
    assert ndcg_at(["a", "b"], grades) == pytest.approx(1.0)
    assert ndcg_at(["b", "a"], grades) == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at(["a", "a", "x", "b"], grades) == ndcg_at(["a", "x", "b"], grades)
    assert recall_at(["x", "a"], grades) == 0.5 and recall_at(["x"], {"z": 0.0}) == 0.0
    assert ndcg_at([f"x{i}" for i in range(10)] + ["a"], {"a": 1.0}, k=10) == 0.0


def test_query_sets_with_lists_or_grades_are_read_and_bad_lines_named():
    data = b'{"query": "q1", "relevant": ["a", "b"]}\n\n{"query": " q2 ", "relevant": {"c": 2, "d": 0}}\n'
    got = parse_query_set(data)
    assert [(q.query, q.grades) for q in got] == [("q1", {"a": 1.0, "b": 1.0}), ("q2", {"c": 2.0, "d": 0.0})]
    for bad, where in ((b'{"query": "q"}\nnot json', "line 1"), (b'{"query": "", "relevant": []}', "line 1"),
                       (b'{"query": "q", "relevant": {"a": -1}}', "line 1"), (b"", "query_set"),
                       (b'{"query": "q", "relevant": []}\n[1]', "line 2"), (b"\xff\xfe", "query_set")):
        with pytest.raises(InvalidArgument, match=where):
            parse_query_set(bad)


def test_a_query_set_over_the_size_cap_is_refused():
    line = json.dumps({"query": "q" * 900, "relevant": ["a"]}).encode() + b"\n"
    with pytest.raises(InvalidArgument, match="bytes"):
        parse_query_set(line * (MAX_QUERY_SET_BYTES // len(line) + 1))
