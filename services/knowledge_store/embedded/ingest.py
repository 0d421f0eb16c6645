"""Documents in and out of a tenant of the embedded backend: ingest (prepare, embed, commit) and
delete.

    ingest: the front prepares (preparation.py: validate every document first, then extract,
            chunk, analyse, score richness; embed all chunks, L2-normalised) ─▶ the chunks'
            keyword terms counted for the in-memory index ─▶ ONE write (writes.py): replace
            each artifact's rows in one SQLite transaction, then mirror them in FAISS and the
            keyword index

Every document is atomic: all its entries are written or none. A batch is all-or-nothing by
default — nothing is written unless every document is valid and every chunk embedded, and the
first invalid document fails the call naming its field. With `commit_valid` the invalid
documents are reported by index (`IngestReport.rejected`) and the valid ones committed in the
same single write; a failure of the embedder or the storage still fails the whole batch.
Ingest upserts by artifact id (the artifact's old entries are replaced; its feedback counters
are kept). Chunking and analysis run on a worker thread and before any lock is taken, so the
locked part of the write only appends.
"""
from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from collections.abc import Callable, Sequence
import numpy as np
from numpy.typing import NDArray
from opentelemetry import trace

from services.knowledge_store import validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.keyword_index import KeywordBatch
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, IndexChange, write
from services.knowledge_store.models import Embedder
from services.knowledge_store.preparation import (
    PreparedBatch,
    embed_texts,
    offered_attributes,
    open_batch,
    prepare_batch,
    rejected_attributes,
)
from shared.records import DocumentIn, IngestRejection, IngestReport, IngestResult
from shared.settings import KnowledgeStoreSettings

tracer = trace.get_tracer(__name__)


