"""Document preparation, the same for every backend: how a document becomes chunks ready to
store.

    open_batch       the ingest opening: tenant and persona checked, every document checked
                     (request-level problems raise; a document's problem raises too, or with
                     `commit_valid` is returned as a rejection by index)
    prepare_batch    per document: extract text (extraction.py: a PDF's pages, markup
                     removed), chunk (chunking.py), analyse for BM25 (analysis.py), score
                     richness (richness.py) -> PreparedDocument rows and the texts to embed
    embed_texts      embed those texts through the injected Embedder, in batches, checked
                     and L2-normalised; each artifact's title rides in the same pass
                     (`PreparedBatch.embed_inputs` / `split_vectors`: its title vector, none
                     for an empty title, the learned re-ranker's dense_title)
    derived_rows     an entry's keyword terms and embedded text recomputed from what is
                     stored, exactly as `prepare_document` made them (repairs use it)

Where the prepared rows go is the backend's: the embedded backend writes them in one SQLite
transaction (embedded/ingest.py), the qdrant backend as points behind a commit record
(qdrant/writes.py). Chunking and analysis are CPU work: the backends run `prepare_batch` on a
worker thread, before any lock or storage call.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store import validation
from shared.analysis import analyse
from services.knowledge_store.chunking import CONTEXT_SEPARATOR, PAGED_FILE_TYPES, chunk_document, context_line
from services.knowledge_store.extraction import ACCEPTED, content_kind, to_text
from services.knowledge_store.models import Embedder
from services.knowledge_store.richness import richness
from shared.errors import InvalidArgument, NucleusError, UpstreamFailed
from shared.records import ArtifactMeta, DocumentIn, IngestRejection, IngestReport
from shared.settings import KnowledgeStoreSettings

SUMMARY_CHARS = 240


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One chunk ready to be written (everything but the storage's row id)."""
    chunk_index: int
    text: str
    headline: str
    content_summary: str
    timestamp_unix: int
    richness: float
    fts_title: str            # analysed terms, space separated
    fts_body: str
    text_hash: str = ""       # shared/text_hash.py of `text`; "" = computed when written (an archive's may carry it)
    span_start: int = 0       # the chunk's span in the document's extracted text (chunking.py); end 0 = unknown
    span_end: int = 0


@dataclass(frozen=True, slots=True)
class PreparedDocument:
    """One document's chunks, ready to embed and store."""
    meta: ArtifactMeta
    index: int                           # in the request
    rows: tuple[EntryRow, ...]
    embed_texts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    documents: list[PreparedDocument]
    rejected: tuple[IngestRejection, ...]     # by index, in request order

    @property
    def texts(self) -> list[str]:
        """Every chunk's text to embed, in document and chunk order."""
        return [t for p in self.documents for t in p.embed_texts]

    @property
    def titles(self) -> list[str]:
        """The non-empty titles of the documents, in document order (one title vector each)."""
        return [p.meta.title for p in self.documents if p.meta.title.strip()]

    def embed_inputs(self) -> list[str]:
        """What ingest embeds in one pass: every chunk's text, then the non-empty titles."""
        return self.texts + self.titles

    def entry_progress(self, progress: Callable[[int, int], None] | None) -> Callable[[int, int], None] | None:
        """`progress(entries embedded, entries expected)`, told (0, n) now, as `embed_texts`' callback
        over `embed_inputs` (the titles after the chunks count as the last entry's)."""
        if progress is None:
            return None
        n = len(self.texts)
        progress(0, n)
        return lambda done, _total: progress(min(done, n), n)

    def split_vectors(self, vectors: NDArray[np.float32]
                      ) -> tuple[NDArray[np.float32], list[NDArray[np.float32] | None]]:
        """`embed_inputs`' vectors as (chunk vectors, each document's title vector or None)."""
        n = sum(len(p.rows) for p in self.documents)
        titles = iter(vectors[n:])
        return vectors[:n], [next(titles) if p.meta.title.strip() else None for p in self.documents]

    def nothing_written(self) -> IngestReport:
        """The report of a batch of which no document could be prepared."""
        return IngestReport(results=(), total_entries=0, embed_seconds=0.0, commit_seconds=0.0,
                            rejected=self.rejected)


# -- the ingest opening ----------------------------------------------------------------------

def open_batch(settings: KnowledgeStoreSettings, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
               commit_valid: bool, key: str = "") -> tuple[list[DocumentIn], tuple[IngestRejection, ...]]:
    """(the documents, the rejected ones): see the module docstring."""
    validation.tenant_id(tenant_id)
    validation.persona_id(persona_id)
    validation.ingest_key(key)
    docs = list(documents)
    return docs, check_documents(settings, docs, commit_valid)


