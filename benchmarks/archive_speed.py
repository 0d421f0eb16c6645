"""Tenant archive speed: export and import (entries/s) of the SciFact tenant on each backend,
against the store's own ingest of the same documents (docs/BENCHMARKS.md, "KnowledgeStore
backends").

    .venv/bin/python -m benchmarks.archive_speed --dataset ../shared/data/scifact
    .venv/bin/python -m benchmarks.archive_speed --dataset ../shared/data/scifact --backends embedded

Per backend (embedded; qdrant in local mode, in a temporary folder): the corpus ingested by the
store (`ingest`, batches of --batch documents), the tenant exported to an archive file
(`export_records` + `write_archive`, what ExportTenant writes), and that file verified and
imported into an empty store of the same backend (`open_archive` + `import_archive`, what
ImportTenant runs). No gRPC: the store's own work.

The vectors are precomputed, so the figures are the store's and not the model's: every chunk of
a document gets its document's all-MiniLM-L6-v2 vector of title + text from the benchmarks'
embedding cache (`.bench-cache/<corpus fingerprint>_minilm.npy`, baseline.py `EmbeddingCache`;
encoded once, ~3 min, if absent), each title its document's too. An ingest that embeds through
the model spends ~3 min on SciFact's 5,183 documents before the store writes anything; the
export and the import never embed.

    .venv/bin/python -m benchmarks.archive_speed --use-running [--data-dir D] [--tenant scifact]

A running stack (`--use-running`, benchmarks/stack.py): what an operator's `nucleus tenant export`
and `nucleus tenant import` do, timed: the tenant streamed out by the KnowledgeStore (ExportTenant)
into an archive file, then streamed back (ImportTenant) under `<tenant>-archive-speed` (replaced
on every run; the copy is left for the operator to inspect), with the stack's backend and backup
key, gRPC and verification included. No ingest: the tenant is the one the stack holds.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.baseline import EmbeddingCache, load_model
from benchmarks.beir import BeirDataset, load_dataset
from benchmarks.stack import add_running_arguments, running_data_dir, running_stack
from services.knowledge_store.archive import export_records, import_archive
from services.knowledge_store.archive_file import open_archive, write_archive
from services.knowledge_store.backend import open_store
from shared.records import ArtifactMeta, DocumentIn
from shared.settings import KnowledgeStoreSettings

ROOT = Path(__file__).resolve().parents[1]
TENANT = "scifact"
MODEL = {"name": "all-MiniLM-L6-v2 (cached)", "dimension": 384, "fingerprint": "benchmark"}


class _DocumentVectors:
    """Each embedding text's document's cached vector: a chunk's text starts with its document's
    title (its context line), a title is the title; untitled documents by their first words."""

    def __init__(self, dataset: BeirDataset, vectors: np.ndarray) -> None:
        self.vectors = vectors
        self.by_title = {d.title.strip(): i for i, d in enumerate(dataset.corpus) if d.title.strip()}
        self.by_text = {" ".join(d.text.split())[:80]: i for i, d in enumerate(dataset.corpus)}

    async def embed(self, texts: list[str]) -> np.ndarray:
        rows = []
        for t in texts:
            first = t.partition("\n")[0].strip()
            i = self.by_title.get(first)
            rows.append(self.by_text.get(" ".join(t.split())[:80], 0) if i is None else i)
        return self.vectors[rows]

    async def model_name(self) -> str:
        return MODEL["name"]


def _settings(root: Path, backend: str) -> KnowledgeStoreSettings:
    extra = {"backend": "qdrant", "qdrant_path": root / "qdrant"} if backend == "qdrant" else {}
    return KnowledgeStoreSettings(data_dir=root, **extra)


async def run(backend: str, dataset: BeirDataset, embedder: _DocumentVectors, batch: int, log=print) -> dict:
    docs = [DocumentIn(ArtifactMeta(artifact_id=d.id, title=d.title), d.text) for d in dataset.corpus]
    with tempfile.TemporaryDirectory(prefix="archive-speed-") as tmp:
        source = open_store(_settings(Path(tmp) / "a", backend), embedder)
        try:
            started = time.perf_counter()
            for start in range(0, len(docs), batch):
                await source.ingest(TENANT, "", docs[start:start + batch])
            ingest = time.perf_counter() - started
            entries = (await source.stats(TENANT)).entries
            key, path = os.urandom(32), Path(tmp) / "scifact.archive"
            started = time.perf_counter()
            await write_archive(path, key, TENANT, MODEL, export_records(source, TENANT))
            export = time.perf_counter() - started
        finally:
            source.close()
        target = open_store(_settings(Path(tmp) / "b", backend), embedder)
        try:
            started = time.perf_counter()
            report = await import_archive(target, open_archive(path, key), TENANT, MODEL)
            imported = time.perf_counter() - started
            assert report.entries == entries == (await target.stats(TENANT)).entries, (report, entries)
        finally:
            target.close()
        size = path.stat().st_size
    out = {"backend": backend, "entries": entries, "ingest": entries / ingest, "export": entries / export,
           "import": entries / imported, "mb": size / 1e6}
    log(f"{backend:9s} {entries} entries ({len(docs)} documents), archive {out['mb']:.0f} MB: ingest "
        f"{out['ingest']:,.0f} entries/s ({ingest:.1f} s), export {out['export']:,.0f} entries/s ({export:.1f} s, "
        f"{out['export'] / out['ingest']:.1f}x ingest), import {out['import']:,.0f} entries/s ({imported:.1f} s, "
        f"{out['import'] / out['ingest']:.1f}x ingest)")
    return out


async def through_running(args: argparse.Namespace, log=print) -> dict:
    """Export and import of `args.tenant` through the running stack (module docstring)."""
    from cli import tenant as tenant_cli
    from cli.backup import key_file
    from cli.snapshots import load_key

    data_dir = running_data_dir(args)
    running_stack(data_dir)                                  # found and healthy, or Unavailable
    copy = f"{args.tenant}-archive-speed"
    ns = argparse.Namespace(data_dir=str(data_dir), tenant=args.tenant, key=None, knowledge_store_target=None,
                            as_tenant=copy, replace=True, keep_groups=True, with_user_data=False, reembed=False)
    key = load_key(key_file(ns), create=True)
    with tempfile.TemporaryDirectory(prefix="archive-speed-") as tmp:
        path = Path(tmp) / f"{args.tenant}.archive"
        started = time.perf_counter()
        await tenant_cli.export(ns, path, key)
        export = time.perf_counter() - started
        started = time.perf_counter()
        report = await tenant_cli.import_file(ns, path, key)
        imported = time.perf_counter() - started
        size = path.stat().st_size
    entries = report.entries                                 # the archive's, all imported
    out = {"backend": "running", "entries": entries, "export": entries / export, "import": entries / imported,
           "mb": size / 1e6}
    log(f"running stack, tenant {args.tenant}: {entries} entries, archive {out['mb']:.1f} MB: export "
        f"{out['export']:,.0f} entries/s ({export:.1f} s), import as {copy} {out['import']:,.0f} entries/s "
        f"({imported:.1f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", type=Path, help="a BEIR folder (SciFact); not with --use-running")
    p.add_argument("--tenant", default=TENANT, help="with --use-running: the stack's tenant to export")
    add_running_arguments(p)
    p.add_argument("--backends", nargs="+", choices=["embedded", "qdrant"], default=["embedded", "qdrant"])
    p.add_argument("--batch", type=int, default=256, help="documents per ingest call (default 256)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / ".bench-cache")
    args = p.parse_args(argv)
    if args.use_running:
        asyncio.run(through_running(args))
        return 0
    if args.dataset is None:
        p.error("--dataset is required (or --use-running)")
    dataset = load_dataset(args.dataset)
    vectors, cached = EmbeddingCache(args.cache_dir).corpus_vectors(dataset, load_model())
    print(f"{dataset.name}: {len(dataset.corpus)} documents, vectors {'cached' if cached else 'encoded'}")
    embedder = _DocumentVectors(dataset, vectors)
    for backend in args.backends:
        asyncio.run(run(backend, dataset, embedder, args.batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