class Ingest:
    """Ingest and delete for the tenants of one store (see the module docstring); a mixin of
    core.KnowledgeStore: its settings, `embedder` and `self._tenants` are the store's."""

    _settings: KnowledgeStoreSettings
    _tenants: Tenants
    embedder: Embedder

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None, *,
                     commit_valid: bool = False, key: str = "") -> IngestReport:
        """Chunk, embed and commit `documents` (upsert by artifact id), each atomically; the
        batch is all-or-nothing unless `commit_valid` (then invalid ones are reported by index).
        `key`: the request's idempotency key; a key already committed is answered its report."""
        docs, rejected = open_batch(self._settings, tenant_id, persona_id, documents, commit_valid, key)
        with tracer.start_as_current_span("knowledge_store.ingest") as span:
            span.set_attributes(offered_attributes(docs))
            with tracer.start_as_current_span("knowledge_store.ingest.chunk") as stage:  # telemetry hook
                batch, keyword_batch = await asyncio.to_thread(self._prepare_all, docs, rejected, commit_valid)
                prepared, rejected = batch.documents, batch.rejected
                span.set_attributes(rejected_attributes(rejected))
                if not prepared:
                    return batch.nothing_written()
                texts = batch.texts
                stage.set_attribute("nucleus.documents", len(docs))
                stage.set_attribute("nucleus.chunks", len(texts))
            started = time.perf_counter()
            with tracer.start_as_current_span("knowledge_store.ingest.embed") as stage:  # telemetry hook
                inputs = batch.embed_inputs()                 # the chunks, then the titles: one pass
                stage.set_attribute("nucleus.texts", len(inputs))
                vectors, title_vectors = batch.split_vectors(await self._embed(inputs, batch.entry_progress(progress)))
            embed_seconds = time.perf_counter() - started
            span.set_attribute("nucleus.entries", len(texts))
            now = int(time.time())

            def work(conn) -> tuple[list[IngestResult], IndexChange]:
                done = storage.entries.remembered(conn, key) if key else None
                if done is not None:              # a retry of a committed request: its report, nothing written
                    return [IngestResult(*r) for r in done], NO_CHANGE
                results, removed, added = [], [], []
                offset = 0
                for p, title_vector in zip(prepared, title_vectors, strict=True):
                    vecs = vectors[offset:offset + len(p.rows)]
                    offset += len(p.rows)
                    old, new = storage.entries.replace_artifact(conn, p.meta, persona_id, now, p.rows, vecs,
                                                                title_vector)
                    removed += old
                    added += new
                    results.append(IngestResult(p.meta.artifact_id, len(new), len(old), p.index))
                if key:
                    storage.entries.remember(conn, key, [dataclasses.astuple(r) for r in results], now)
                return results, IndexChange(removed, added, vectors, keyword_batch)

            started = time.perf_counter()
            with tracer.start_as_current_span("knowledge_store.ingest.commit") as stage:  # telemetry hook
                results = await write(self._tenants, tenant_id, work, create=True, action="ingest")
                stage.set_attribute("nucleus.artifacts", len(results))
                stage.set_attribute("nucleus.entries_written", sum(r.entries_written for r in results))
                stage.set_attribute("nucleus.entries_replaced", sum(r.entries_replaced for r in results))
            commit_seconds = time.perf_counter() - started
        return IngestReport(results=tuple(results), total_entries=len(texts),
                            embed_seconds=embed_seconds, commit_seconds=commit_seconds, rejected=rejected)

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        """Delete artifacts from records, keyword index and vectors. Returns (artifacts, entries)."""
        validation.tenant_id(tenant_id)
        unique = validation.artifact_ids(artifact_ids)

        def work(conn) -> tuple[tuple[int, int], IndexChange]:
            n_artifacts, rids = storage.entries.delete_artifacts(conn, unique)
            return (n_artifacts, len(rids)), IndexChange(rids, [], NO_CHANGE.vectors)

        return await write(self._tenants, tenant_id, work, create=False, action="delete")

    async def lacking_title_vectors(self, tenant_id: str, limit: int) -> list[tuple[str, str]]:
        """(artifact id, title) of up to `limit` artifacts with a title and no title vector: a
        read-only look first, so a tenant with none is not opened (the startup backfill visits
        every tenant); an older database (no table yet) is opened, which migrates it."""
        validation.tenant_id(tenant_id)
        path = self._tenants.database_path(tenant_id)

        def look() -> list[tuple[str, str]] | None:
            try:
                conn = storage.db.connect_for_scrub(path)
            except sqlite3.Error:
                return None
            try:
                return storage.entries.lacking_title_vectors(conn, limit)
            except sqlite3.Error:
                return None
            finally:
                conn.close()

        found = await asyncio.to_thread(look)
        if found is not None:
            return found
        tenant = await self._tenants.get(tenant_id)
        with tenant.db.read("title vectors") as conn:
            return storage.entries.lacking_title_vectors(conn, limit)

    async def put_title_vectors(self, tenant_id: str, rows: Sequence[tuple[str, str, NDArray[np.float32]]]) -> int:
        """Store backfilled title vectors (storage.entries.put_title_vectors: only where the
        artifact still has that title and none yet). No index mirrors them, but the write is not
        quiet: its commit advances the tenant's generation, so the in-memory title vectors
        (title_cache.py) are read again."""
        validation.tenant_id(tenant_id)

        def work(conn) -> tuple[int, IndexChange]:
            return storage.entries.put_title_vectors(conn, rows), NO_CHANGE

        return await write(self._tenants, tenant_id, work, create=False, action="title vectors")

    def _prepare_all(self, docs: list[DocumentIn], rejected: tuple[IngestRejection, ...], commit_valid: bool
                     ) -> tuple[PreparedBatch, KeywordBatch]:
        """The batch's chunks (preparation.py), and their analysed terms ready for the keyword
        index (counted here, before any lock, so the locked update only appends)."""
        batch = prepare_batch(self._settings, docs, rejected, commit_valid)
        keywords = KeywordBatch.from_docs(((r.fts_title, r.fts_body) for p in batch.documents for r in p.rows),
                                          self._tenants.bm25_weights)
        return batch, keywords

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """Document vectors of `texts`, checked and L2-normalised as at ingest (the repair's; an
        import's store embeds with this store)."""
        return await self._embed(texts, None)

    async def _embed(self, texts: list[str], progress: Callable[[int, int], None] | None) -> NDArray[np.float32]:
        return await embed_texts(self.embedder, self._settings, texts, progress)
