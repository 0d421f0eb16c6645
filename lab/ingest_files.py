"""Throughput of ingesting a folder of office files: conversion alone (pages/s, MB/s) and the
whole folder ingest (convert, chunk, embed with the local model, commit), split by stage.

    .venv/bin/python -m lab.ingest_files [--pdfs 200] [--docx 200] [--pages 4] [--words 250]
                                                [--no-embed]

Generates the files in a temporary folder: PDFs of `--pages` text pages (written directly, one
Helvetica text stream per page) and DOCX files of as many headed sections (python-docx), each
page or section `--words` words drawn from a fixed vocabulary. Then
1. converts every file (`shared.documents.load_documents`) on one thread: pages/s and MB/s;
2. ingests the folder (`cli.folder_ingest.FolderIngest`) into an in-process KnowledgeStore core
   in a temporary directory, embedding through an in-process LlmOrchestration core (local
   all-MiniLM-L6-v2, its default runtime): files/s, pages/s, MB/s, and seconds spent
   converting, embedding and committing. `--no-embed` stops after step 1.
Prints a table, then one JSON line with every figure.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path

VOCAB = ("battery firmware dock charging robot fleet console update safety sensor lidar map mission "
         "warehouse aisle pallet route operator shift report incident ticket policy travel expense "
         "approval budget invoice contract supplier audit review release version module network").split()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n)).capitalize() + "."


def _lines(text: str, width: int = 90) -> list[str]:
    out, cur = [], ""
    for word in text.split():
        if len(cur) + len(word) + 1 > width:
            out.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    return out + ([cur] if cur else [])


def generate(root: Path, pdfs: int, docx_files: int, pages: int, words: int) -> tuple[int, int]:
    """Write the sample folder; (files, pages or sections in all)."""
    import docx

    from benchmarks.sample_files import pdf_bytes

    rng = random.Random(7)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(pdfs):
        (root / f"report-{i:04d}.pdf").write_bytes(
            pdf_bytes([_lines(_words(rng, words)) for _ in range(pages)], title=f"Report {i}"))
    for i in range(docx_files):
        d = docx.Document()
        d.add_heading(f"Memo {i}", 0)
        for s in range(pages):
            d.add_heading(f"Section {s + 1}", 1)
            d.add_paragraph(_words(rng, words))
        d.save(str(root / f"memo-{i:04d}.docx"))
    return pdfs + docx_files, (pdfs + docx_files) * pages


def convert_all(root: Path) -> dict[str, float]:
    from shared.documents import iter_paths, load_documents

    paths = list(iter_paths(root))
    size = sum(p.stat().st_size for p in paths)
    started = time.perf_counter()
    pages = sum(load_documents(p).pages for p in paths)
    seconds = time.perf_counter() - started
    return {"files": len(paths), "mb": size / 1e6, "pdf_pages": pages, "convert_s": seconds,
            "files_per_s": len(paths) / seconds, "mb_per_s": size / 1e6 / seconds}


class _LocalEmbedder:
    def __init__(self) -> None:
        from services.llm_orchestration.core import LlmOrchestrator
        from shared.settings import LlmOrchestrationSettings

        self._orch = LlmOrchestrator(LlmOrchestrationSettings(cache_size=0))

    async def start(self) -> None:
        await self._orch.start()

    async def close(self) -> None:
        await self._orch.close()

    async def embed(self, texts: list[str]):
        return (await self._orch.embed(texts, purpose="document")).vectors


async def ingest_all(root: Path, work: Path, pages: int) -> dict[str, float]:
    from cli.folder_ingest import FolderIngest
    from services.knowledge_store.embedded.core import KnowledgeStore
    from shared.settings import KnowledgeStoreSettings

    embedder = _LocalEmbedder()
    await embedder.start()                              # model load, not timed
    store = KnowledgeStore(KnowledgeStoreSettings(data_dir=work / "store"), embedder)
    try:
        summary = await FolderIngest(store, root, "bench").run()
        entries = sum(o.entries for o in summary.outcomes)
    finally:
        store.close()
        await embedder.close()
    size = sum(o.size for o in summary.outcomes)
    return {"ingest_s": summary.seconds, "ingest_convert_s": summary.convert_seconds,
            "ingest_embed_s": summary.embed_seconds, "ingest_commit_s": summary.commit_seconds,
            "entries": entries, "failed": len(summary.failed),
            "ingest_files_per_s": len(summary.outcomes) / summary.seconds,
            "ingest_pages_per_s": pages / summary.seconds, "ingest_mb_per_s": size / 1e6 / summary.seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", type=int, default=200)
    parser.add_argument("--docx", type=int, default=200)
    parser.add_argument("--pages", type=int, default=4, help="pages per PDF, sections per DOCX")
    parser.add_argument("--words", type=int, default=250, help="words per page or section")
    parser.add_argument("--no-embed", action="store_true", help="measure conversion only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nucleus-ingest-bench-") as tmp:
        root = Path(tmp) / "files"
        files, pages = generate(root, args.pdfs, args.docx, args.pages, args.words)
        figures = {"files": files, "pages_or_sections": pages, **convert_all(root)}
        figures["pages_per_s"] = pages / figures["convert_s"]
        if not args.no_embed:
            figures.update(asyncio.run(ingest_all(root, Path(tmp), pages)))
    for key, value in figures.items():
        print(f"{key:>20}  {value:,.2f}" if isinstance(value, float) else f"{key:>20}  {value}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
