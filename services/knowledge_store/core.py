"""KnowledgeStore core: durable, tenant-scoped hybrid retrieval (FAISS + BM25 + metadata).

    KnowledgeStore
      ├── per tenant: TenantDB  (SQLite, the system of record: storage.py)
      │               VectorIndex (FAISS, rebuilt from SQLite on open: vector_index.py)
      ├── ingest: validate all → extract/chunk/analyse (extraction, chunking, analysis,
      │           richness) → embed (injected Embedder) → ONE transaction → FAISS
      │           KeywordIndex (in-memory BM25, rebuilt from SQLite's FTS5 rows on open:
      │                         keyword_index.py)
      └── searches: vector (FAISS with an id selector from the SQL filters), keyword (in-memory
                    BM25 with a mask from the same SQL filters), listing, get by id; the row ids
                    a filter allows are cached per tenant until the next write (allowed_cache.py)

Isolation is structural: a tenant's data lives only in `<data_dir>/tenants/<tenant>/` and in
its own FAISS object; every call resolves exactly one tenant first.

Consistency: writes commit SQLite first, then apply the change to FAISS and to the
in-memory keyword index; all of it happens while the tenant's readers/writer lock is held
exclusively, and a vector or keyword search holds it shared for its SQLite snapshot plus its
in-memory search, so a search never sees an id the indexes and SQLite disagree about (the
cache of allowed row ids is cleared under the same exclusive lock at every commit). After a
crash both in-memory indexes are rebuilt from what SQLite committed, so records = keyword
rows (FTS5, the durable keyword store) = vectors always (`verify_integrity`).

Threads: SQLite and FAISS work runs in `asyncio.to_thread`. Writers to one tenant queue on
an asyncio lock (no thread is parked while waiting) and a thread lock (correctness even
across event loops); readers run concurrently, each on its own pooled connection.
Exception, `_read`: a small read (searches of a tenant of at most INLINE_MAX_ENTRIES entries
for at most INLINE_MAX_K results, GetEntries of at most INLINE_MAX_K ids) that arrives while
no other read is in flight runs on the event loop itself, skipping two thread hand-offs
(SearchAndRank on the 2-core reference box: vector leg −0.2 ms, GetEntries −0.15 ms p50,
where the whole vector search takes ~1 ms). It never
waits there: if a writer holds or wants the tenant's lock, or the filter's allowed rows are
not cached yet, the read goes to a worker thread as usual.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import NDArray
from opentelemetry import trace

from services.knowledge_store import storage, validation
from services.knowledge_store.allowed_cache import AllowedCache
from services.knowledge_store.analysis import analyse, query_terms
from services.knowledge_store.chunking import CONTEXT_SEPARATOR, chunk_document, context_line
from services.knowledge_store.extraction import ACCEPTED, content_kind, to_text
from services.knowledge_store.keyword_index import KeywordBatch, KeywordIndex
from ranking.profile import RankingProfile
from services.knowledge_store.models import INDEX_KINDS, Embedder
from shared.records import (
    ArtifactMeta,
    DocumentIn,
    Entry,
    ArtifactSummary,
    CandidateColumns,
    FeedbackAck,
    Hit,
    IngestReport,
    IngestResult,
    SearchFilters,
    TenantStats,
)
from services.knowledge_store.richness import richness
from services.knowledge_store.storage import EntryRow, TenantDB
from services.knowledge_store.vector_index import IndexConfig, VectorIndex
from shared.errors import InvalidArgument, NotFound, NucleusError, Unavailable, UpstreamFailed
from shared.settings import KnowledgeStoreSettings

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

T = TypeVar("T")
R = TypeVar("R")

SUMMARY_CHARS = 240
MAX_FEEDBACK_COMMENT_CHARS = 4_000
# Title/heading column vs body column weights of the keyword BM25 (keyword_index.py; also accepted by
# storage.keyword_search over FTS5); tuned on SciFact (benchmarks/bm25_scifact.py).
DEFAULT_BM25_WEIGHTS = (1.0, 1.0)
# Approximate indexes answer a filtered query exactly (vectors reconstructed from the index)
# when the filter leaves at most this many entries, or when the approximate search came back
# short of k and at most EXACT_FALLBACK_MAX candidates exist.
EXACT_FILTER_MAX = 4_096
EXACT_FALLBACK_MAX = 250_000


INLINE_MAX_ENTRIES = 32_768      # flat search of 32k × 384 floats ≈ 1.5-2 ms on one core
INLINE_MAX_K = 200


class _Busy(Exception):
    """A non-waiting read found the tenant's lock taken by a writer (see `_RWLock.read`)."""


