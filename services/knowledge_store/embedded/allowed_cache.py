"""Per-tenant cache of what searches read that only a committed write changes: the row ids a
`SearchFilters` value allows, and the ranking signals of candidate rows.

Every filtered search needs the set of entries its filters allow (`filter_sql.allowed_rids`, a
join of entries and artifacts). Authenticated callers always send a visibility filter, so
without a cache each of their searches pays that join twice (vector and keyword leg), which
costs far more than the searches themselves (SciFact, 11,388 entries: 6.2 ms per join against
1.15 ms for a whole unfiltered vector search).

Validity: a set only depends on the tenant's SQLite rows (no filter reads the clock: date
bounds are absolute unix times, see `filter_sql.filter_clause`), so it stays right until the
next committed write. The core calls `clear` under the tenant's exclusive lock at every commit
and index swap (writes.py, maintenance.py), and searches look sets up while holding the
shared lock (search.py), so a search never pairs a set from before a write with data from
after it. A generation counter additionally keeps a set computed on a snapshot older than
the last `clear` from being stored.

Candidate rows (`candidate_rows`): every search answering ranking-signal columns reads its
candidates' signals (storage.entries.candidate_rows: a join of entries and artifacts, 0.2–0.3 ms
for 60 rows of SciFact, twice a hybrid query; `python -m lab.query_path_costs --part store`).
They depend on the same rows, so they live and die with the sets: read once per generation, at
most MAX_ROWS rows kept (then the map starts again). Rows found corrupt since (`known_corrupt`)
are left out at every read.

Bounds: at most `max_filters` filter values per tenant (least recently used evicted) and at
most `max_ids` cached ids in total; a larger set is computed per call as before.

`Allowed.everything` is the keyword leg's fast path: when the filters let every entry of the
tenant through (the usual case: all documents visible to the caller's groups), BM25 runs
without a mask, which gives the same results. The vector leg instead reuses the FAISS selector
cached with the set (`Allowed.selector`): it costs about as much as the search to build, and
searching without one is not identical for a flat index (see `_vector_search_sync` in search.py).

Memory: a cached id costs 8 bytes in `rids` and about 46 in its FAISS selector (measured), so
a tenant's sets stay under about 110 MB with the default `MAX_IDS`; a cached candidate row
`ROW_BYTES`, at most ~70 MB a tenant (`MAX_ROWS`), counted in the tenants' memory budget.
"""
from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import replace

import faiss
import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.vector_index import id_selector
from shared.records import SearchFilters

MAX_FILTERS = 32
MAX_IDS = 2_000_000
MAX_ROWS = 200_000               # cached candidate rows a tenant
ROW_BYTES = 340                  # what one costs in memory (SciFact: lab.query_path_costs): ~70 MB at most
_SEQUENCE_FIELDS = ("source_types", "tags", "owners", "artifact_ids", "source_ids", "visibility_groups",
                    "exclude_source_ids")


def _key(filters: SearchFilters) -> SearchFilters:
    """`filters` as a dict key: in-process callers may pass lists where tuples are declared."""
    if all(type(getattr(filters, name)) is tuple for name in _SEQUENCE_FIELDS):
        return filters
    return replace(filters, **{name: tuple(getattr(filters, name)) for name in _SEQUENCE_FIELDS})


class Allowed:
    """The entries one filter value allows, for one generation of the tenant's data."""

    __slots__ = ("rids", "everything", "_selector")

    def __init__(self, rids: NDArray[np.int64], everything: bool) -> None:
        rids.flags.writeable = False              # shared by concurrent searches
        self.rids = rids
        self.everything = everything              # every entry of the tenant is allowed
        self._selector: faiss.IDSelectorBatch | None = None

    def selector(self) -> faiss.IDSelectorBatch:
        """The FAISS selector of `rids`, built on first use. FAISS only reads it during a
        search, so concurrent searches may share it; two first uses racing each build one and
        the last assignment is kept, both being equivalent."""
        sel = self._selector
        if sel is None:
            sel = self._selector = id_selector(self.rids)
        return sel


class AllowedCache:
    """LRU of `Allowed` by filter value (see the module docstring). Thread-safe."""

    def __init__(self, max_filters: int = MAX_FILTERS, max_ids: int = MAX_IDS) -> None:
        self.max_filters = max_filters
        self.max_ids = max_ids
        self._lock = threading.Lock()
        self._sets: OrderedDict[SearchFilters, Allowed] = OrderedDict()
        self._ids = 0                             # Σ len(rids) over _sets
        self._entries: int | None = None          # entries of the tenant in this generation
        self._generation = 0
        self._rows: dict[int, tuple] = {}         # rid -> storage.entries.candidate_rows' row

    def __len__(self) -> int:
        return len(self._sets)

    @property
    def cached_ids(self) -> int:
        return self._ids

    def cached(self, filters: SearchFilters) -> bool:
        """Whether `get` would answer from the cache right now (no SQL)."""
        with self._lock:
            return _key(filters) in self._sets

    def get(self, conn: sqlite3.Connection, filters: SearchFilters) -> Allowed:
        """The entries `filters` allows, from the cache or read through `conn` (a read
        transaction of the current generation: the caller holds the tenant's shared lock)."""
        key = _key(filters)
        with self._lock:
            hit = self._sets.get(key)
            if hit is not None:
                self._sets.move_to_end(key)
                return hit
            generation, entries = self._generation, self._entries
        rids = storage.filter_sql.allowed_rids(conn, filters)
        if entries is None:
            entries = storage.filter_sql.entry_count(conn)
        # allowed ⊆ entries (row ids are unique), so equal sizes mean equal sets
        allowed = Allowed(rids, everything=len(rids) == entries)
        with self._lock:
            if generation != self._generation:
                return allowed
            self._entries = entries
            if len(rids) <= self.max_ids and key not in self._sets:
                self._sets[key] = allowed
                self._ids += len(rids)
                while len(self._sets) > self.max_filters or self._ids > self.max_ids:
                    _, old = self._sets.popitem(last=False)
                    self._ids -= len(old.rids)
        return allowed

    @property
    def generation(self) -> int:
        """Advanced by every `clear`: the tenant's data changed (title_cache.py keys on it)."""
        with self._lock:
            return self._generation

    def clear(self) -> None:
        """Forget every set: the tenant's data changed (call under its exclusive lock)."""
        with self._lock:
            self._sets.clear()
            self._ids = 0
            self._entries = None
            self._rows = {}                       # a fresh map: readers of the old one keep theirs
            self._generation += 1

    def row_bytes(self) -> int:
        """The memory the cached candidate rows take (counted in the tenants' memory budget)."""
        return len(self._rows) * ROW_BYTES

    def candidate_rows(self, conn: sqlite3.Connection, rids: list[int]) -> dict[int, tuple]:
        """storage.entries.candidate_rows of `rids`, the rows read before in this generation from
        memory (the caller holds the tenant's shared lock, as for `get`)."""
        with self._lock:
            cached, generation = self._rows, self._generation
        missing = [rid for rid in rids if rid not in cached]
        fresh = storage.entries.candidate_rows(conn, missing) if missing else {}
        if fresh:
            with self._lock:
                if generation == self._generation:
                    if len(self._rows) + len(fresh) > MAX_ROWS:
                        self._rows = {}
                    self._rows.update(fresh)
        known = getattr(conn, "known_corrupt", ())      # rows found corrupt are never candidates
        out = {}
        for rid in rids:
            row = fresh.get(rid) or cached.get(rid)
            if row is not None and rid not in known:
                out[rid] = row
        return out
