"""The columnar input of `rank()`: n merged retrieval candidates, one array per column.

The RAG pipeline merges the dense-vector leg and the BM25 leg into one row per candidate
and hands the columns over as a `Candidates`. Every instance is validated when it is made
(directly or through `Candidates.build`), so the ranking core can trust it:

    column            dtype    accepted values
    dense             float32  cosine in [-1, 1] (1e-3 slack for rounding); NaN = dense leg absent
    bm25              float32  raw BM25 >= 0; NaN = keyword leg absent
    dense_rank        int32    1-based rank in the dense leg; 0 exactly where dense is NaN
    bm25_rank         int32    1-based rank in the keyword leg; 0 exactly where bm25 is NaN
    timestamp         float64  unix seconds >= 0; 0 = unknown
    richness          float32  [0, 1]
    reputation_prior  float32  [0, 1]; 0 = unknown (RankingConfig.default_reputation is used)
    helpful           int32    >= 0 helpful votes for the artifact
    unhelpful         int32    >= 0 unhelpful votes
    rerank            float32  [0, 1]; NaN = not re-ranked

A violation raises `InvalidArgument(column, problem)`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shared.errors import InvalidArgument

#: Slack on |cosine| <= 1: normalised float32 embeddings can give 1.0000001.
COSINE_SLACK = 1e-3

_DTYPES: dict[str, type[np.generic]] = {
    "dense": np.float32,
    "bm25": np.float32,
    "dense_rank": np.int32,
    "bm25_rank": np.int32,
    "timestamp": np.float64,
    "richness": np.float32,
    "reputation_prior": np.float32,
    "helpful": np.int32,
    "unhelpful": np.int32,
    "rerank": np.float32,
}

#: Value of a column `Candidates.build` fills in when it is not given (ranks: see build).
_BUILD_DEFAULTS: dict[str, float] = {
    "dense": np.nan,
    "bm25": np.nan,
    "timestamp": 0.0,
    "richness": 0.5,
    "reputation_prior": 0.0,
    "helpful": 0,
    "unhelpful": 0,
    "rerank": np.nan,
}

_I32 = np.iinfo(np.int32)


@dataclass(frozen=True, slots=True)
class Candidates:
    """n retrieval candidates, columnar. See the module docstring for each column."""

    dense: NDArray[np.float32]
    bm25: NDArray[np.float32]
    dense_rank: NDArray[np.int32]
    bm25_rank: NDArray[np.int32]
    timestamp: NDArray[np.float64]
    richness: NDArray[np.float32]
    reputation_prior: NDArray[np.float32]
    helpful: NDArray[np.int32]
    unhelpful: NDArray[np.int32]
    rerank: NDArray[np.float32]

    def __post_init__(self) -> None:
        n: int | None = None
        for f in fields(self):
            column = getattr(self, f.name)
            dtype = np.dtype(_DTYPES[f.name])
            if not isinstance(column, np.ndarray) or column.dtype != dtype or column.ndim != 1:
                got = (f"{column.dtype} array of shape {column.shape}"
                       if isinstance(column, np.ndarray) else type(column).__name__)
                raise InvalidArgument(
                    f.name, f"expected a 1-D {dtype} array (use Candidates.build), got {got}")
            if n is None:
                n = column.shape[0]
            elif column.shape[0] != n:
                raise InvalidArgument(
                    f.name, f"expected {n} values like dense, got {column.shape[0]}")
        _check_values(self)

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    def with_rerank(self, rerank: NDArray[np.float32]) -> Candidates:
        """These candidates with another `rerank` column, only that column checked (the others
        were when these were made): a tenth of what `dataclasses.replace` costs at n = 150."""
        if not isinstance(rerank, np.ndarray) or rerank.dtype != np.float32 or rerank.shape != self.dense.shape:
            got = f"{rerank.dtype} array of shape {rerank.shape}" if isinstance(rerank, np.ndarray) else type(rerank)
            raise InvalidArgument("rerank", f"expected a 1-D float32 array of {len(self)} values, got {got}")
        with np.errstate(invalid="ignore"):
            if np.any(rerank < 0.0) or np.any(rerank > 1.0):
                raise InvalidArgument("rerank", "scores must be in [0, 1] or NaN (not re-ranked)")
        out = object.__new__(Candidates)
        for f in fields(Candidates):
            object.__setattr__(out, f.name, rerank if f.name == "rerank" else getattr(self, f.name))
        return out

    @classmethod
    def build(
        cls,
        *,
        dense: Sequence[float] | NDArray[Any] | None = None,
        bm25: Sequence[float] | NDArray[Any] | None = None,
        dense_rank: Sequence[int] | NDArray[Any] | None = None,
        bm25_rank: Sequence[int] | NDArray[Any] | None = None,
        timestamp: Sequence[float] | NDArray[Any] | None = None,
        richness: Sequence[float] | NDArray[Any] | None = None,
        reputation_prior: Sequence[float] | NDArray[Any] | None = None,
        helpful: Sequence[int] | NDArray[Any] | None = None,
        unhelpful: Sequence[int] | NDArray[Any] | None = None,
        rerank: Sequence[float] | NDArray[Any] | None = None,
    ) -> Candidates:
        """Convert sequences (lists, arrays of any numeric dtype) to validated columns.

        Omitted columns take neutral values: dense, bm25 and rerank NaN (absent), timestamp 0
        (unknown), richness 0.5, reputation_prior 0 (unknown), no votes. An omitted rank
        column is derived from its scores: 1-based by descending score, ties to the lower
        row, 0 where the score is NaN. At least one column must be given (it sets n); a
        column of another length raises InvalidArgument naming it. An array that already
        has its column's dtype is used as is, not copied (do not modify it afterwards).
        """
        given = {
            "dense": dense, "bm25": bm25, "dense_rank": dense_rank, "bm25_rank": bm25_rank,
            "timestamp": timestamp, "richness": richness,
            "reputation_prior": reputation_prior, "helpful": helpful, "unhelpful": unhelpful,
            "rerank": rerank,
        }
        columns: dict[str, NDArray[Any]] = {}
        n: int | None = None
        first = ""
        for name, values in given.items():
            if values is None:
                continue
            column = _convert(name, values)
            if n is None:
                n, first = column.shape[0], name
            elif column.shape[0] != n:
                raise InvalidArgument(
                    name, f"expected {n} values like {first}, got {column.shape[0]}")
            columns[name] = column
        if n is None:
            raise InvalidArgument("candidates", "give at least one column (e.g. dense or bm25)")
        for name, fill in _BUILD_DEFAULTS.items():
            if name not in columns:
                columns[name] = np.full(n, fill, dtype=_DTYPES[name])
        for rank_name, score_name in (("dense_rank", "dense"), ("bm25_rank", "bm25")):
            if rank_name not in columns:
                columns[rank_name] = ranks_from_scores(columns[score_name])
        return cls(**columns)


def ranks_from_scores(scores: NDArray[np.floating]) -> NDArray[np.int32]:
    """1-based ranks by descending score (ties → lower row first); 0 where score is NaN."""
    present = ~np.isnan(scores)
    rows = np.flatnonzero(present)
    order = rows[np.argsort(-scores[rows], kind="stable")]
    ranks = np.zeros(scores.shape[0], dtype=np.int32)
    ranks[order] = np.arange(1, order.shape[0] + 1, dtype=np.int32)
    return ranks


def _convert(name: str, values: object) -> NDArray[Any]:
    """`values` as a 1-D array of the column's dtype, or InvalidArgument naming the column."""
    dtype = np.dtype(_DTYPES[name])
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(name, f"expected a 1-D sequence of numbers ({err})") from None
    if raw.ndim != 1:
        raise InvalidArgument(name, f"expected a 1-D sequence, got shape {raw.shape}")
    if raw.shape[0] == 0:
        return np.empty(0, dtype=dtype)
    if raw.dtype.kind not in "biuf":
        raise InvalidArgument(name, f"expected numbers, got {raw.dtype} values")
    if dtype.kind == "i":
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
                raise InvalidArgument(name, "expected whole numbers")
        if raw.size and (raw.min() < _I32.min or raw.max() > _I32.max):
            raise InvalidArgument(name, "values out of int32 range")
    return raw.astype(dtype, copy=False)


