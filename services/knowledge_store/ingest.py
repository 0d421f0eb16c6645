"""Documents in and out of a tenant: ingest (validate, chunk, embed, commit) and delete.

    ingest: validate every document first ─▶ per document: extract text (extraction.py),
            chunk (chunking.py), analyse for BM25 (analysis.py), score richness
            (richness.py) ─▶ embed all chunks (the injected Embedder, in batches,
            L2-normalised) ─▶ ONE write (writes.py): replace each artifact's rows, then
            mirror them in FAISS and the keyword index

Every document is atomic: all its entries are written or none. A batch is all-or-nothing by
default — nothing is written unless every document is valid and every chunk embedded, and the
first invalid document fails the call naming its field. With `commit_valid` the invalid
documents are reported by index (`IngestReport.rejected`) and the valid ones committed in the
same single write; a failure of the embedder or the storage still fails the whole batch. `derived_rows` recomputes an entry's keyword terms and the text
its vector was embedded from out of what is stored, as `_prepare` made them (the
consistency repair rebuilds lost rows with it). Ingest upserts by artifact id (the artifact's old entries are
replaced; its feedback counters are kept). Chunking and analysis run on a worker thread and
before any lock is taken, so the locked part of the write only appends.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from opentelemetry import trace

from services.knowledge_store import storage, validation
from services.knowledge_store.analysis import analyse
from services.knowledge_store.chunking import CONTEXT_SEPARATOR, PAGED_FILE_TYPES, chunk_document, context_line
from services.knowledge_store.extraction import ACCEPTED, content_kind, to_text
from services.knowledge_store.keyword_index import KeywordBatch
from services.knowledge_store.models import Embedder
from services.knowledge_store.richness import richness
from services.knowledge_store.tenants import Tenants
from services.knowledge_store.writes import NO_CHANGE, IndexChange, write
from shared.errors import InvalidArgument, NucleusError, UpstreamFailed
from shared.records import ArtifactMeta, DocumentIn, IngestRejection, IngestReport, IngestResult
from shared.settings import KnowledgeStoreSettings

tracer = trace.get_tracer(__name__)

SUMMARY_CHARS = 240


@dataclass(frozen=True, slots=True)
class _Prepared:
    meta: ArtifactMeta
    index: int
    rows: tuple[storage.entries.EntryRow, ...]
    embed_texts: tuple[str, ...]


class Ingester:
    """Ingest and delete for the tenants of one store (see the module docstring)."""

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder, bm25_weights: tuple[float, float],
                 tenants: Tenants) -> None:
        self._settings = settings
        self._embedder = embedder
        self._bm25_weights = bm25_weights
        self._tenants = tenants

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None, *,
                     commit_valid: bool = False) -> IngestReport:
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        docs = list(documents)
        rejected = self._check_documents(docs, commit_valid)
        with tracer.start_as_current_span("knowledge_store.ingest") as span:
            span.set_attribute("nucleus.documents", len(docs))
            with tracer.start_as_current_span("knowledge_store.ingest.chunk") as stage:  # telemetry hook
                prepared, keyword_batch, unchunked = await asyncio.to_thread(
                    self._prepare_all, docs, {r.index for r in rejected}, commit_valid)
                rejected = tuple(sorted(rejected + unchunked, key=lambda r: r.index))
                span.set_attribute("nucleus.rejected", len(rejected))
                if not prepared:
                    return IngestReport(results=(), total_entries=0, embed_seconds=0.0, commit_seconds=0.0,
                                        rejected=rejected)
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

            def work(conn) -> tuple[list[IngestResult], IndexChange]:
                results, removed, added = [], [], []
                offset = 0
                for p in prepared:
                    vecs = vectors[offset:offset + len(p.rows)]
                    offset += len(p.rows)
                    old, new = storage.entries.replace_artifact(conn, p.meta, persona_id, now, p.rows, vecs)
                    removed += old
                    added += new
                    results.append(IngestResult(p.meta.artifact_id, len(new), len(old), p.index))
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
        validation.tenant_id(tenant_id)
        unique = validation.artifact_ids(artifact_ids)

        def work(conn) -> tuple[tuple[int, int], IndexChange]:
            n_artifacts, rids = storage.entries.delete_artifacts(conn, unique)
            return (n_artifacts, len(rids)), IndexChange(rids, [], NO_CHANGE.vectors)

        return await write(self._tenants, tenant_id, work, create=False, action="delete")

    def _check_documents(self, docs: list[DocumentIn], commit_valid: bool) -> tuple[IngestRejection, ...]:
        """Request-level checks raise; a document's problem raises too unless `commit_valid`,
        when it is returned as a rejection by index."""
        s = self._settings
        if not docs:
            raise InvalidArgument("documents", "at least one document is required")
        if len(docs) > s.max_documents_per_request:
            raise InvalidArgument("documents", f"{len(docs)} documents, at most {s.max_documents_per_request} "
                                               "per request")
        seen: dict[str, int] = {}
        rejected = []
        for i, doc in enumerate(docs):
            try:
                self._check_document(doc, i, seen)
            except InvalidArgument as err:
                if not commit_valid:
                    raise
                rejected.append(_rejection(doc, i, err))
        return tuple(rejected)

    def _check_document(self, doc: DocumentIn, i: int, seen: dict[str, int]) -> None:
        s = self._settings
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

    def _prepare_all(self, docs: list[DocumentIn], skip: set[int], commit_valid: bool
                     ) -> tuple[list[_Prepared], KeywordBatch, tuple[IngestRejection, ...]]:
        """Chunks of every document not in `skip`, and their analysed terms ready for the
        keyword index (counted here, before any lock, so the locked update only appends)."""
        prepared, rejected = [], []
        for i, doc in enumerate(docs):
            if i in skip:
                continue
            try:
                prepared.append(self._prepare(doc, i))
            except InvalidArgument as err:
                if not commit_valid:
                    raise
                rejected.append(_rejection(doc, i, err))
        batch = KeywordBatch.from_docs(((r.fts_title, r.fts_body) for p in prepared for r in p.rows),
                                       self._bm25_weights)
        return prepared, batch, tuple(rejected)

    def _prepare(self, doc: DocumentIn, i: int) -> _Prepared:
        s = self._settings
        meta = doc.artifact
        kind = content_kind(doc.content_type or "")
        chunks = chunk_document(to_text(doc.content, kind), markdown=kind != "plain", title=meta.title,
                                chunk_tokens=s.chunk_tokens, overlap_tokens=s.chunk_overlap_tokens,
                                split_sections=meta.file_type in PAGED_FILE_TYPES)
        if not chunks:
            raise InvalidArgument(f"documents[{i}].content", "has no text once markup is removed")
        timestamp = meta.modified_unix or meta.created_unix
        rows, texts = [], []
        for chunk in chunks:
            context = context_line(meta.title, chunk.path)
            headline = (CONTEXT_SEPARATOR.join(chunk.path) if chunk.path
                        else meta.title.strip() or _first_words(chunk.text))
            rows.append(storage.entries.EntryRow(
                chunk_index=chunk.index, text=chunk.text, headline=headline,
                content_summary=_summary(chunk.text), timestamp_unix=timestamp,
                richness=richness(chunk.text, under_heading=bool(chunk.path)),
                fts_title=" ".join(analyse(context)), fts_body=" ".join(analyse(chunk.text))))
            texts.append(_embed_text(context, chunk.text))
        return _Prepared(meta, i, tuple(rows), tuple(texts))

    async def embed(self, texts: list[str]) -> NDArray[np.float32]:
        """Document vectors of `texts`, checked and L2-normalised as at ingest."""
        return await self._embed(texts, None)

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


def derived_rows(title: str, headline: str, text: str) -> tuple[str, str, str]:
    """(analysed title terms, analysed body terms, text to embed) of a stored entry, as
    `_prepare` derived them. Its heading path is read back from the headline, which holds the
    path joined by CONTEXT_SEPARATOR, or else the title or the first words."""
    path = () if headline in (title.strip(), _first_words(text)) else tuple(headline.split(CONTEXT_SEPARATOR))
    context = context_line(title, path)
    return " ".join(analyse(context)), " ".join(analyse(text)), _embed_text(context, text)


def _rejection(doc: DocumentIn, i: int, err: InvalidArgument) -> IngestRejection:
    artifact = getattr(getattr(doc, "artifact", None), "artifact_id", "")
    field = err.field or f"documents[{i}]"
    return IngestRejection(i, artifact if isinstance(artifact, str) else "", field,
                           str(err).removeprefix(f"{field}: "))


def _embed_text(context: str, text: str) -> str:
    return f"{context}\n{text}" if context else text


def _summary(text: str, limit: int = SUMMARY_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    return flat[:cut if cut > limit // 2 else limit].rstrip() + "…"


def _first_words(text: str, n: int = 12) -> str:
    words = text.split()
    return " ".join(words[:n]) + ("…" if len(words) > n else "")
