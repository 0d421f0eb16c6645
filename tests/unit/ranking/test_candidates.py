from __future__ import annotations

import math

import numpy as np
import pytest

from ranking.inputs import Candidates, ranks_from_scores
from shared.errors import InvalidArgument


def test_build_converts_lists_to_the_column_dtypes() -> None:
    c = Candidates.build(dense=[0.5, math.nan], bm25=[1, 2], timestamp=[1_700_000_000, 0],
                         richness=[0.1, 0.9], reputation_prior=[0, 1], helpful=[1.0, 2.0],
                         unhelpful=np.array([0, 3], dtype=np.int64), rerank=[math.nan, 0.5])
    assert len(c) == 2
    for name, dtype in [("dense", np.float32), ("bm25", np.float32), ("dense_rank", np.int32),
                        ("bm25_rank", np.int32), ("timestamp", np.float64),
                        ("richness", np.float32), ("reputation_prior", np.float32),
                        ("helpful", np.int32), ("unhelpful", np.int32), ("rerank", np.float32)]:
        column = getattr(c, name)
        assert column.dtype == dtype and column.shape == (2,), name
    assert c.timestamp[0] == 1_700_000_000.0  # float64 keeps whole seconds


def test_build_fills_omitted_columns_with_neutral_values() -> None:
    c = Candidates.build(bm25=[3.0, 1.0])
    assert np.isnan(c.dense).all() and np.isnan(c.rerank).all()
    np.testing.assert_array_equal(c.dense_rank, [0, 0])
    np.testing.assert_array_equal(c.bm25_rank, [1, 2])
    np.testing.assert_array_equal(c.timestamp, [0.0, 0.0])
    np.testing.assert_array_equal(c.richness, [0.5, 0.5])
    np.testing.assert_array_equal(c.reputation_prior, [0.0, 0.0])
    np.testing.assert_array_equal(c.helpful + c.unhelpful, [0, 0])


def test_derived_ranks_follow_descending_scores_with_ties_to_the_lower_row() -> None:
    ranks = ranks_from_scores(np.array([0.2, math.nan, 0.9, 0.2, 0.5], dtype=np.float32))
    np.testing.assert_array_equal(ranks, [3, 0, 1, 4, 2])


def test_build_rejects_a_column_of_another_length_naming_it() -> None:
    with pytest.raises(InvalidArgument) as err:
        Candidates.build(dense=[0.1, 0.2], bm25=[1.0, 2.0], richness=[0.5])
    assert err.value.field == "richness"
    assert "expected 2 values" in str(err.value)


@pytest.mark.parametrize("field, values", [
    ("dense", ["a", "b"]),
    ("dense", [[0.1], [0.2]]),
    ("helpful", [1.5, 2.0]),
    ("helpful", [2**40, 0]),
    ("dense", [1.5, 0.0]),
    ("bm25", [-1.0, 0.0]),
    ("bm25", [math.inf, 0.0]),
    ("rerank", [1.2, math.nan]),
    ("timestamp", [-5.0, 0.0]),
    ("timestamp", [math.nan, 0.0]),
    ("richness", [math.nan, 0.5]),
    ("reputation_prior", [1.1, 0.5]),
    ("unhelpful", [-1, 0]),
])
def test_build_rejects_bad_values_naming_the_column(field: str, values: list) -> None:
    columns = {"dense": [0.1, 0.2], field: values}
    with pytest.raises(InvalidArgument) as err:
        Candidates.build(**columns)
    assert err.value.field == field


def test_ranks_must_be_zero_exactly_where_the_leg_is_absent() -> None:
    with pytest.raises(InvalidArgument) as err:
        Candidates.build(dense=[0.5, math.nan], dense_rank=[1, 2])
    assert err.value.field == "dense_rank"
    with pytest.raises(InvalidArgument) as err:
        Candidates.build(bm25=[1.0, 2.0], bm25_rank=[1, 0])
    assert err.value.field == "bm25_rank"


def test_build_needs_at_least_one_column() -> None:
    with pytest.raises(InvalidArgument):
        Candidates.build()


def test_direct_construction_validates_dtypes_naming_the_column() -> None:
    good = Candidates.build(dense=[0.1, 0.2])
    columns = {name: getattr(good, name) for name in Candidates.__dataclass_fields__}
    columns["bm25"] = columns["bm25"].astype(np.float64)
    with pytest.raises(InvalidArgument) as err:
        Candidates(**columns)
    assert err.value.field == "bm25"


def test_candidates_are_frozen() -> None:
    c = Candidates.build(dense=[0.1])
    with pytest.raises(AttributeError):
        c.dense = np.zeros(1, np.float32)  # type: ignore[misc]


def test_with_rerank_swaps_the_rerank_column_alone_and_checks_it_naming_the_column():
    c = Candidates.build(dense=[0.5, 0.1, np.nan], bm25=[1.0, np.nan, 2.0])
    column = np.array([0.25, np.nan, 1.0], dtype=np.float32)
    swapped = c.with_rerank(column)
    assert swapped.rerank is column and swapped.dense is c.dense and np.isnan(c.rerank).all()
    for bad in (np.array([0.5, 1.5, np.nan], dtype=np.float32), np.array([0.5, 0.5], dtype=np.float32),
                np.array([0.5, 0.5, 0.5])):
        with pytest.raises(InvalidArgument, match="rerank"):
            c.with_rerank(bad)