class _RWLock:
    """Readers share, a writer is alone; waiting writers go before new readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self, *, wait: bool = True) -> Iterator[None]:
        """Shared hold. With `wait=False`, raises `_Busy` at once instead of waiting when a
        writer holds the lock or waits for it (callers on the event loop must never block)."""
        with self._cond:
            while self._writer or self._writers_waiting:
                if not wait:
                    raise _Busy
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


@dataclass(eq=False)
class _Tenant:
    tenant_id: str
    db: TenantDB
    index: VectorIndex
    keywords: KeywordIndex
    rw: _RWLock = field(default_factory=_RWLock)
    allowed: AllowedCache = field(default_factory=AllowedCache)   # cleared under rw.write()
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    _queues: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def writer_queue(self) -> asyncio.Lock:
        """The asyncio lock writers of this tenant queue on, one per event loop."""
        loop = asyncio.get_running_loop()
        lock = self._queues.get(loop)
        if lock is None:
            lock = self._queues[loop] = asyncio.Lock()
        return lock


@dataclass(frozen=True, slots=True)
class _Prepared:
    meta: ArtifactMeta
    rows: tuple[EntryRow, ...]
    embed_texts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _IndexChange:
    removed: list[int]
    added: list[int]
    vectors: NDArray[np.float32]
    keywords: KeywordBatch | None = None        # analysed terms of `added`, same order


_NO_CHANGE = _IndexChange([], [], np.zeros((0, 0), np.float32))


class KnowledgeStore:
    """The storage engine. See the module docstring; every method is tenant-scoped."""

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder, *,
                 bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS) -> None:
        self._settings = settings
        self._embedder = embedder
        self._bm25_weights = bm25_weights
        self._root = Path(settings.data_dir) / "tenants"
        self._tenants: dict[str, _Tenant] = {}
        self._opening: dict[str, threading.Lock] = {}
        self._registry = threading.Lock()
        self._closed = False
        self._reads_in_flight = 0      # on this store's event loop (see `_read`)

    # -- tenants -----------------------------------------------------------------------------

    def list_tenants(self) -> list[str]:
        if not self._root.is_dir():
            return []
        return sorted(storage.tenant_from_dir_name(d.name) for d in self._root.iterdir()
                      if (d / storage.DB_FILE).is_file())

    def _tenant_sync(self, tenant_id: str, create: bool) -> _Tenant:
        if self._closed:
            raise Unavailable("the knowledge store is closed")
        tenant = self._tenants.get(tenant_id)
        if tenant is not None:
            return tenant
        with self._registry:
            opening = self._opening.setdefault(tenant_id, threading.Lock())
        with opening:
            tenant = self._tenants.get(tenant_id)
            if tenant is None:
                directory = self._root / storage.tenant_dir_name(tenant_id)
                if not create and not (directory / storage.DB_FILE).is_file():
                    raise NotFound(f"tenant '{tenant_id}' has no knowledge store: nothing has been "
                                   "ingested for it")
                tenant = self._open(tenant_id, directory)
                self._tenants[tenant_id] = tenant
            return tenant

    async def _tenant(self, tenant_id: str, *, create: bool = False) -> _Tenant:
        validation.tenant_id(tenant_id)
        tenant = self._tenants.get(tenant_id)
        if tenant is not None and not self._closed:
            return tenant
        return await asyncio.to_thread(self._tenant_sync, tenant_id, create)

    def _open(self, tenant_id: str, directory: Path) -> _Tenant:
        dim = self._settings.dimension
        default = IndexConfig(kind=self._settings.default_index_kind)
        db = TenantDB(directory, tenant_id, dim, default.to_json())
        try:
            conn = db.writer
            stored_tenant = storage.get_meta(conn, "tenant_id")
            if stored_tenant != tenant_id:
                raise NucleusError(f"{directory} holds tenant {stored_tenant!r}, not {tenant_id!r}")
            stored_dim = int(storage.get_meta(conn, "dimension") or dim)
            if stored_dim != dim:
                raise NucleusError(f"tenant '{tenant_id}' stores {stored_dim}-dimensional vectors but the "
                                   f"service is configured for {dim}")
            index = self._build_index(conn, IndexConfig.from_json(storage.get_meta(conn, "index_config")))
            keywords = self._build_keywords(conn)
        except BaseException:
            db.close()
            raise
        log.info("opened tenant %s: %d vectors, %s index, %d keyword entries", tenant_id, index.ntotal,
                 index.kind, keywords.ntotal)
        return _Tenant(tenant_id=tenant_id, db=db, index=index, keywords=keywords)

    def _build_index(self, conn, config: IndexConfig) -> VectorIndex:
        ids, vectors = storage.load_vectors(conn, self._settings.dimension)
        return VectorIndex(self._settings.dimension, config, ids, vectors)

    def _build_keywords(self, conn) -> KeywordIndex:
        return KeywordIndex.build(storage.keyword_rows(conn), self._bm25_weights)

    # -- the write path ----------------------------------------------------------------------

    async def _write(self, tenant_id: str, work: Callable[[object], tuple[T, _IndexChange]], *,
                     create: bool) -> T:
        tenant = await self._tenant(tenant_id, create=create)
        async with tenant.writer_queue():
            return await asyncio.to_thread(self._write_sync, tenant, work)

    def _write_sync(self, tenant: _Tenant, work: Callable[[object], tuple[T, _IndexChange]]) -> T:
        with tenant.write_lock:
            if self._closed:
                raise Unavailable("the knowledge store is closed")
            conn = tenant.db.writer
            with storage.write_transaction(conn):
                result, change = work(conn)
                with tenant.rw.write():
                    conn.execute("COMMIT")
                    tenant.allowed.clear()
                    self._apply(tenant, change)
            if tenant.index.needs_rebuild:
                self._rebuild(tenant)
            if tenant.keywords.needs_compaction:
                fresh = tenant.keywords.compacted()       # searches keep using the old one meanwhile
                with tenant.rw.write():
                    tenant.keywords = fresh
                    tenant.allowed.clear()
            return result

    def _apply(self, tenant: _Tenant, change: _IndexChange) -> None:
        """Mirror a committed change in FAISS and the keyword index (caller holds the
        exclusive lock)."""
        if not change.removed and not change.added:
            return
        try:
            tenant.keywords.remove(np.asarray(change.removed, np.int64))
            if change.added:
                if change.keywords is None:
                    raise ValueError("added entries without their analysed terms")
                tenant.keywords.add(change.added, change.keywords)
        except Exception:
            log.exception("keyword index update failed for tenant %s; rebuilding from SQLite", tenant.tenant_id)
            try:
                tenant.keywords = self._build_keywords(tenant.db.writer)
            except Exception as err:
                self._tenants.pop(tenant.tenant_id, None)     # next access reopens and rebuilds
                raise Unavailable(f"keyword index of tenant '{tenant.tenant_id}' could not be rebuilt: "
                                  f"{err}") from err
        try:
            tenant.index.remove(np.asarray(change.removed, np.int64))
            tenant.index.add(np.asarray(change.added, np.int64), change.vectors)
        except Exception:
            log.exception("FAISS update failed for tenant %s; rebuilding from SQLite", tenant.tenant_id)
            try:
                tenant.index = self._build_index(tenant.db.writer, tenant.index.config)
            except Exception as err:
                self._tenants.pop(tenant.tenant_id, None)     # next access reopens and rebuilds
                raise Unavailable(f"vector index of tenant '{tenant.tenant_id}' could not be rebuilt: "
                                  f"{err}") from err

    def _rebuild(self, tenant: _Tenant) -> None:
        """Build a fresh index from SQLite while searches keep using the old one (the caller
        holds the tenant's write lock, so no write can slip in between)."""
        started = time.perf_counter()
        fresh = self._build_index(tenant.db.writer, tenant.index.config)
        with tenant.rw.write():
            tenant.index = fresh
            tenant.allowed.clear()
        log.info("rebuilt %s index of tenant %s (%d vectors) in %.2fs", fresh.kind, tenant.tenant_id,
                 fresh.ntotal, time.perf_counter() - started)

    # -- ingest ------------------------------------------------------------------------------

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None) -> IngestReport:
        """Chunk, embed and commit `documents` atomically (upsert by artifact id)."""
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        docs = list(documents)
        self._check_documents(docs)
        with tracer.start_as_current_span("knowledge_store.ingest") as span:
            span.set_attribute("nucleus.documents", len(docs))
            with tracer.start_as_current_span("knowledge_store.ingest.chunk") as stage:  # telemetry hook
                prepared, keyword_batch = await asyncio.to_thread(self._prepare_all, docs)
                texts = [t for p in prepared for t in p.embed_texts]
                stage.set_attribute("nucleus.documents", len(docs))
                stage.set_attribute("nucleus.chunks", len(texts))
            started = time.perf_counter()
            with tracer.start_as_current_span("knowledge_store.ingest.embed") as stage:  # telemetry hook
                stage.set_attribute("nucleus.texts", len(texts))
                vectors = await self._embed(texts, progress)
            embed_seconds = time.perf_counter() - started
            span.set_attribute("nucleus.entries", len(texts))
            now = int(time.time())

            def work(conn) -> tuple[list[IngestResult], _IndexChange]:
                results, removed, added = [], [], []
                offset = 0
                for p in prepared:
                    vecs = vectors[offset:offset + len(p.rows)]
                    offset += len(p.rows)
                    old, new = storage.replace_artifact(conn, p.meta, persona_id, now, p.rows, vecs)
                    removed += old
                    added += new
                    results.append(IngestResult(p.meta.artifact_id, len(new), len(old)))
                return results, _IndexChange(removed, added, vectors, keyword_batch)

            started = time.perf_counter()
            with tracer.start_as_current_span("knowledge_store.ingest.commit") as stage:  # telemetry hook
                results = await self._write(tenant_id, work, create=True)
                stage.set_attribute("nucleus.artifacts", len(results))
                stage.set_attribute("nucleus.entries_written", sum(r.entries_written for r in results))
                stage.set_attribute("nucleus.entries_replaced", sum(r.entries_replaced for r in results))
            commit_seconds = time.perf_counter() - started
        return IngestReport(results=tuple(results), total_entries=len(texts),
                            embed_seconds=embed_seconds, commit_seconds=commit_seconds)

    def _check_documents(self, docs: list[DocumentIn]) -> None:
        s = self._settings
        if not docs:
            raise InvalidArgument("documents", "at least one document is required")
        if len(docs) > s.max_documents_per_request:
            raise InvalidArgument("documents", f"{len(docs)} documents, at most {s.max_documents_per_request} "
                                               "per request")
        seen: dict[str, int] = {}
        for i, doc in enumerate(docs):
            f = f"documents[{i}]"
            if not isinstance(doc, DocumentIn):
                raise InvalidArgument(f, f"expected a DocumentIn, got {type(doc).__name__}")
            validation.artifact(doc.artifact, f"{f}.artifact")
            if content_kind(doc.content_type or "") is None:
                raise InvalidArgument(f"{f}.content_type", f"{doc.content_type!r} is not supported; "
                                                           f"accepted: {ACCEPTED}")
            if not isinstance(doc.content, str) or not doc.content.strip():
                raise InvalidArgument(f"{f}.content", "is empty")
            if len(doc.content) > s.max_document_chars:
                raise InvalidArgument(f"{f}.content", f"has {len(doc.content)} characters, at most "
                                                      f"{s.max_document_chars} accepted")
            first = seen.setdefault(doc.artifact.artifact_id, i)
            if first != i:
                raise InvalidArgument(f"{f}.artifact.artifact_id",
                                      f"{doc.artifact.artifact_id!r} repeats documents[{first}]")

    def _prepare_all(self, docs: list[DocumentIn]) -> tuple[list[_Prepared], KeywordBatch]:
        """Chunks of every document, and their analysed terms ready for the keyword index
        (counted here, before any lock, so the locked update only appends)."""
        prepared = [self._prepare(doc, i) for i, doc in enumerate(docs)]
        batch = KeywordBatch.from_docs(((r.fts_title, r.fts_body) for p in prepared for r in p.rows),
                                       self._bm25_weights)
        return prepared, batch

    def _prepare(self, doc: DocumentIn, i: int) -> _Prepared:
        s = self._settings
        meta = doc.artifact
        kind = content_kind(doc.content_type or "")
        chunks = chunk_document(to_text(doc.content, kind), markdown=kind != "plain", title=meta.title,
                                chunk_tokens=s.chunk_tokens, overlap_tokens=s.chunk_overlap_tokens)
        if not chunks:
            raise InvalidArgument(f"documents[{i}].content", "has no text once markup is removed")
        timestamp = meta.modified_unix or meta.created_unix
        rows, texts = [], []
        for chunk in chunks:
            context = context_line(meta.title, chunk.path)
            headline = (CONTEXT_SEPARATOR.join(chunk.path) if chunk.path
                        else meta.title.strip() or _first_words(chunk.text))
            rows.append(EntryRow(
                chunk_index=chunk.index, text=chunk.text, headline=headline,
                content_summary=_summary(chunk.text), timestamp_unix=timestamp,
                richness=richness(chunk.text, under_heading=bool(chunk.path)),
                fts_title=" ".join(analyse(context)), fts_body=" ".join(analyse(chunk.text))))
            texts.append(f"{context}\n{chunk.text}" if context else chunk.text)
        return _Prepared(meta, tuple(rows), tuple(texts))

    async def _embed(self, texts: list[str], progress: Callable[[int, int], None] | None) -> NDArray[np.float32]:
        dim, batch, n = self._settings.dimension, self._settings.embed_batch_size, len(texts)
        out = np.empty((n, dim), np.float32)
        for start in range(0, n, batch):
            part = texts[start:start + batch]
            try:
                got = await self._embedder.embed(part)
            except NucleusError:
                raise
            except Exception as err:
                raise UpstreamFailed(f"embedding failed: {type(err).__name__}: {err}") from err
            arr = np.asarray(got, dtype=np.float32)
            if arr.ndim != 2 or arr.shape[0] != len(part):
                raise UpstreamFailed(f"embedder returned shape {arr.shape} for {len(part)} texts")
            if arr.shape[1] != dim:
                raise UpstreamFailed(f"embedder returned {arr.shape[1]}-dimensional vectors, the store "
                                     f"is configured for {dim}")
            norms = np.linalg.norm(arr, axis=1)
            if not np.isfinite(arr).all() or (norms < 1e-6).any():
                raise UpstreamFailed("embedder returned a zero or non-finite vector")
            out[start:start + len(part)] = arr / norms[:, None]
            if progress is not None:
                progress(start + len(part), n)
        return out

    # -- delete ------------------------------------------------------------------------------

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        """Delete artifacts from records, keyword index and vectors. Returns (artifacts, entries)."""
        validation.tenant_id(tenant_id)
        ids = list(artifact_ids)
        if not ids:
            raise InvalidArgument("artifact_ids", "at least one artifact id is required")
        for i, a in enumerate(ids):
            validation.artifact_id(a, f"artifact_ids[{i}]")
        unique = list(dict.fromkeys(ids))

        def work(conn) -> tuple[tuple[int, int], _IndexChange]:
            n_artifacts, rids = storage.delete_artifacts(conn, unique)
            return (n_artifacts, len(rids)), _IndexChange(rids, [], _NO_CHANGE.vectors)

        return await self._write(tenant_id, work, create=False)

    # -- searches ----------------------------------------------------------------------------

    async def _read(self, small: bool, fn: Callable[..., R], *args: object) -> R:
        """`fn(*args, wait=...)` (a read that takes the tenant's locks itself): inline when
        `small` and nothing else is reading, else on a worker thread (module docstring)."""
        if small and self._reads_in_flight == 0:
            self._reads_in_flight += 1
            try:
                return fn(*args, wait=False)
            except _Busy:
                pass
            finally:
                self._reads_in_flight -= 1
        self._reads_in_flight += 1
        try:
            return await asyncio.to_thread(fn, *args, wait=True)
        finally:
            self._reads_in_flight -= 1

    @staticmethod
    def _small(tenant: _Tenant, k: int, filters: SearchFilters) -> bool:
        return (k <= INLINE_MAX_K and tenant.index.ntotal <= INLINE_MAX_ENTRIES
                and (filters.is_empty or tenant.allowed.cached(filters)))

    async def search_by_vector(self, tenant_id: str, query_vectors: np.ndarray, top_k: int,
                               filters: SearchFilters) -> list[list[Hit]]:
        """Top-k entries by cosine per query vector, filters applied inside the search."""
        return await self._vector_search(tenant_id, query_vectors, top_k, filters, _hit_lists)

    async def candidates_by_vector(self, tenant_id: str, query_vectors: np.ndarray, top_k: int,
                                   filters: SearchFilters, *, top_hits: int = 0) -> list[CandidateColumns]:
        """As `search_by_vector`, answered as ranking-signal columns (no text, no metadata),
        plus the full hits of the best `top_hits` candidates per query."""
        return await self._vector_search(tenant_id, query_vectors, top_k, filters, _columns_with(top_hits))

    async def _vector_search(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters,
                             materialize: _Materialize[R]) -> list[R]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        queries = validation.query_vectors(query_vectors, self._settings.dimension)
        tenant = await self._tenant(tenant_id)
        with tracer.start_as_current_span("knowledge_store.search_by_vector"):
            return await self._read(self._small(tenant, top_k, filters), self._vector_search_sync,
                                    tenant, queries, top_k, filters, materialize)

    def _vector_search_sync(self, tenant: _Tenant, queries: NDArray[np.float32], k: int,
                            filters: SearchFilters, materialize: _Materialize[R], *,
                            wait: bool = True) -> list[R]:
        with tenant.rw.read(wait=wait), tenant.db.read() as conn:
            index = tenant.index
            allowed = None if filters.is_empty else tenant.allowed.get(conn, filters)
            if allowed is not None and len(allowed.rids) == 0:
                nothing: list[list] = [[] for _ in range(len(queries))]
                return materialize(conn, tenant.tenant_id, nothing, nothing)
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
                    candidates = storage.all_rids(conn) if rids is None else rids
                    if len(candidates) <= EXACT_FALLBACK_MAX:
                        scores[short], ids[short] = index.exact(queries[short], k, candidates)
            order = np.lexsort((ids, -scores), axis=1)          # equal scores: lower row id first
            scores, ids = np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)
            found = ids >= 0
            return materialize(conn, tenant.tenant_id, [ids[q][found[q]].tolist() for q in range(len(queries))],
                               [scores[q][found[q]].tolist() for q in range(len(queries))])

    async def search_by_filters(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                                filters: SearchFilters) -> tuple[list[Hit], list[str]]:
        """BM25 over analysed terms of `keywords` and `extra_keywords` (OR-ed), filters applied
        inside the search (a mask of the entries the SQL filters allow).

        No keywords at all: a metadata-only listing, newest first, score 0. Keywords that
        analyse to no term (only stopwords): no hits. Returns (hits, analysed query terms).
        """
        return await self._keyword_search(tenant_id, keywords, extra_keywords, top_k, filters, _hit_lists)

    async def candidates_by_filters(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                                    filters: SearchFilters, *,
                                    top_hits: int = 0) -> tuple[CandidateColumns, list[str]]:
        """As `search_by_filters`, answered as ranking-signal columns (no text, no metadata),
        plus the full hits of the best `top_hits` candidates."""
        return await self._keyword_search(tenant_id, keywords, extra_keywords, top_k, filters,
                                          _columns_with(top_hits))

    async def _keyword_search(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                              filters: SearchFilters, materialize: _Materialize[R]) -> tuple[R, list[str]]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        if isinstance(extra_keywords, str):
            raise InvalidArgument("extra_keywords", "must be a list of phrases, got one string")
        if len(extra_keywords) > validation.MAX_EXTRA_KEYWORDS:
            raise InvalidArgument("extra_keywords", f"{len(extra_keywords)} phrases, at most "
                                                    f"{validation.MAX_EXTRA_KEYWORDS} accepted")
        phrases = [keywords or "", *extra_keywords]
        for i, phrase in enumerate(phrases):
            name = "keywords" if i == 0 else f"extra_keywords[{i - 1}]"
            if not isinstance(phrase, str):
                raise InvalidArgument(name, f"must be a string, got {type(phrase).__name__}")
            if len(phrase) > validation.MAX_KEYWORD_CHARS:
                raise InvalidArgument(name, f"has {len(phrase)} characters, at most "
                                             f"{validation.MAX_KEYWORD_CHARS} accepted")
        tenant = await self._tenant(tenant_id)
        listing = not any(p.strip() for p in phrases)
        terms = [] if listing else query_terms(phrases)
        with tracer.start_as_current_span("knowledge_store.search_by_filters"):
            small = not listing and self._small(tenant, top_k, filters)    # a listing sorts in SQL
            found = await self._read(small, self._keyword_search_sync, tenant, terms, listing, top_k, filters,
                                     materialize)
        return found, terms

    def _keyword_search_sync(self, tenant: _Tenant, terms: list[str], listing: bool, k: int,
                             filters: SearchFilters, materialize: _Materialize[R], *, wait: bool = True) -> R:
        with tenant.rw.read(wait=wait), tenant.db.read() as conn:
            if not listing and not terms:
                return materialize(conn, tenant.tenant_id, [[]], [[]])[0]
            if listing:
                scored = [(rid, 0.0) for rid in storage.listing(conn, filters, k)]
            else:
                allowed = None if filters.is_empty else tenant.allowed.get(conn, filters)
                everything = allowed is None or allowed.everything    # every live row passes: no mask
                scored = tenant.keywords.search(terms, k, None if everything else allowed.rids)
            return materialize(conn, tenant.tenant_id, [[rid for rid, _ in scored]], [[s for _, s in scored]])[0]

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str]) -> list[Hit]:
        """The entries with these ids, in request order (unknown ids are skipped), score 0."""
        validation.tenant_id(tenant_id)
        ids = list(entry_ids)
        if len(ids) > self._settings.max_top_k:
            raise InvalidArgument("entry_ids", f"{len(ids)} ids, at most {self._settings.max_top_k} accepted")
        for i, entry_id in enumerate(ids):
            validation.entry_id(entry_id, f"entry_ids[{i}]")
        unique = list(dict.fromkeys(ids))
        tenant = await self._tenant(tenant_id)

        def read(*, wait: bool) -> list[Hit]:      # no index involved: SQLite's snapshot suffices
            with tenant.db.read() as conn:
                found = storage.records_by_entry_id(conn, unique, tenant.tenant_id)
            records = [found[e] for e in unique if e in found]
            return [Hit(entry=entry, artifact=art, score=0.0, rank=i + 1) for i, (entry, art) in enumerate(records)]

        return await self._read(len(unique) <= INLINE_MAX_K, read)

    # -- stats and index configuration ------------------------------------------------------

    async def stats(self, tenant_id: str) -> TenantStats:
        tenant = await self._tenant(tenant_id)

        def read() -> TenantStats:
            with tenant.rw.read(), tenant.db.read() as conn:
                c = storage.counts(conn)
                sources = storage.source_stats(conn)
                index = tenant.index
                return TenantStats(tenant_id=tenant_id, artifacts=c["artifacts"], entries=c["records"],
                                   vectors=index.ntotal, keyword_docs=c["keyword_docs"], sources=tuple(sources),
                                   last_indexed_unix=c["last_indexed_unix"], index_kind=index.kind,
                                   dimension=index.dimension)

        return await asyncio.to_thread(read)

    async def verify_integrity(self, tenant_id: str) -> dict[str, int]:
        """{"records", "vectors", "keyword_docs"}: entries in SQLite, vectors in FAISS, FTS5 rows."""
        tenant = await self._tenant(tenant_id)

        def read() -> dict[str, int]:
            with tenant.rw.read(), tenant.db.read() as conn:
                c = storage.counts(conn)
                return {"records": c["records"], "vectors": tenant.index.ntotal, "keyword_docs": c["keyword_docs"]}

        return await asyncio.to_thread(read)

    async def configure_index(self, tenant_id: str, kind: str, *, hnsw_m: int = 32, hnsw_ef_search: int = 64,
                              ivf_nlist: int = 0, ivf_nprobe: int = 8) -> tuple[str, int]:
        """Choose the tenant's index kind (persisted) and rebuild it from SQLite.

        Returns (kind now serving searches, vectors). IVF serves as flat until the tenant has
        enough vectors to train it (see vector_index.py).
        """
        validation.tenant_id(tenant_id)
        if kind not in INDEX_KINDS:
            raise InvalidArgument("index_kind", f"{kind!r} is not one of {', '.join(INDEX_KINDS)}")
        for name, value, lo, hi in (("hnsw_m", hnsw_m, 4, 256), ("hnsw_ef_search", hnsw_ef_search, 1, 65_536),
                                    ("ivf_nlist", ivf_nlist, 0, 1 << 20), ("ivf_nprobe", ivf_nprobe, 1, 1 << 20)):
            if not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidArgument(name, f"must be in {lo}..{hi}, got {value!r}")
        config = IndexConfig(kind=kind, hnsw_m=hnsw_m, hnsw_ef_search=hnsw_ef_search, ivf_nlist=ivf_nlist,
                             ivf_nprobe=ivf_nprobe)
        tenant = await self._tenant(tenant_id, create=True)

        def configure() -> tuple[str, int]:
            with tenant.write_lock:
                conn = tenant.db.writer
                with storage.write_transaction(conn):
                    storage.set_meta(conn, "index_config", config.to_json())
                    conn.execute("COMMIT")
                fresh = self._build_index(conn, config)
                with tenant.rw.write():
                    tenant.index = fresh
                    tenant.allowed.clear()
                return fresh.kind, fresh.ntotal

        async with tenant.writer_queue():
            return await asyncio.to_thread(configure)

    # -- ranking profiles --------------------------------------------------------------------

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        """Store `profile` as the next version of (tenant, persona, name); returns it as stored."""
        validation.profile(profile)
        now = int(time.time())

        def work(conn) -> tuple[RankingProfile, _IndexChange]:
            version = storage.insert_profile(conn, profile, now)
            stored = storage.get_profile(conn, profile.tenant_id, profile.persona_id, profile.name, version)
            assert stored is not None and stored.persona_id == profile.persona_id
            return stored, _NO_CHANGE

        return await self._write(profile.tenant_id, work, create=True)

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile | None:
        """A profile (latest version unless `version`); `name` "" = the persona's default, else
        the tenant's. A persona without its own profile of that name falls back to the tenant's."""
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        if not isinstance(version, int) or version < 0:
            raise InvalidArgument("version", f"must be >= 0 (0 = latest), got {version!r}")
        try:
            tenant = await self._tenant(tenant_id)
        except NotFound:
            return None

        def read() -> RankingProfile | None:
            with tenant.db.read() as conn:
                return storage.get_profile(conn, tenant_id, persona_id, name or "", version)

        return await asyncio.to_thread(read)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        """Latest version of every profile of the tenant (of one persona when given)."""
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        try:
            tenant = await self._tenant(tenant_id)
        except NotFound:
            return []

        def read() -> list[RankingProfile]:
            with tenant.db.read() as conn:
                return storage.list_profiles(conn, tenant_id, persona_id)

        return await asyncio.to_thread(read)

    # -- feedback ----------------------------------------------------------------------------

    async def record_feedback(self, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                              helpful: bool, user_id: str, *, comment: str = "") -> FeedbackAck:
        """Persist a helpful/unhelpful vote on an entry or artifact; counted on the artifact.
        A named user has one vote per artifact (the latest counts); anonymous votes all count."""
        validation.tenant_id(tenant_id)
        if target == "entry":
            validation.entry_id(target_id, "target_id")
        elif target == "artifact":
            validation.artifact_id(target_id, "target_id")
        else:
            raise InvalidArgument("target", f"{target!r} is not one of entry, artifact")
        validation.label(user_id, "user_id")
        if len(comment) > MAX_FEEDBACK_COMMENT_CHARS:
            raise InvalidArgument("comment", f"has {len(comment)} characters, at most "
                                             f"{MAX_FEEDBACK_COMMENT_CHARS} accepted")
        now = int(time.time())

        def work(conn) -> tuple[FeedbackAck, _IndexChange]:
            if target == "entry":
                artifact_id = storage.artifact_of_entry(conn, target_id)
            else:
                artifact_id = target_id if storage.artifact_exists(conn, target_id) else None
            if artifact_id is None:
                raise NotFound(f"{target} '{target_id}' not found in tenant '{tenant_id}'")
            helpful_n, unhelpful_n, prior = storage.record_feedback(
                conn, target=target, target_id=target_id, artifact_id=artifact_id, helpful=bool(helpful),
                user_id=user_id, comment=comment, now=now)
            return FeedbackAck(artifact_id, helpful_n, unhelpful_n, prior), _NO_CHANGE

        return await self._write(tenant_id, work, create=False)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every tenant's files. Later calls raise Unavailable."""
        self._closed = True
        for tenant in list(self._tenants.values()):
            with tenant.write_lock, tenant.rw.write():
                tenant.db.close()
        self._tenants.clear()