def check_documents(settings: KnowledgeStoreSettings, docs: list[DocumentIn],
                    commit_valid: bool) -> tuple[IngestRejection, ...]:
    """Request-level checks raise; a document's problem raises too unless `commit_valid`,
    when it is returned as a rejection by index."""
    if not docs:
        raise InvalidArgument("documents", "at least one document is required")
    if len(docs) > settings.max_documents_per_request:
        raise InvalidArgument("documents", f"{len(docs)} documents, at most {settings.max_documents_per_request} "
                                           "per request")
    seen: dict[str, int] = {}
    rejected = []
    for i, doc in enumerate(docs):
        try:
            _check_document(settings, doc, i, seen)
        except InvalidArgument as err:
            if not commit_valid:
                raise
            rejected.append(rejection(doc, i, err))
    return tuple(rejected)


def _check_document(s: KnowledgeStoreSettings, doc: DocumentIn, i: int, seen: dict[str, int]) -> None:
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


def rejection(doc: DocumentIn, i: int, err: InvalidArgument) -> IngestRejection:
    artifact = getattr(getattr(doc, "artifact", None), "artifact_id", "")
    field = err.field or f"documents[{i}]"
    return IngestRejection(i, artifact if isinstance(artifact, str) else "", field,
                           str(err).removeprefix(f"{field}: "))


def offered_attributes(docs: Sequence[DocumentIn]) -> dict[str, int]:
    """The `knowledge_store.ingest` span's account of what was offered (both backends; the
    documents, UTF-8 bytes and truncated documents of nucleus_ingest_*_total)."""
    size = sum(len(d.content.encode("utf-8", "surrogatepass")) for d in docs if isinstance(d.content, str))
    return {"nucleus.documents": len(docs), "nucleus.bytes": size,
            "nucleus.truncated": sum(1 for d in docs if d.truncated)}


def rejected_attributes(rejected: Sequence[IngestRejection]) -> dict[str, Any]:
    """... and of what was refused, by the field at fault (nucleus_ingest_rejected_documents_total)."""
    return {"nucleus.rejected": len(rejected), "nucleus.rejected_fields": rejected_fields(rejected)}


def rejected_fields(rejected: Sequence[IngestRejection], limit: int = 256) -> list[str]:
    """Each rejection's field without its document index ("content", "artifact.artifact_id",
    "content_type", or "document"), at most `limit`: the reasons of the ingest span and of
    nucleus_ingest_rejected_documents_total{field}."""
    return [re.sub(r"^documents\[\d+\]\.?", "", r.field) or "document" for r in rejected[:limit]]


# -- extract, chunk, analyse -----------------------------------------------------------------

def prepare_batch(settings: KnowledgeStoreSettings, docs: list[DocumentIn], rejected: tuple[IngestRejection, ...],
                  commit_valid: bool) -> PreparedBatch:
    """Chunks of every document not already `rejected`; a document that turns out to have no
    text raises, or with `commit_valid` joins the rejections (kept in request order)."""
    skip = {r.index for r in rejected}
    prepared, unchunked = [], []
    for i, doc in enumerate(docs):
        if i in skip:
            continue
        try:
            prepared.append(prepare_document(settings, doc, i))
        except InvalidArgument as err:
            if not commit_valid:
                raise
            unchunked.append(rejection(doc, i, err))
    return PreparedBatch(prepared, tuple(sorted(rejected + tuple(unchunked), key=lambda r: r.index)))


def prepare_document(s: KnowledgeStoreSettings, doc: DocumentIn, i: int) -> PreparedDocument:
    """Where a document (a PDF's extracted pages, Markdown, HTML, plain text) becomes chunks."""
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
        rows.append(EntryRow(
            chunk_index=chunk.index, text=chunk.text, headline=headline,
            content_summary=_summary(chunk.text), timestamp_unix=timestamp,
            richness=richness(chunk.text, under_heading=bool(chunk.path)),
            fts_title=" ".join(analyse(context)), fts_body=" ".join(analyse(chunk.text)),
            span_start=chunk.start, span_end=chunk.end))
        texts.append(embed_text(context, chunk.text))
    return PreparedDocument(meta, i, tuple(rows), tuple(texts))


def derived_rows(title: str, headline: str, text: str) -> tuple[str, str, str]:
    """(analysed title terms, analysed body terms, text to embed) of a stored entry, as
    `prepare_document` derived them. Its heading path is read back from the headline, which
    holds the path joined by CONTEXT_SEPARATOR, or else the title or the first words."""
    path = () if headline in (title.strip(), _first_words(text)) else tuple(headline.split(CONTEXT_SEPARATOR))
    context = context_line(title, path)
    return " ".join(analyse(context)), " ".join(analyse(text)), embed_text(context, text)


def embed_text(context: str, text: str) -> str:
    """The text a chunk is embedded from: its context line (title and heading path), then it."""
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


# -- embed -----------------------------------------------------------------------------------

async def embed_texts(embedder: Embedder, settings: KnowledgeStoreSettings, texts: list[str],
                      progress: Callable[[int, int], None] | None = None) -> NDArray[np.float32]:
    """Document vectors of `texts` in batches of `embed_batch_size`, checked (shape, dimension,
    finite, non-zero: UpstreamFailed otherwise) and L2-normalised; `progress(done, total)`
    after each batch."""
    dim, batch, n = settings.dimension, settings.embed_batch_size, len(texts)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, batch):
        part = texts[start:start + batch]
        try:
            got = await embedder.embed(part)
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
