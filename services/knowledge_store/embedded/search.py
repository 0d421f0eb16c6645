"""Searches of one tenant: by vector, by keywords/filters, and entries by id.

    vector   FAISS with an id selector from the SQL filters (filter_sql.py, cached per tenant
             by allowed_cache.py); an approximate index (HNSW, IVF) answers exactly instead
             when the filter leaves few entries, or when it came back short of k
    keywords in-memory BM25 (keyword_index.py) over the query's analysed terms, with a mask
             of the rows the same SQL filters allow; a quoted phrase ("…") also counts as a
             term of its own, held by the entries FTS5 finds it in (its analysed terms in a
             row); no keywords at all = a metadata-only listing, newest first, from SQL
    by id    GetEntries: SQLite only, no index involved

Score completion (`complete`): the vector search can also give
every candidate of a hybrid query both signals in the same call — the best cosine over all
query vectors (from the stored vectors) and the BM25 of the keyword phrases — for its own
candidates and for rows the caller names (the keyword leg's), filters applied again; and the
document frequency of each keyword term (how rare the query's terms are).

Weighted terms (`term_weights`: an expanded keyword query, ../keywords.py) replace the
phrases' own analysed terms in the keyword search and in the completion's BM25 (each term's
contribution × its weight); the completion's keyword statistics stay those of the phrases' own
terms (how rare the query's terms are, for the adaptive fusion).

Each search reads SQLite inside one snapshot while holding the tenant's lock shared, so the
ids its in-memory index returns are the ids that snapshot holds (writes.py). Equal scores
rank the lower row id first. A search answers either full hits or ranking-signal columns:
the caller passes how to materialise the scored row ids (`_hit_lists`, `_columns`).

Threads: SQLite and FAISS work runs in `asyncio.to_thread`; readers run concurrently, each on
its own pooled connection. Exception, `Searcher._read`: a small read (searches of a tenant of
at most INLINE_MAX_ENTRIES entries for at most INLINE_MAX_K results, GetEntries of at most
INLINE_MAX_K ids) that arrives while no other read is in flight runs on the event loop
itself, skipping two thread hand-offs (SearchAndRank on the 2-core reference box: vector leg
−0.2 ms, GetEntries −0.15 ms p50, where the whole vector search takes ~1 ms). It never
waits there: if a writer holds or wants the tenant's lock, or the filter's allowed rows are
not cached yet, the read goes to a worker thread as usual.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store import validation
from shared.analysis import query_terms
from services.knowledge_store.external_texts import prepare as prepare_texts
from services.knowledge_store.embedded import storage
from services.knowledge_store.models import StoredFields
from services.knowledge_store.embedded.locking import Busy
from services.knowledge_store.embedded.tenants import Tenant, Tenants
from services.knowledge_store.embedded.title_cache import TitleCache
from services.knowledge_store.keywords import (
    PHRASE_EXACT_MAX,
    KeywordQuery,
    holds_phrase,
    is_listing,
    keyword_phrases,
)
from shared.errors import InvalidArgument
from shared.records import (
    ArtifactSummary, CandidateColumns, Entry, Hit, KeywordScores, KeywordStats, Keywords, ScoreCompletion,
    SearchFilters,
)
from shared.settings import KnowledgeStoreSettings


R = TypeVar("R")

# Approximate indexes answer a filtered query exactly (vectors reconstructed from the index)
# when the filter leaves at most this many entries, or when the approximate search came back
# short of k and at most EXACT_FALLBACK_MAX candidates exist.
EXACT_FILTER_MAX = 4_096
EXACT_FALLBACK_MAX = 250_000


INLINE_MAX_ENTRIES = 32_768      # flat search of 32k × 384 floats ≈ 1.5-2 ms on one core
INLINE_MAX_K = 200


class Searcher:
    """The searches of one store (see the module docstring)."""

    def __init__(self, settings: KnowledgeStoreSettings, tenants: Tenants) -> None:
        self._settings = settings
        self._tenants = tenants
        self.reads_in_flight = 0      # on this store's event loop (see `_read`)
        self.titles = TitleCache()    # GetFieldSignals' title vectors in memory (title_cache.py)

    async def _read(self, small: bool, fn: Callable[..., R], *args: object) -> R:
        """`fn(*args, wait=...)` (a read that takes the tenant's locks itself): inline when
        `small` and nothing else is reading, else on a worker thread (see the module docstring)."""
        if small and self.reads_in_flight == 0:
            self.reads_in_flight += 1
            try:
                return fn(*args, wait=False)
            except Busy:
                pass
            finally:
                self.reads_in_flight -= 1
        self.reads_in_flight += 1
        try:
            return await asyncio.to_thread(fn, *args, wait=True)
        finally:
            self.reads_in_flight -= 1

    @staticmethod
    def _small(tenant: Tenant, k: int, filters: SearchFilters) -> bool:
        return (k <= INLINE_MAX_K and tenant.index.ntotal <= INLINE_MAX_ENTRIES
                and (filters.is_empty or tenant.allowed.cached(filters)))

    async def dense(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
                    hits: bool = False) -> list[list[Hit]] | list[CandidateColumns]:
        """The `top_k` nearest entries per query vector: full hits, or ranking-signal columns."""
        return await self._vector_search(tenant_id, query_vectors, top_k, filters,
                                         _hit_lists if hits else _columns)

    async def complete(
            self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
            keywords: Keywords, extra_keywords: Sequence[str] = (),
            complete_rows: Sequence[int] | NDArray[np.int64] = (),
            term_weights: Mapping[str, float] | None = None,
    ) -> tuple[list[CandidateColumns], ScoreCompletion]:
        """`dense` as columns plus both signals for its candidates and `complete_rows`
        (module docstring: score completion)."""
        phrases = keyword_phrases(keywords, extra_keywords)
        rows = np.asarray(complete_rows, dtype=np.int64).ravel()
        if len(rows) > self._settings.max_top_k:
            raise InvalidArgument("complete_row_ids", f"{len(rows)} rows, at most {self._settings.max_top_k} "
                                                      "accepted")
        query = KeywordQuery.of(phrases, term_weights)        # blank phrases: no terms, no phrases
        return await self._vector_search(tenant_id, query_vectors, top_k, filters, _columns,
                                         _Completion(query, rows, query_terms(phrases)))

    async def _vector_search(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters,
                             materialize: Materialize[R], complete: _Completion | None = None
                             ) -> list[R] | tuple[list[R], ScoreCompletion]:
        """The materialised answer per query vector; with `complete`, also its ScoreCompletion."""
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        queries = validation.query_vectors(query_vectors, self._settings.dimension)
        tenant = await self._tenants.get(tenant_id)
        found, completion = await self._read(self._small(tenant, top_k, filters), self._vector_search_sync,
                                             tenant, queries, top_k, filters, materialize, complete)
        return found if complete is None else (found, completion)

    def _vector_search_sync(self, tenant: Tenant, queries: NDArray[np.float32], k: int,
                            filters: SearchFilters, materialize: Materialize[R], complete: _Completion | None, *,
                            wait: bool = True) -> tuple[list[R], ScoreCompletion | None]:
        with tenant.rw.read(wait=wait), tenant.db.read() as conn:
            index = tenant.index
            allowed = None if filters.is_empty else tenant.allowed.get(conn, filters)
            if allowed is not None and len(allowed.rids) == 0:
                nothing: list[list] = [[] for _ in range(len(queries))]
                return (materialize(conn, tenant, nothing, nothing),
                        None if complete is None else _complete(conn, tenant, queries, nothing, complete, allowed))
            if allowed is not None and index.kind != "flat" and len(allowed.rids) <= EXACT_FILTER_MAX:
                scores, ids = index.exact(queries, k, allowed.rids)
            else:
                # Even when the filter lets every row through, the (cached) selector stays: FAISS
                # searches one query of a flat index without a selector by another kernel, whose
                # scores differ in the last bits, and that is no faster.
                rids = None if allowed is None else allowed.rids
                selector = None if allowed is None else allowed.selector()
                scores, ids = _pad(*index.search(queries, k, rids, selector), k)
                expected = min(k, index.ntotal if rids is None else len(rids))
                short = (ids >= 0).sum(axis=1) < expected
                if short.any() and index.kind != "flat":
                    candidates = storage.filter_sql.all_rids(conn) if rids is None else rids
                    if len(candidates) <= EXACT_FALLBACK_MAX:
                        scores[short], ids[short] = index.exact(queries[short], k, candidates)
            order = np.lexsort((ids, -scores), axis=1)          # equal scores: lower row id first
            scores, ids = np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)
            found = ids >= 0
            id_lists = [ids[q][found[q]].tolist() for q in range(len(queries))]
            answer = materialize(conn, tenant, id_lists,
                                 [scores[q][found[q]].tolist() for q in range(len(queries))])
            return answer, None if complete is None else _complete(conn, tenant, queries, id_lists, complete,
                                                                    allowed)

    async def keyword(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                      filters: SearchFilters, *, hits: bool = False, term_weights: Mapping[str, float] | None = None,
                      ) -> tuple[list[Hit] | CandidateColumns, list[str]]:
        """The keyword leg's `top_k` (no keywords: a metadata listing): full hits or columns, and
        the analysed terms searched."""
        return await self._keyword_search(tenant_id, keywords, extra_keywords, top_k, filters,
                                          _hit_lists if hits else _columns, term_weights)

    async def _keyword_search(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                              filters: SearchFilters, materialize: Materialize[R],
                              term_weights: Mapping[str, float] | None = None) -> tuple[R, list[str]]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        phrases = keyword_phrases(keywords, extra_keywords)
        tenant = await self._tenants.get(tenant_id)
        listing = is_listing(phrases)
        query = KeywordQuery([], []) if listing else KeywordQuery.of(phrases, term_weights)
        small = not listing and self._small(tenant, top_k, filters)    # a listing sorts in SQL
        found = await self._read(small, self._keyword_search_sync, tenant, query, listing, top_k, filters,
                                 materialize)
        return found, query.terms

    def _keyword_search_sync(self, tenant: Tenant, query: KeywordQuery, listing: bool, k: int,
                             filters: SearchFilters, materialize: Materialize[R], *, wait: bool = True) -> R:
        with tenant.rw.read(wait=wait), tenant.db.read() as conn:
            if not listing and not query.terms:
                return materialize(conn, tenant, [[]], [[]])[0]
            if listing:
                scored = [(rid, 0.0) for rid in storage.filter_sql.listing(conn, filters, k)]
            else:
                allowed = None if filters.is_empty else tenant.allowed.get(conn, filters)
                everything = allowed is None or allowed.everything    # every live row passes: no mask
                scored = tenant.keywords.search(query.terms, k, None if everything else allowed.rids,
                                                _phrase_rids(query, conn), query.weights)
            return materialize(conn, tenant, [[rid for rid, _ in scored]], [[s for _, s in scored]])[0]

    async def score_texts(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str]]) -> KeywordScores:
        """BM25 of the keyword phrases for (title, text) pairs the store does not hold, with the
        tenant's term statistics (keyword_index.score_documents), and their richness."""
        validation.tenant_id(tenant_id)
        phrases = keyword_phrases(keywords, extra_keywords)
        validation.external_texts(texts, self._settings.max_top_k)
        tenant = await self._tenants.get(tenant_id)
        terms = query_terms(phrases)
        # A text longer than one chunk is scored as ingest would chunk it: its best chunk (MaxP,
        # as the pipeline pools an artifact's chunks), and its chunks are returned to be embedded.
        s = self._settings
        prepared = prepare_texts(texts, chunk_tokens=s.chunk_tokens, overlap_tokens=s.chunk_overlap_tokens)
        docs, piece_richness, owner = prepared.docs, prepared.richness, prepared.owners

        def read(*, wait: bool) -> KeywordScores:
            with tenant.rw.read(wait=wait):
                keywords_ = tenant.keywords
                dfs = keywords_.document_frequencies(terms)         # read once: the scores and the stats
                scores = keywords_.score_documents(terms, docs, dfs)
                stats = KeywordStats(tuple(terms), tuple(dfs), keywords_.ntotal)
            bm25 = np.zeros(len(texts), np.float32)
            richness = np.zeros(len(texts), np.float32)
            np.maximum.at(bm25, owner, scores)
            np.maximum.at(richness, owner, piece_richness)
            return KeywordScores(bm25=bm25, richness=richness, keyword_stats=stats, chunks=prepared.chunks)

        return await self._read(len(docs) <= INLINE_MAX_K, read)

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str]) -> list[Hit]:
        validation.tenant_id(tenant_id)
        unique = validation.entry_ids(entry_ids, self._settings.max_top_k)
        tenant = await self._tenants.get(tenant_id)

        def read(*, wait: bool) -> list[Hit]:      # no index involved: SQLite's snapshot suffices
            with tenant.db.read() as conn:
                found = storage.entries.records_by_entry_id(conn, unique, tenant.tenant_id)
            records = [found[e] for e in unique if e in found]
            return [Hit(entry=entry, artifact=art, score=0.0, rank=i + 1) for i, (entry, art) in enumerate(records)]

        return await self._read(len(unique) <= INLINE_MAX_K, read)

    async def entry_vectors(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        validation.tenant_id(tenant_id)
        unique = validation.entry_ids(entry_ids, self._settings.max_top_k)
        tenant = await self._tenants.get(tenant_id)

        def read(*, wait: bool) -> dict[str, NDArray[np.float32]]:
            with tenant.db.read() as conn:
                return storage.entries.vectors_by_entry_id(conn, unique, tenant.index.dimension)

        return await self._read(len(unique) <= INLINE_MAX_K, read)


    async def entry_terms(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        validation.tenant_id(tenant_id)
        unique = validation.entry_ids(entry_ids, self._settings.max_top_k)
        tenant = await self._tenants.get(tenant_id)

        def read(*, wait: bool) -> dict[str, tuple[str, str]]:
            with tenant.db.read() as conn:
                return storage.entries.terms_by_entry_id(conn, unique)

        return await self._read(len(unique) <= INLINE_MAX_K, read)

    async def stored_fields(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, StoredFields]:
        """GetFieldSignals' read of these entries (storage.entries.stored_fields), one read."""
        validation.tenant_id(tenant_id)
        unique = list(dict.fromkeys(entry_ids))
        tenant = await self._tenants.get(tenant_id)

        def read(*, wait: bool) -> dict[str, StoredFields]:
            with tenant.db.read() as conn:
                return storage.entries.stored_fields(
                    conn, unique, lambda artifact_ids: self.titles.vectors(tenant, conn, artifact_ids,
                                                                           tenant.index.dimension))

        return await self._read(len(unique) <= INLINE_MAX_K, read)

    async def field_statistics(self, tenant_id: str, terms: Sequence[str]
                               ) -> tuple[int, list[int], tuple[float, float, float]]:
        """GetFieldSignals' statistics from the keyword index (keyword_index.field_statistics)."""
        validation.tenant_id(tenant_id)
        tenant = await self._tenants.get(tenant_id)

        def read(*, wait: bool) -> tuple[int, list[int], tuple[float, float, float]]:
            with tenant.rw.read(wait=wait):
                return tenant.keywords.field_statistics(list(terms))

        return await self._read(True, read)

    async def title_vectors(self, tenant_id: str, artifact_ids: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        """The stored unit title vectors of these artifacts (absent: none stored)."""
        validation.tenant_id(tenant_id)
        unique = list(dict.fromkeys(artifact_ids))
        tenant = await self._tenants.get(tenant_id)

        def read(*, wait: bool) -> dict[str, NDArray[np.float32]]:
            with tenant.db.read() as conn:
                return storage.entries.title_vectors(conn, unique, tenant.index.dimension)

        return await self._read(len(unique) <= INLINE_MAX_K, read)


def _phrase_rids(query: KeywordQuery, conn) -> list[NDArray[np.int64]]:
    """Per phrase, the entries holding it, read in the search's snapshot: those whose text has
    its words in a row; if none has, those whose analysed title or body has its terms in a
    row (FTS5 keeps the positions the in-memory index does not; stopwords and inflections
    are lost there, so "poor prognosis for patients" also matches "... of patients"). A
    phrase so common that more than PHRASE_EXACT_MAX entries hold its terms in a row keeps
    the FTS5 answer unchecked (reading that many texts would cost more than the search)."""
    out = []
    for run, text in query.phrases:
        found = [r for (r,) in conn.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH ?",
                                            ('"' + " ".join(run) + '"',))]
        if 0 < len(found) <= PHRASE_EXACT_MAX:
            rows = conn.execute("SELECT rid, text FROM entries WHERE rid IN (SELECT value FROM json_each(?))",
                                (json.dumps(found),))
            exact = [rid for rid, body in rows if holds_phrase(body, text)]
            found = exact or found
        out.append(np.asarray(found, np.int64))
    return out


@dataclass(frozen=True, slots=True)
class _Completion:
    query: KeywordQuery              # the keyword phrases; no terms = no BM25 asked for
    rows: NDArray[np.int64]          # rows named by the caller (the keyword leg's)
    own_terms: list[str]             # the phrases' own analysed terms (the keyword statistics')


def _complete(conn, tenant: Tenant, queries: NDArray[np.float32], found: list[list[int]], complete: _Completion,
              allowed) -> ScoreCompletion:
    """Both signals for the vector candidates and the named rows (inside the search's snapshot
    and lock): best cosine over `queries` from the stored vectors, BM25 of the terms; NaN for a
    row that is not live or that the filters do not allow."""
    rows = np.unique(np.concatenate([np.asarray(r, np.int64) for r in found] + [complete.rows]))
    ok = np.ones(len(rows), bool)
    if allowed is not None and not allowed.everything and len(rows):
        ok = np.isin(rows, allowed.rids)
    dense = np.full(len(rows), np.nan, np.float32)
    if ok.any():
        vectors, stored = tenant.index.stored_vectors(rows[ok])
        best = (queries @ vectors.T).max(axis=0) if len(vectors) else np.zeros(0, np.float32)
        best[~stored] = np.nan
        dense[ok] = best
    keywords, terms, own = tenant.keywords, complete.query.terms, complete.own_terms
    if terms:
        bm25 = keywords.score_rows(terms, rows, _phrase_rids(complete.query, conn), complete.query.weights)
        bm25[~ok] = np.nan
        stats = KeywordStats(tuple(own), tuple(keywords.document_frequencies(own)), keywords.ntotal)
    else:
        bm25, stats = np.full(len(rows), np.nan, np.float32), KeywordStats(entries=keywords.ntotal)
    return ScoreCompletion(row_ids=rows, dense=dense, bm25=bm25, keyword_stats=stats)


def _pad(scores: NDArray[np.float32], ids: NDArray[np.int64], k: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Widen FAISS results to k columns (missing: -inf, -1), as writable copies."""
    q, width = ids.shape
    out_s = np.full((q, k), -np.inf, np.float32)
    out_i = np.full((q, k), -1, np.int64)
    out_s[:, :width] = scores
    out_i[:, :width] = ids
    out_s[out_i < 0] = -np.inf
    return out_s, out_i


# How a search turns scored row ids (one list per query, best first) into its answer, inside
# the search's read transaction: full hits, or ranking-signal columns.
Materialize = Callable[[object, Tenant, list[list[int]], list[list[float]]], list[R]]


def _hit_lists(conn, tenant: Tenant, ids: list[list[int]], scores: list[list[float]]) -> list[list[Hit]]:
    records = storage.entries.records_by_rid(conn, (rid for row in ids for rid in row), tenant.tenant_id)
    return [_hits(records, row_ids, row_scores) for row_ids, row_scores in zip(ids, scores)]


def _columns(conn, tenant: Tenant, ids: list[list[int]], scores: list[list[float]]) -> list[CandidateColumns]:
    """Materialise as ranking-signal columns (no text, no metadata), the rows' signals from the
    tenant's cache of them (allowed_cache.py)."""
    rows = tenant.allowed.candidate_rows(conn, [rid for row in ids for rid in row])
    out = []
    for row_ids, row_scores in zip(ids, scores):
        kept = [i for i, rid in enumerate(row_ids) if rid in rows]
        out.append(CandidateColumns.from_rows([rows[row_ids[i]] for i in kept], [row_scores[i] for i in kept],
                                              [row_ids[i] for i in kept]))
    return out


def _hits(records: dict[int, tuple[Entry, ArtifactSummary]], ids: Sequence[int] | NDArray[np.int64],
          scores: Sequence[float] | NDArray[np.float32]) -> list[Hit]:
    hits: list[Hit] = []
    for rid, score in zip(ids, scores):
        record = records.get(int(rid))
        if record is None:
            continue
        hits.append(Hit(entry=record[0], artifact=record[1], score=float(score), rank=len(hits) + 1))
    return hits

