"""The learned re-ranker's features: ONE versioned definition, vectorised over n candidates.

A model is trained against a `FEATURE_VERSION`; a model of another version is not used (the
ranking falls back to the untrained fusion). Change a feature's meaning or order → bump it.

Inputs (`FeatureInputs`) are per candidate and per field, the fields being FIELDS =
(title, body, doc): the title, the chunk body, and the whole document (title + body, the
field the keyword leg scores). Query terms are the analysed terms of the query (t of them,
in query order, distinct) with their idf, ln(1 + (N − df + ½)/(df + ½)) — the keyword index's.

    per field f (title, body, doc)
      bm25_f          Okapi BM25 (k1 1.2, b 0.75) of the query terms in f, f's own length
                      and average length, the doc-level idf
      cover_f         share of the query terms that occur in f
      idf_cover_f     Σ idf of the terms that occur in f / Σ idf of all query terms
    dense_title       cosine(query, stored title vector)   (titles are embedded at ingest)
    dense_doc         cosine(query, chunk / document vector) — the dense leg's score
    min_window        shortest run of body positions holding every query term the body holds,
                      divided by how many distinct terms that is (1 = adjacent); NaN when the
                      body holds fewer than two distinct query terms
    phrase_body, phrase_title   adjacent query-term pairs (in query order) found adjacent in
                      the field (analysed term stream), divided by t − 1; NaN when t < 2
    fused             today's fused score in [0, 1] (the residual's base)
    dense_rank, bm25_rank       1-based rank in each leg, log2(1 + rank); NaN when absent
    dense_gap, bm25_gap         best score of the leg in this query − this candidate's score
                      (bm25 as a share of the best); NaN when absent
    chunk_position    0-based position of the chunk in its document (log2(1 + p))
    length            log2(1 + body terms)
    richness, recency, reputation   the 4R side factors, [0, 1]
    dense_absent, bm25_absent       1 where the leg's score is missing (a federated hit, a
                      failed leg), else 0
    query_terms       log2(1 + t)

No per-document learned features (no ids, no memorised titles). Missing values are NaN and
stay NaN: the tree evaluation (ranking/trees.py) sends them the way the model learned.
A field that is unknown for a candidate (a federated hit has no title statistics) is given as
NaN rows and every feature of that field is NaN.

Term positions for min_window and phrase hits come as `(n, L)` int32 matrices: the index of the
query term at each position of the field's analysed stream, −1 for any other term, padded with
−1 (at most MAX_POSITIONS positions are read).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shared.errors import InvalidArgument

FEATURE_VERSION = 1
FIELDS = ("title", "body", "doc")
K1 = 1.2
B = 0.75
MAX_POSITIONS = 512

FEATURE_NAMES: tuple[str, ...] = (
    *(f"{kind}_{field}" for field in FIELDS for kind in ("bm25", "cover", "idf_cover")),
    "dense_title", "dense_doc", "min_window", "phrase_body", "phrase_title", "fused",
    "dense_rank", "bm25_rank", "dense_gap", "bm25_gap", "chunk_position", "length",
    "richness", "recency", "reputation", "dense_absent", "bm25_absent", "query_terms",
)

#: +1: the score may only rise with the feature; −1: only fall; 0: either (LightGBM's
#: monotone constraints, in FEATURE_NAMES order). Set where the direction is known.
#: The falling ones are named first: "bm25_rank" and "bm25_gap" share the "bm25_" prefix of the
#: per-field BM25 scores, and the absent flags have no known direction.
_FALLING = ("min_window", "dense_rank", "bm25_rank", "dense_gap", "bm25_gap")
_FREE = ("dense_absent", "bm25_absent")
MONOTONE: tuple[int, ...] = tuple(
    -1 if name in _FALLING
    else 0 if name in _FREE
    else 1 if name.startswith(("bm25_", "cover_", "idf_cover_", "dense_title", "dense_doc", "phrase_", "fused"))
    else 0
    for name in FEATURE_NAMES
)

_F32 = np.float32


@dataclass(frozen=True, slots=True)
class FieldTerms:
    """One field of n candidates: term frequencies of the t query terms and lengths."""

    tf: NDArray[np.float32]        # (n, t); NaN rows = field unknown for that candidate
    length: NDArray[np.float32]    # (n,) analysed terms in the field; NaN = unknown
    avg_length: float              # over the tenant's entries (> 0)


@dataclass(frozen=True, slots=True)
class FeatureInputs:
    idf: NDArray[np.float32]               # (t,)
    title: FieldTerms
    body: FieldTerms
    doc: FieldTerms
    body_positions: NDArray[np.int32]      # (n, L) query-term index per position, −1 otherwise
    title_positions: NDArray[np.int32]     # (n, L')
    dense_title: NDArray[np.float32]       # (n,) NaN = no title vector
    dense: NDArray[np.float32]             # (n,) NaN = dense leg absent
    bm25: NDArray[np.float32]              # (n,) the keyword leg's score; NaN = absent
    dense_rank: NDArray[np.int32]          # (n,) 0 = absent
    bm25_rank: NDArray[np.int32]
    fused: NDArray[np.float32]             # (n,) in [0, 1]
    chunk_position: NDArray[np.float32]    # (n,) NaN = unknown
    richness: NDArray[np.float32]
    recency: NDArray[np.float32]
    reputation: NDArray[np.float32]

    def __post_init__(self) -> None:
        n = self.dense.shape[0]
        t = self.idf.shape[0]
        for name in ("title", "body", "doc"):
            f = getattr(self, name)
            if f.tf.shape != (n, t) or f.length.shape != (n,):
                raise InvalidArgument(name, f"expected tf ({n}, {t}) and length ({n},), got "
                                            f"{f.tf.shape} and {f.length.shape}")
            if not f.avg_length > 0:
                raise InvalidArgument(f"{name}.avg_length", f"must be > 0, got {f.avg_length}")
        for name in ("dense_title", "bm25", "dense_rank", "bm25_rank", "fused", "chunk_position",
                     "richness", "recency", "reputation"):
            if getattr(self, name).shape != (n,):
                raise InvalidArgument(name, f"expected {n} values like dense, got {getattr(self, name).shape}")
        for name in ("body_positions", "title_positions"):
            pos = getattr(self, name)
            if pos.ndim != 2 or pos.shape[0] != n:
                raise InvalidArgument(name, f"expected an (n={n}, L) matrix, got {pos.shape}")
            if pos.size and (pos.min() < -1 or pos.max() >= t):
                raise InvalidArgument(name, f"entries must be a query-term index in [0, {t}) or -1")


def bm25(f: FieldTerms, idf: NDArray[np.float32]) -> NDArray[np.float32]:
    """Okapi BM25 of the field per candidate; NaN where the field is unknown."""
    norm = K1 * (1.0 - B + B * (f.length / np.float32(f.avg_length)))
    per_term = f.tf * (K1 + 1.0) / (f.tf + norm[:, None])
    return (per_term @ idf).astype(_F32)


def coverage(f: FieldTerms, idf: NDArray[np.float32]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """(share of query terms held, idf-weighted share) per candidate; NaN where unknown."""
    t = idf.shape[0]
    unknown = np.isnan(f.tf).any(axis=1)
    held = (np.nan_to_num(f.tf) > 0).astype(_F32)
    cover = held.sum(axis=1) / np.float32(max(t, 1))
    total = float(idf.sum())
    idf_cover = (held @ idf) / np.float32(total) if total > 0 else np.zeros_like(cover)
    cover[unknown] = np.nan
    idf_cover = idf_cover.astype(_F32)
    idf_cover[unknown] = np.nan
    return cover.astype(_F32), idf_cover


def min_window(positions: NDArray[np.int32], t: int) -> NDArray[np.float32]:
    """Shortest span holding every distinct query term the row holds, / that count (≥ 1); NaN
    below two distinct terms. Vectorised over the hits only: each row's hit positions in order
    (padded to the most hits of a row), the last-seen position of every term at each hit, and
    the window ending at each hit starts at the oldest of those."""
    pos = positions[:, :MAX_POSITIONS]
    n, length = pos.shape
    out = np.full(n, np.nan, dtype=_F32)
    if n == 0 or t < 2 or length == 0:
        return out
    hit = pos >= 0
    counts = hit.sum(axis=1)
    most = int(counts.max())
    if most < 2:
        return out
    rows, cols = np.nonzero(hit)                                                      # row-major: in order
    slot = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    where = np.full((n, most), -1, dtype=np.int64)                                    # (n, H) positions
    term = np.full((n, most), -1, dtype=np.int32)                                     # (n, H) term index
    where[rows, slot] = cols
    term[rows, slot] = pos[rows, cols]
    valid = term >= 0
    seen = term[:, :, None] == np.arange(t, dtype=np.int32)[None, None, :]           # (n, H, t)
    last = np.maximum.accumulate(np.where(seen, where[:, :, None], -1), axis=1)      # last position of each term
    held = seen.any(axis=1)                                                           # (n, t)
    big = np.int64(length + 1)
    start = np.where(held[:, None, :], last, big).min(axis=2)                        # (n, H)
    complete = np.where(held[:, None, :], last >= 0, True).all(axis=2) & valid
    span = np.where(complete, where - start + 1, big).min(axis=1)
    distinct = held.sum(axis=1)
    ok = distinct >= 2
    out[ok] = span[ok].astype(_F32) / distinct[ok].astype(_F32)
    return out


def phrase_hits(positions: NDArray[np.int32], t: int) -> NDArray[np.float32]:
    """Adjacent query-term pairs (i, i + 1) found adjacent, / (t − 1); NaN when t < 2."""
    n = positions.shape[0]
    if t < 2:
        return np.full(n, np.nan, dtype=_F32)
    pos = positions[:, :MAX_POSITIONS]
    if pos.shape[1] < 2:
        return np.zeros(n, dtype=_F32)
    a, b = pos[:, :-1], pos[:, 1:]
    pair = (a >= 0) & (b == a + 1)
    return (pair.sum(axis=1) / np.float32(t - 1)).astype(_F32)


def leg_features(score: NDArray[np.float32], ranks: NDArray[np.int32], relative: bool
                 ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """(rank, gap) of one leg: log2(1 + rank) and the best score of these rows − each one's (a
    share of the best when `relative`); NaN where the leg is absent."""
    absent = np.isnan(score)
    rank = np.log2(1.0 + ranks.astype(_F32)).astype(_F32)
    rank[absent | (ranks <= 0)] = np.nan
    if absent.all():
        return rank, np.full(score.shape, np.nan, dtype=_F32)
    best = np.float32(np.nanmax(score))
    gap = best - score
    if relative:
        gap = gap / best if best > 0 else np.zeros_like(gap)
    return rank, gap.astype(_F32)


def features(x: FeatureInputs) -> NDArray[np.float32]:
    """The (n, len(FEATURE_NAMES)) float32 feature matrix, NaN = missing."""
    t = x.idf.shape[0]
    n = x.dense.shape[0]
    columns: list[NDArray[np.float32]] = []
    for field in (x.title, x.body, x.doc):
        cover, idf_cover = coverage(field, x.idf)
        columns += [bm25(field, x.idf), cover, idf_cover]
    dense_rank, dense_gap = leg_features(x.dense, x.dense_rank, relative=False)
    bm25_rank, bm25_gap = leg_features(x.bm25, x.bm25_rank, relative=True)
    columns += [x.dense_title, x.dense, min_window(x.body_positions, t), phrase_hits(x.body_positions, t),
                phrase_hits(x.title_positions, t), x.fused, dense_rank, bm25_rank, dense_gap, bm25_gap,
                np.log2(1.0 + x.chunk_position), np.log2(1.0 + x.body.length), x.richness, x.recency,
                x.reputation, np.isnan(x.dense).astype(_F32), np.isnan(x.bm25).astype(_F32),
                np.full(n, np.log2(1.0 + t), dtype=_F32)]
    out = np.empty((n, len(FEATURE_NAMES)), dtype=_F32)
    for i, column in enumerate(columns):
        out[:, i] = column
    return out
