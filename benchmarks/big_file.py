"""One big business file through `nucleus ingest`, against the model's own encode time for the
same chunks (issue "long work finishes": a 150,000-row parts list).

    .venv/bin/python -m benchmarks.big_file [--rows 150000] [--runs 3] [--use-running]

1. writes a parts list (`<cache-dir>/parts-<rows>.xlsx`, kept between runs): one sheet,
   a header and `--rows` rows of six columns (part number, name, category, price, stock,
   supplier), seeded;
2. cuts it into the texts the store embeds (its converter with the row limit raised to the
   file's rows, its chunker, as at ingest);
3. `--runs` interleaved rounds of (a) the model alone: those texts embedded by the stack's
   LlmOrchestration (its model, all-MiniLM-L6-v2 by default) in requests of the store's
   `embed_batch_size`, one at a time, after a warm-up; (b) `nucleus ingest <file> --no-manifest` into tenant
   `--tenant` of the stack (its own single-mode stack in `<cache-dir>/stack`, or the
   running one), with `NUCLEUS_INGEST_MAX_SHEET_ROWS` set to the rows, timed from start to exit;
4. prints each round and the median of model seconds ÷ ingest seconds (1.0: the ingest costs
   what its model does), then one JSON line.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.stack import add_running_arguments, open_stack

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench-cache" / "big-file"
WORDS = ("bracket", "valve", "gasket", "bearing", "sensor", "housing", "flange", "spring", "coupling", "relay",
         "washer", "nozzle", "filter", "actuator", "bushing", "clamp", "hinge", "manifold", "impeller", "seal")
CATEGORIES = ("hydraulics", "electrical", "fasteners", "pneumatics", "structural", "cooling", "drive train")
SUPPLIERS = ("Acme Industrial", "Borealis Parts", "Castell GmbH", "Delmar & Sons", "Everfast Ltd", "Fujiwara Co")


def write_parts(path: Path, rows: int, seed: int = 7) -> Path:
    """A parts list of `rows` rows (module docstring), written once."""
    if path.exists():
        return path
    from openpyxl import Workbook

    rng = random.Random(seed)
    book = Workbook(write_only=True)
    sheet = book.create_sheet("Parts")
    sheet.append(["Part number", "Name", "Category", "Unit price", "In stock", "Supplier"])
    for i in range(1, rows + 1):
        name = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randint(2, 400)} mm"
        sheet.append([f"P-{i:06d}", name, rng.choice(CATEGORIES), round(rng.uniform(0.2, 900.0), 2),
                      rng.randint(0, 5000), rng.choice(SUPPLIERS)])
    path.parent.mkdir(parents=True, exist_ok=True)
    book.save(str(path))
    return path


def chunk_texts(paths: list[Path], limits=None) -> list[list[str]]:
    """Per file, the texts the store embeds for it (its converter and chunker, as at ingest)."""
    from services.knowledge_store.chunking import PAGED_FILE_TYPES, chunk_document, context_line
    from services.knowledge_store.extraction import content_kind, to_text
    from services.knowledge_store.preparation import embed_text as _embed_text
    from shared.documents import load_documents
    from shared.settings import KnowledgeStoreSettings

    s = KnowledgeStoreSettings()
    out = []
    for path in paths:
        texts = []
        for doc in load_documents(path, limits=limits).documents:
            kind = content_kind(doc.content_type or "")
            meta = doc.artifact
            for c in chunk_document(to_text(doc.content, kind), markdown=kind != "plain", title=meta.title,
                                    chunk_tokens=s.chunk_tokens, overlap_tokens=s.chunk_overlap_tokens,
                                    split_sections=meta.file_type in PAGED_FILE_TYPES):
                texts.append(_embed_text(context_line(meta.title, c.path), c.text))
        out.append(texts)
    return out


async def model_seconds(llm_target: str, texts: list[str]) -> float:
    """The texts embedded by the stack's LlmOrchestration, as the store asks for them (requests of
    `embed_batch_size` document texts, one at a time), after a warm-up request."""
    from services.llm_orchestration.client import LlmOrchestrationClient
    from shared.settings import KnowledgeStoreSettings

    batch = KnowledgeStoreSettings().embed_batch_size
    llm = LlmOrchestrationClient(llm_target, timeout_s=600.0)
    try:
        await llm.embed(texts[:8], purpose="document")
        started = time.perf_counter()
        for i in range(0, len(texts), batch):
            await llm.embed(texts[i:i + batch], purpose="document")
        return time.perf_counter() - started
    finally:
        await llm.close()


def ingest_seconds(path: Path, data_dir: Path, tenant: str, rows: int) -> float:
    """`nucleus ingest` of the file as a process of its own, start to exit (raises on failure)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NUCLEUS_INGEST_MAX_SHEET_ROWS": str(rows)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.main", "--data-dir", str(data_dir), "ingest", str(path),
                           "--tenant", tenant, "--no-manifest"], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or "ingested" not in done.stdout:
        raise RuntimeError(f"nucleus ingest failed ({done.returncode}): {done.stdout[-600:]}{done.stderr[-600:]}")
    return seconds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.big_file", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=150_000, help="rows of the parts list (default 150000)")
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--tenant", default="xl150")
    p.add_argument("--cache-dir", type=Path, default=CACHE, help="where the file is written and kept "
                                                                 "(default .bench-cache/big-file)")
    add_running_arguments(p)
    p.add_argument("--stack-dir", type=Path, help="data directory of the stack it starts (default <cache-dir>/stack)")
    args = p.parse_args(argv)
    if args.rows < 1 or args.runs < 1:
        p.error("--rows and --runs must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    from shared.documents.limits import Limits

    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("NUCLEUS_MODE", "single")          # own stack: one process (Supervisor reads it)
    path = write_parts(args.cache_dir / f"parts-{args.rows}.xlsx", args.rows)
    started = time.perf_counter()
    [texts] = chunk_texts([path], Limits(max_sheet_rows=args.rows))
    figures: dict = {"rows": args.rows, "mb": round(path.stat().st_size / 1e6, 2), "chunks": len(texts),
                     "convert_and_chunk_s": round(time.perf_counter() - started, 2), "rounds": []}
    print(f"{path.name}: {figures['mb']} MB, {len(texts):,} chunks (converted and cut in "
          f"{figures['convert_and_chunk_s']} s)")
    stack = open_stack(args, args.stack_dir or args.cache_dir / "stack")
    try:
        for i in range(args.runs):
            model = asyncio.run(model_seconds(stack.grpc("llm_orchestration"), texts))
            ingest = ingest_seconds(path, stack.data_dir, args.tenant, args.rows)
            figures["rounds"].append({"model_s": round(model, 2), "ingest_s": round(ingest, 2),
                                      "ratio": round(model / ingest, 3)})
            print(f"round {i + 1}: model {model:.1f} s, nucleus ingest {ingest:.1f} s, model ÷ ingest "
                  f"{model / ingest:.3f}")
    finally:
        stack.stop()
    figures["median_ratio"] = statistics.median(r["ratio"] for r in figures["rounds"])
    print(f"median model ÷ ingest over {args.runs} rounds: {figures['median_ratio']:.3f} (target ≥ 0.85)")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
