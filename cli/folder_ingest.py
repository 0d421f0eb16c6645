"""Ingest a folder into a tenant, file by file, with an outcome per file.

    scan (iter_files) ─▶ per file: unchanged in the manifest? skip ─▶ convert (load_documents)
    ─▶ pending batch ─▶ IngestDocuments(commit_valid) when the batch is full ─▶ record each
    file whose documents all landed in the manifest (saved after every batch) ─▶ with
    `sync`, delete the artifacts of files that are gone

Every valid file is ingested; a rejected one (empty, unreadable, encrypted, unsupported type,
conversion failed, bad front matter, duplicate id, refused by the store) is listed with its
reason and nothing else is lost. A file a conversion limit cut short (rows past the sheet limit)
is ingested as `truncated`, with what was left out. `strict` stops at the first rejected file:
at a conversion rejection before converting more (what was converted before it is still sent), at
a document the store refuses after that request (its valid documents are committed; no further
file is sent); under `strict` a truncated file is rejected (`truncated`) and not sent.
Memory is bounded by the batch: at most `batch_chars` of converted text (plus the file being
converted) is held; a file bigger than that is sent alone. Files are converted in a worker
process within `Limits` (shared/documents/worker.py): a file over a limit — a zip or PDF bomb, a
DOCTYPE in an Office part, deep nesting, too much time or memory — fails with that reason.
With `base_url` each file's `source_uri` is `<base_url>/<its path in the folder>` (a citable
link, never file://); the manifest remembers it, and a changed base URL re-ingests every file.
`watch` keeps a folder in sync: a sync pass at start (resuming from the manifest), then one per
burst of file changes.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from urllib.parse import quote

from shared.documents import Rejected, is_supported, iter_files, load_documents
from shared.documents.limits import Limits
from shared.documents.rejected import DUPLICATE_ID, UNSUPPORTED
from shared.documents.loading import Loaded
from shared.documents.manifest import Manifest, file_sha256
from shared.documents.worker import ConversionWorker
from shared.errors import InvalidArgument, Unavailable
from shared.records import DocumentIn, IngestProgress, IngestReport

INGESTED, TRUNCATED, UNCHANGED, FAILED, REMOVED = "ingested", "truncated", "unchanged", "failed", "removed"
BATCH_DOCS = 32
BATCH_CHARS = 8_000_000          # converted characters per request (well under the 64 MiB message)


class Store(Protocol):
    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn], *,
                     commit_valid: bool = False) -> IngestReport: ...

    def ingest_stream(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn], *,
                      commit_valid: bool = False) -> AsyncIterator[IngestProgress | IngestReport]: ...

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]: ...


@dataclass(slots=True)
class FileOutcome:
    path: str
    status: str                     # ingested | truncated | unchanged | failed | removed
    reason: str = ""                # for failed: empty, unreadable, encrypted, ..., truncated (strict)
    detail: str = ""
    documents: int = 0
    entries: int = 0
    size: int = 0
    pages: int = 0


@dataclass(slots=True)
class RunSummary:
    outcomes: list[FileOutcome] = field(default_factory=list)
    seconds: float = 0.0
    convert_seconds: float = 0.0
    embed_seconds: float = 0.0
    commit_seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def failed(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == FAILED]


@dataclass(slots=True)
class _Pending:
    path: Path
    sha256: str
    documents: tuple[DocumentIn, ...]
    outcome: FileOutcome


Progress = Callable[[FileOutcome], None]


class FolderIngest:
    """One folder (or file) into one tenant; see the module docstring."""

    def __init__(self, store: Store, root: Path, tenant: str, persona: str = "", *,
                 manifest: Manifest | None = None, strict: bool = False, sync: bool = False,
                 batch_docs: int = BATCH_DOCS, batch_chars: int = BATCH_CHARS,
                 progress: Progress | None = None, entries: Callable[[int, int], None] | None = None,
                 base_url: str | None = None,
                 limits: Limits | None = None, isolate: bool = True) -> None:
        self._store, self._root, self._tenant, self._persona = store, root, tenant, persona
        self._manifest, self._strict, self._sync = manifest, strict, sync
        self._batch_docs, self._batch_chars = max(1, batch_docs), max(1, batch_chars)
        self._progress = progress or (lambda outcome: None)
        self._entries = entries               # (embedded, expected) of the request in flight
        remembered = manifest.base_url if manifest is not None else ""
        self._base_url = check_base_url(remembered if base_url is None else base_url)
        self._rebase = manifest is not None and self._base_url != remembered   # every file's URI changes
        self._limits = limits or Limits.from_env()
        self._isolate = isolate
        self._worker: ConversionWorker | None = None

    def source_uri(self, path: Path) -> str:
        """`<base_url>/<path relative to the folder>`, '' without a base URL."""
        if not self._base_url:
            return ""
        root = self._root.resolve()
        rel = path.resolve().relative_to(root).as_posix() if root.is_dir() else path.name
        return f"{self._base_url}/{quote(rel)}"

    def _load(self, path: Path) -> Loaded:
        if not self._isolate:
            return load_documents(path, source_uri=self.source_uri(path), limits=self._limits)
        if self._worker is None:
            self._worker = ConversionWorker(self._limits)
        return self._worker.load(path, self.source_uri(path))

    async def run(self) -> RunSummary:
        try:
            return await self._run()
        finally:
            if self._worker is not None:
                await asyncio.to_thread(self._worker.close)
                self._worker = None

    async def _run(self) -> RunSummary:
        summary = RunSummary()
        started = time.perf_counter()
        files = list(iter_files(self._root))
        pending: list[_Pending] = []
        claimed: dict[str, str] = {}              # artifact id → file of this run
        for path in files:
            outcome = await self._convert(path, pending, claimed, summary)
            if outcome is not None:
                self._finish(summary, outcome)
                if outcome.status == FAILED and self._strict:
                    break
            if sum(len(d.content) for p in pending for d in p.documents) >= self._batch_chars \
                    or sum(len(p.documents) for p in pending) >= self._batch_docs:
                await self._flush(pending, summary)
                if self._strict and summary.failed:      # the store refused a document
                    break
        await self._flush(pending, summary)
        if self._sync and self._manifest is not None and not (self._strict and summary.failed):
            await self._remove_gone(files, summary)
        if self._rebase and self._manifest is not None and not (self._strict and summary.failed):
            self._manifest.base_url = self._base_url          # every file now carries it
            self._manifest.save()
        summary.seconds = time.perf_counter() - started
        return summary

    def _finish(self, summary: RunSummary, outcome: FileOutcome) -> None:
        summary.outcomes.append(outcome)
        self._progress(outcome)

    async def _convert(self, path: Path, pending: list[_Pending], claimed: dict[str, str],
                       summary: RunSummary) -> FileOutcome | None:
        """The outcome of `path` when it is settled now (unchanged, failed), else None (pending)."""
        size = path.stat().st_size
        outcome = FileOutcome(str(path), FAILED, size=size)
        if not is_supported(path):
            outcome.reason = UNSUPPORTED
            outcome.detail = f"{path}: '{path.suffix or path.name}' is not a supported type"
            return outcome
        sha = ""
        if self._manifest is not None and not self._rebase:
            same, sha = self._manifest.unchanged(path)
            if same:
                outcome.status = UNCHANGED
                return outcome
        started = time.perf_counter()
        try:
            loaded = await asyncio.to_thread(self._load, path)
        except Rejected as err:
            outcome.reason, outcome.detail = err.reason, str(err)
            return outcome
        finally:
            summary.convert_seconds += time.perf_counter() - started
        key = self._manifest.key(path) if self._manifest is not None else str(path)
        for doc in loaded.documents:
            aid = doc.artifact.artifact_id
            other = claimed.get(aid)
            if other is None and self._manifest is not None:
                owner = self._manifest.owner(aid)
                if owner is not None and owner != key and (self._manifest.root / owner).exists():
                    other = str(self._manifest.root / owner)
            if other is not None and other != str(path):
                outcome.reason = DUPLICATE_ID
                outcome.detail = f"{path}: artifact id {aid!r} is already used by {other} (set `id` to tell them apart)"
                return outcome
        left_out = "; ".join(d.truncated for d in loaded.documents if d.truncated)
        if left_out:                                # ingested as `truncated`; under strict, rejected
            outcome.reason, outcome.detail = TRUNCATED, f"{path}: {left_out}"
            if self._strict:
                return outcome
        for doc in loaded.documents:
            claimed[doc.artifact.artifact_id] = str(path)
        outcome.documents, outcome.pages = len(loaded.documents), loaded.pages
        pending.append(_Pending(path, sha, loaded.documents, outcome))
        return None

    async def _ingest(self, documents: list[DocumentIn]) -> IngestReport:
        """One request; with an `entries` callback, streamed, telling it the entries embedded."""
        if self._entries is None:
            return await self._store.ingest(self._tenant, self._persona, documents, commit_valid=True)
        async for event in self._store.ingest_stream(self._tenant, self._persona, documents, commit_valid=True):
            if isinstance(event, IngestReport):
                return event
            self._entries(event.entries_embedded, event.entries_expected)
        raise Unavailable("the KnowledgeStore ended the ingest without its report")

    async def _flush(self, pending: list[_Pending], summary: RunSummary) -> None:
        if not pending:
            return
        docs = [(i, d) for i, p in enumerate(pending) for d in p.documents]
        rejected: dict[int, list[str]] = {}
        entries: dict[int, int] = {}
        start = 0
        while start < len(docs):
            end, chars = start, 0
            while end < len(docs) and end - start < self._batch_docs and (
                    end == start or chars + len(docs[end][1].content) <= self._batch_chars):
                chars += len(docs[end][1].content)
                end += 1
            part = docs[start:end]
            report = await self._ingest([d for _, d in part])
            summary.embed_seconds += report.embed_seconds
            summary.commit_seconds += report.commit_seconds
            for r in report.results:
                owner = part[r.index][0]
                entries[owner] = entries.get(owner, 0) + r.entries_written
            for r in report.rejected:
                rejected.setdefault(part[r.index][0], []).append(f"{r.field}: {r.reason}")
            start = end
            if self._strict and rejected:                 # no further request after a refusal
                break
        unsent = {i for i, _ in docs[start:]}
        stale: list[str] = []
        for i, p in enumerate(pending):
            if i in unsent and i not in rejected:         # strict stopped before all of it was sent
                continue
            p.outcome.entries = entries.get(i, 0)
            if i in rejected:
                p.outcome.reason = "refused by the store"
                p.outcome.detail = f"{p.path}: " + "; ".join(rejected[i])
            else:
                p.outcome.status = TRUNCATED if p.outcome.reason == TRUNCATED else INGESTED
                if self._manifest is not None:
                    ids = tuple(d.artifact.artifact_id for d in p.documents)
                    old = self._manifest.record(p.path, p.sha256 or file_sha256(p.path), ids)
                    stale += [a for a in (old.artifact_ids if old else ()) if a not in ids]
            self._finish(summary, p.outcome)
        if stale:
            await self._store.delete(self._tenant, stale)
        if self._manifest is not None:
            self._manifest.save()
        pending.clear()

    async def _remove_gone(self, files: list[Path], summary: RunSummary) -> None:
        assert self._manifest is not None
        present = {self._manifest.key(p) for p in files}
        gone = [rel for rel in self._manifest.files if rel not in present]
        ids = [a for rel in gone for a in self._manifest.files[rel].artifact_ids]
        if ids:
            await self._store.delete(self._tenant, ids)
        for rel in gone:
            record = self._manifest.files.pop(rel)
            shown = self._root / rel if self._root.is_dir() else self._root     # as the folder was given
            self._finish(summary, FileOutcome(str(shown), REMOVED,
                                              documents=len(record.artifact_ids)))
        if gone:
            self._manifest.save()


def check_base_url(url: str) -> str:
    """A folder's base URL without its trailing '/'; '' for none. Only http(s): a file:// URI
    would reveal server paths and cannot be opened by whoever reads a citation."""
    url = (url or "").strip()
    if not url:
        return ""
    if not url.startswith(("http://", "https://")) or any(c in url for c in "?# \t\n"):
        raise InvalidArgument("--base-url", f"{url!r} is not an http:// or https:// URL without '?' or '#'")
    return url.rstrip("/")


async def watch(make_run: Callable[[], FolderIngest], root: Path, *, on_pass: Callable[[RunSummary], None],
                stop: asyncio.Event | None = None, debounce_ms: int = 400) -> None:
    """A sync pass now (resuming from the manifest), then one after every burst of changes
    under `root`, until `stop` is set."""
    from watchfiles import awatch

    base = root.resolve()

    def visible(_change, changed: str) -> bool:          # hidden files and folders are not content
        try:
            parts = Path(changed).resolve().relative_to(base).parts
        except ValueError:
            return True
        return not any(part.startswith(".") for part in parts)

    changes = awatch(root, watch_filter=visible, stop_event=stop, debounce=debounce_ms, step=50)
    first = asyncio.ensure_future(anext(changes))
    await asyncio.sleep(0)          # awatch starts its watcher before its first wait, so a change
    try:                            # made during the first pass triggers another one
        on_pass(await make_run().run())
        await first
        while True:
            on_pass(await make_run().run())
            await anext(changes)
    except StopAsyncIteration:      # `stop` was set
        return
    finally:
        if not first.done():
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await first
        await changes.aclose()