# -- helpers ---------------------------------------------------------------------------------

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
_Materialize = Callable[[object, str, list[list[int]], list[list[float]]], list[R]]


def _hit_lists(conn, tenant_id: str, ids: list[list[int]], scores: list[list[float]]) -> list[list[Hit]]:
    records = storage.records_by_rid(conn, (rid for row in ids for rid in row), tenant_id)
    return [_hits(records, row_ids, row_scores) for row_ids, row_scores in zip(ids, scores)]


def _columns_with(top_hits: int) -> _Materialize[CandidateColumns]:
    """Materialise as columns, with the full hits of the best `top_hits` candidates per query."""
    validation.top_hits(top_hits)

    def materialize(conn, tenant_id: str, ids: list[list[int]], scores: list[list[float]]) -> list[CandidateColumns]:
        rows = storage.candidate_rows(conn, (rid for row in ids for rid in row))
        heads = [[rid for rid in row if rid in rows][:top_hits] for row in ids]
        records = storage.records_by_rid(conn, (rid for head in heads for rid in head), tenant_id) if top_hits else {}
        out = []
        for row_ids, row_scores, head in zip(ids, scores, heads):
            kept = [i for i, rid in enumerate(row_ids) if rid in rows]
            hits = tuple(_hits(records, head, [row_scores[i] for i in kept[:len(head)]]))
            out.append(CandidateColumns.from_rows([rows[row_ids[i]] for i in kept], [row_scores[i] for i in kept],
                                                  hits))
        return out

    return materialize


def _hits(records: dict[int, tuple[Entry, ArtifactSummary]], ids: Sequence[int] | NDArray[np.int64],
          scores: Sequence[float] | NDArray[np.float32]) -> list[Hit]:
    hits: list[Hit] = []
    for rid, score in zip(ids, scores):
        record = records.get(int(rid))
        if record is None:
            continue
        hits.append(Hit(entry=record[0], artifact=record[1], score=float(score), rank=len(hits) + 1))
    return hits


def _summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    return flat[:cut if cut > limit // 2 else limit].rstrip() + "…"


def _first_words(text: str, n: int = 12) -> str:
    words = text.split()
    return " ".join(words[:n]) + ("…" if len(words) > n else "")
