"""GetFieldSignals, the same for every backend: what the store holds per field for n of its
entries and one query (shared/records.py FieldSignals), the learned re-ranker's per-field inputs
(ranking/features.py), computed from what ingest stored — never from raw text.

    query        analysed as the keyword leg analyses it (shared.analysis.query_terms: distinct
                 terms, in query order); idf ln(1 + (N − df + ½)/(df + ½)) from the keyword
                 index's N and df over live entries (`StoreBackend.field_statistics`), with the
                 mean analysed length of title, body and doc (title + body) over live entries
    per entry    its stored analysed terms (`StoreBackend.entry_terms`: the strings its keyword
                 rows hold; a position is a token's index in that stream): tf of each query term
                 in title and body, the lengths, the query-term index at each position (−1
                 otherwise; trimmed to the last hit of any row, at most MAX_POSITIONS), the
                 cosine of the query vector with its artifact's stored title vector
                 (`StoreBackend.title_vectors`; NaN: none, an empty title or not backfilled yet,
                 title_vectors.py), and its chunk index

Rows are parallel to the ids asked (a repeated id gets the same row twice); an id the store
does not hold, or the caller may not see (`may_see`: the front passes its caller policy's check
of the artifact's visibility groups, so such an entry is a not-found row and its terms are never
used), has `found` False,
NaN everywhere and positions −1.

`build` is vectorised: every entry's stored string split at once, each token looked up in the
query-term table by C-level calls, numpy turns the hits into counts and positions (no Python
step per token).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, repeat

import numpy as np
from numpy.typing import NDArray

from ranking.features import MAX_POSITIONS
from services.knowledge_store import validation
from shared.analysis import query_terms
from shared.errors import InvalidArgument
from shared.records import FieldSignals

MAX_ENTRIES = 200                      # entry ids per call
MAX_QUERY_CHARS = validation.MAX_KEYWORD_CHARS

_F32 = np.float32


def check_request(entry_ids: Sequence[str], query: str, query_vector, dimension: int
                  ) -> tuple[list[str], str, NDArray[np.float32]]:
    """(the ids, in order, repeats kept; the query; the unit query vector), each checked naming
    its field: at most MAX_ENTRIES entry ids, a query text, a finite non-zero vector of the
    store's dimension."""
    if isinstance(entry_ids, str):
        raise InvalidArgument("entry_ids", "must be a list of entry ids, got one string")
    ids = list(entry_ids)
    if len(ids) > MAX_ENTRIES:
        raise InvalidArgument("entry_ids", f"{len(ids)} ids, at most {MAX_ENTRIES} accepted")
    validation.entry_ids(ids, MAX_ENTRIES)
    if not isinstance(query, str):
        raise InvalidArgument("query", f"must be a string, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgument("query", f"has {len(query)} characters, at most {MAX_QUERY_CHARS} accepted")
    try:
        vector = np.asarray(query_vector, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InvalidArgument("query_vector", f"expected {dimension} float values: {err}") from None
    if vector.ndim != 1 or vector.shape[0] != dimension:
        raise InvalidArgument("query_vector", f"expected {dimension} dims, got shape {vector.shape}")
    if not np.isfinite(vector).all():
        raise InvalidArgument("query_vector", "contains NaN or infinity")
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        raise InvalidArgument("query_vector", "is all zeros (a cosine needs a direction)")
    return ids, query, (vector / norm).astype(_F32)


async def field_signals(store, tenant_id: str, entry_ids: Sequence[str], query: str, query_vector, *,
                        may_see: Callable[[Sequence[str]], bool] = lambda groups: True) -> FieldSignals:
    """FieldSignals of `entry_ids` for `query` (module docstring); `store` a StoreBackend,
    `may_see` the caller's check of an artifact's visibility groups (front.may_see).
    The entries are read once (`StoreBackend.stored_fields`: artifact, chunk index, groups,
    terms and title vector together), the statistics once."""
    validation.tenant_id(tenant_id)
    ids, query, vector = check_request(entry_ids, query, query_vector, store.dimension)
    terms = query_terms([query])
    unique = list(dict.fromkeys(ids))
    stored = await store.stored_fields(tenant_id, unique) if unique else {}
    seen = {e: f for e, f in stored.items() if may_see(f.visibility_groups)}
    n_live, dfs, averages = await store.field_statistics(tenant_id, terms)
    rows = [((seen[e].title_terms, seen[e].body_terms), seen[e].chunk_index, seen[e].title_vector)
            if e in seen else None for e in ids]
    return build(terms, dfs, n_live, averages, rows, vector)


def build(terms: Sequence[str], dfs: Sequence[int], n_live: int, averages: tuple[float, float, float],
          rows: Sequence[tuple[tuple[str, str], int, NDArray[np.float32] | None] | None],
          vector: NDArray[np.float32]) -> FieldSignals:
    """FieldSignals from the statistics and, per row, (its stored (title, body) terms, chunk
    index, title vector or None) or None (not found)."""
    t, n = len(terms), len(rows)
    df = np.asarray(dfs, np.float64).reshape(t)
    idf = np.log1p((n_live - df + 0.5) / (df + 0.5)).astype(_F32)
    found = np.asarray([r is not None for r in rows], bool)
    lut = {term: i for i, term in enumerate(terms)}
    title_tf, title_len, title_pos = _field([r[0][0] if r else "" for r in rows], found, lut, t)
    body_tf, body_len, body_pos = _field([r[0][1] if r else "" for r in rows], found, lut, t)
    dense_title = np.full(n, np.nan, _F32)
    with_title = [i for i, r in enumerate(rows) if r is not None and r[2] is not None]
    if with_title:
        matrix = np.stack([np.asarray(rows[i][2], _F32) for i in with_title])
        dense_title[with_title] = np.clip(matrix @ vector, -1.0, 1.0)
    chunk = np.asarray([float(r[1]) if r else np.nan for r in rows], _F32)
    return FieldSignals(query_terms=tuple(terms), idf=idf, avg_length=tuple(float(a) for a in averages),
                        found=found, title_tf=title_tf, body_tf=body_tf, title_length=title_len,
                        body_length=body_len, title_positions=title_pos, body_positions=body_pos,
                        dense_title=dense_title, chunk_position=chunk)


def _field(texts: list[str], found: NDArray[np.bool_], lut: dict[str, int], t: int
           ) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int32]]:
    """(tf (n, t), length (n,), positions (n, L)) of one field's stored term strings (terms
    separated by spaces, as ingest writes them). All rows are split at once and every token
    looked up in the query-term table by C-level calls (`map(lut.get, tokens, repeat(-1))`);
    numpy turns the hits into counts and positions — no Python step per token."""
    n = len(texts)
    split = [text.split() for text in texts]
    counts = [len(tokens) for tokens in split]
    length = np.asarray(counts, _F32)
    tf = np.zeros((n, t), _F32)
    row = col = term = np.zeros(0, np.int64)
    total = int(sum(counts))
    if t and total:
        index = np.fromiter(map(lut.get, chain.from_iterable(split), repeat(-1)), dtype=np.int64, count=total)
        hit = np.flatnonzero(index >= 0)
        if hit.size:
            starts = np.cumsum([0, *counts[:-1]])
            row = np.searchsorted(starts, hit, side="right") - 1
            col = hit - starts[row]
            term = index[hit]
            np.add.at(tf, (row, term), 1.0)
    read = col < MAX_POSITIONS
    width = int(col[read].max()) + 1 if read.any() else 0          # trimmed to the last hit of any row
    positions = np.full((n, width), -1, np.int32)
    positions[row[read], col[read]] = term[read]
    tf[~found] = np.nan
    length[~found] = np.nan
    positions[~found] = -1
    return tf, length, positions