def _check_values(c: Candidates) -> None:
    """The value rules of the module docstring; raise InvalidArgument on the first breach."""
    n = c.dense.shape[0]
    if n == 0:
        return

    with np.errstate(invalid="ignore"):
        if np.any(np.abs(c.dense) > 1.0 + COSINE_SLACK) or np.any(np.isinf(c.dense)):
            raise InvalidArgument("dense", "cosines must be in [-1, 1] or NaN (absent)")
        if np.any(c.bm25 < 0.0) or np.any(np.isinf(c.bm25)):
            raise InvalidArgument("bm25", "scores must be finite and >= 0, or NaN (absent)")
        if np.any(c.rerank < 0.0) or np.any(c.rerank > 1.0):
            raise InvalidArgument("rerank", "scores must be in [0, 1] or NaN (not re-ranked)")

    for rank_name, score_name, scores in (("dense_rank", "dense", c.dense),
                                          ("bm25_rank", "bm25", c.bm25)):
        ranks = getattr(c, rank_name)
        if np.any(ranks < 0):
            raise InvalidArgument(rank_name, "ranks must be >= 1, or 0 where the leg is absent")
        if np.any((ranks == 0) != np.isnan(scores)):
            raise InvalidArgument(
                rank_name, f"must be 0 exactly where {score_name} is NaN (leg absent)")

    if not np.all(np.isfinite(c.timestamp)) or np.any(c.timestamp < 0.0):
        raise InvalidArgument("timestamp", "must be finite unix seconds >= 0 (0 = unknown)")
    for name in ("richness", "reputation_prior"):
        column = getattr(c, name)
        if not np.all((column >= 0.0) & (column <= 1.0)):  # also rejects NaN
            raise InvalidArgument(name, "must be in [0, 1]")
    for name in ("helpful", "unhelpful"):
        if np.any(getattr(c, name) < 0):
            raise InvalidArgument(name, "vote counts must be >= 0")
