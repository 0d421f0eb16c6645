from __future__ import annotations

import math

import pytest

from ranking.inputs import DEFAULT_WEIGHTS, RankingConfig
from shared.errors import InvalidArgument


def test_default_config_is_valid_and_relevance_dominates() -> None:
    cfg = RankingConfig()
    assert cfg.weights == DEFAULT_WEIGHTS
    relevancy, *others = DEFAULT_WEIGHTS
    assert relevancy > 2 * sum(others)


@pytest.mark.parametrize("weights", [
    (1.0, 0.0, 0.0),
    (1.0, 0.0, 0.0, 0.0, 0.0),
    (-0.1, 0.5, 0.3, 0.3),
    (0.0, 0.0, 0.0, 0.0),
    (math.nan, 0.1, 0.1, 0.1),
    (math.inf, 0.1, 0.1, 0.1),
    ("a", 0.1, 0.1, 0.1),
    "1234",
    None,
])
def test_bad_weights_are_rejected_naming_the_field(weights: object) -> None:
    with pytest.raises(InvalidArgument) as err:
        RankingConfig(weights=weights)  # type: ignore[arg-type]
    assert err.value.field == "weights"
    assert str(err.value).startswith("weights: ")


def test_recency_only_weights_need_recency_applied() -> None:
    with pytest.raises(InvalidArgument) as err:
        RankingConfig(weights=(0.0, 1.0, 0.0, 0.0), apply_recency=False)
    assert err.value.field == "weights"
    assert RankingConfig(weights=(0.0, 1.0, 0.0, 0.0), apply_recency=True,
                         now_unix=1.7e9).weights[1] == 1.0


def test_weights_are_normalised_to_a_tuple_of_floats() -> None:
    cfg = RankingConfig(weights=[3, 1, 0, 1])  # type: ignore[arg-type]
    assert cfg.weights == (3.0, 1.0, 0.0, 1.0)
    assert all(type(w) is float for w in cfg.weights)


@pytest.mark.parametrize("field, value", [
    ("fusion", "borda"),
    ("dense_weight", 1.5),
    ("dense_weight", -0.1),
    ("rrf_k", -1.0),
    ("half_life_days", 0.0),
    ("half_life_days", math.nan),
    ("apply_recency", 1),
    ("now_unix", -1.0),
    ("default_reputation", 2.0),
    ("prior_strength", 0.0),
    ("rerank_weight", -0.5),
    ("dense_calibration", (0.8, 0.2)),
    ("dense_calibration", (0.1,)),
    ("dense_calibration", (-2.0, 0.5)),
    ("bm25_calibration", 0.0),
    ("bm25_calibration", "10"),
])
def test_bad_fields_are_rejected_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidArgument) as err:
        RankingConfig(**{field: value})
    assert err.value.field == field


def test_config_is_frozen() -> None:
    cfg = RankingConfig()
    with pytest.raises(AttributeError):
        cfg.fusion = "rrf"  # type: ignore[misc]
