"""Ingest at scale: a folder of N abstract-sized documents through the running services
(`nucleus ingest`), against the model-bound rate, with each service's memory and a resume
after the ingest is killed part-way.

    .venv/bin/python -m lab.ingest_scale [--docs 10000] [--kill-at 0.4] [--sample 1000]

1. writes N documents into `.bench-cache/ingest-scale/docs-<N>/` (kept between runs): each the
   size of a SciFact abstract — a SciFact title and as many sentences as that abstract has,
   resampled from the whole corpus (`../shared/data/scifact/corpus.jsonl`, seed 7); even
   numbers Markdown (`# title` + paragraphs), odd ones plain text;
2. model-bound rate: the first `--sample` chunk texts of those documents, cut by the store's own
   chunker exactly as at ingest, embedded by an in-process LlmOrchestration core (local
   all-MiniLM-L6-v2, default runtime and encode batch, cache off) in requests of the store's
   `embed_batch_size` (128), after a warm-up: chunks/s;
3. starts a stack (`benchmarks.stack.own_stack`, data in `.bench-cache/ingest-scale/stack/`,
   wiped first) and runs `nucleus ingest <folder> --tenant scale` as a subprocess, sampling
   the RSS of every service (/proc) each second; the CLI is killed (SIGKILL) once the tenant
   holds `--kill-at` of the documents, then run again: the resume's manifest skips what was
   recorded and re-sends the rest (`--kill-at 0`: one uninterrupted run); each service's RSS
   is reported at its peak and when the tenant held 25 %, 50 % and 100 % of the documents;
4. checks the tenant holds exactly N artifacts and the entries the chunker predicts (no
   document twice; GetTenantStats).
Prints a table, then one JSON line with every figure.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.big_file import chunk_texts
from benchmarks.metrics import rss_mb

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "scifact"
CACHE = ROOT / ".bench-cache" / "ingest-scale"
TENANT = "scale"
SEED = 7


# -- documents -----------------------------------------------------------------------------

def load_pool(corpus: Path = DATA / "corpus.jsonl") -> tuple[list[str], list[int], list[str]]:
    """(titles, sentences per abstract, every sentence) of the SciFact corpus."""
    titles, counts, sentences = [], [], []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            d = json.loads(line)
            parts = [s for s in re.split(r"(?<=[.!?])\s+", d["text"].strip()) if s]
            if not parts:
                continue
            titles.append(d["title"].strip() or parts[0][:80])
            counts.append(len(parts))
            sentences.extend(parts)
    return titles, counts, sentences


def generate(root: Path, n: int, titles: list[str], counts: list[int], sentences: list[str],
             seed: int = SEED) -> list[Path]:
    """Write documents 0..n-1 into `root` (deterministic for a seed); their paths."""
    if n < 1:
        raise ValueError("n: must be at least 1")
    if not titles or len(titles) != len(counts) or not sentences:
        raise ValueError("titles, counts, sentences: need one count per title and a non-empty sentence pool")
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        a = rng.randrange(len(titles))
        picked = [rng.choice(sentences) for _ in range(max(1, counts[a]))]
        half = max(1, len(picked) // 2)
        paras = [" ".join(picked[:half]), " ".join(picked[half:])]
        if i % 2 == 0:
            path, text = root / f"doc-{i:06d}.md", f"# {titles[a]}\n\n" + "\n\n".join(p for p in paras if p) + "\n"
        else:
            path, text = root / f"doc-{i:06d}.txt", f"{titles[a]}\n\n" + "\n\n".join(p for p in paras if p) + "\n"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


# chunk_texts: benchmarks/big_file.py (the store's cut, as the shipped benchmark makes it)


# -- model-bound rate ----------------------------------------------------------------------

async def model_rate(texts: list[str]) -> dict:
    from services.llm_orchestration.core import LlmOrchestrator
    from shared.settings import KnowledgeStoreSettings, LlmOrchestrationSettings

    batch = KnowledgeStoreSettings().embed_batch_size
    orch = LlmOrchestrator(LlmOrchestrationSettings(cache_size=0))
    await orch.start()
    try:
        await orch.embed(texts[:batch], purpose="document")             # warm-up
        started = time.perf_counter()
        for i in range(0, len(texts), batch):
            await orch.embed(texts[i:i + batch], purpose="document")
        seconds = time.perf_counter() - started
    finally:
        await orch.close()
    return {"model_chunks": len(texts), "model_s": seconds, "model_chunks_per_s": len(texts) / seconds}


# -- the ingest through the services -------------------------------------------------------

def stats(target: str, identity: Path):
    from services.knowledge_store.client import KnowledgeStoreClient
    from shared.auth.service_auth import operator_interceptors

    async def go():
        client = KnowledgeStoreClient(target, interceptors=operator_interceptors(identity, "knowledge_store"))
        try:
            return await client.stats(TENANT)
        finally:
            await client.close()

    return asyncio.run(go())


def run_ingest(folder: Path, stack, pids: dict[str, int], n: int, kill_at: float | None,
               samples: list[dict], t0: float) -> dict:
    """One `nucleus ingest` run; killed with SIGKILL once the tenant holds `kill_at`·n artifacts."""
    cmd = [sys.executable, "-m", "cli.main", "--data-dir", str(stack.data_dir), "ingest", str(folder),
           "--tenant", TENANT]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    log = (CACHE / f"ingest-{'first' if kill_at else 'resume'}.log").open("w")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    killed, last = False, 0
    while proc.poll() is None:
        time.sleep(1.0)
        row = {"t": time.perf_counter() - t0, **{name: rss_mb(pid) for name, pid in pids.items()},
               "cli": rss_mb(proc.pid)}
        try:
            last = stats(stack.grpc("knowledge_store"), stack.data_dir / "identity").artifacts
        except Exception:                                   # noqa: BLE001 — a sample may miss
            pass
        row["artifacts"] = last
        samples.append(row)
        if kill_at and last >= kill_at * n and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed = True
    log.close()
    return {"seconds": time.perf_counter() - started, "killed": killed, "exit": proc.returncode,
            "artifacts_after": stats(stack.grpc("knowledge_store"), stack.data_dir / "identity").artifacts}


def resume_counts(log_path: Path) -> tuple[int, int]:
    """(files unchanged, files ingested) from the resume run's summary table."""
    text = log_path.read_text(errors="replace")
    def files(status: str) -> int:
        m = re.search(rf"{status}\s*│\s*(\d+)", text)
        return int(m.group(1)) if m else -1
    return files("unchanged"), files("ingested")


def rss_at(samples: list[dict], name: str, fraction: float, n: int) -> float:
    for row in samples:
        if row["artifacts"] >= fraction * n:
            return row[name]
    return samples[-1][name] if samples else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--kill-at", type=float, default=0.4,
                        help="fraction of documents in, then SIGKILL and resume (0: one uninterrupted run)")
    parser.add_argument("--sample", type=int, default=1_000, help="chunks for the model-bound rate")
    args = parser.parse_args(argv)
    if args.docs < 1 or not 0 <= args.kill_at < 1:
        parser.error("--docs must be ≥ 1 and --kill-at in [0, 1)")
    from benchmarks.stack import own_stack

    n = args.docs
    folder = CACHE / f"docs-{n}"
    if not folder.is_dir() or sum(1 for _ in folder.iterdir()) != n:
        shutil.rmtree(folder, ignore_errors=True)
        generate(folder, n, *load_pool())
    paths = sorted(folder.iterdir())
    per_file = chunk_texts(paths)
    expected_entries = sum(len(t) for t in per_file)
    sample = [t for texts in per_file for t in texts][:args.sample]
    figures: dict = {"docs": n, "expected_entries": expected_entries,
                     "mb": sum(p.stat().st_size for p in paths) / 1e6}
    figures.update(asyncio.run(model_rate(sample)))

    stack_dir = CACHE / "stack"
    shutil.rmtree(stack_dir, ignore_errors=True)
    stack = own_stack(stack_dir)
    try:
        pids = {name: child.proc.pid for name, child in stack._supervisor.children.items()}
        samples: list[dict] = []
        t0 = time.perf_counter()
        if args.kill_at:
            first = run_ingest(folder, stack, pids, n, args.kill_at, samples, t0)
        else:
            first = {"seconds": 0.0, "killed": False, "artifacts_after": 0}
            (CACHE / "ingest-first.log").unlink(missing_ok=True)
        second = run_ingest(folder, stack, pids, n, None, samples, t0)
        final = stats(stack.grpc("knowledge_store"), stack.data_dir / "identity")
    finally:
        stack.stop()
    skipped, resent = resume_counts(CACHE / "ingest-resume.log")
    wall = first["seconds"] + second["seconds"]
    figures.update({
        "killed_at_artifacts": first["artifacts_after"], "killed": first["killed"],
        "resume_skipped_files": skipped, "resume_sent_files": resent,
        "resent_already_stored": resent - (n - first["artifacts_after"]) if resent >= 0 else -1,
        "resume_exit": second["exit"],
        "final_artifacts": final.artifacts, "final_entries": final.entries,
        "final_vectors": final.vectors,
        "exact": final.artifacts == n and final.entries == expected_entries == final.vectors,
        "first_s": first["seconds"], "resume_s": second["seconds"], "ingest_s": wall,
        "docs_per_s": n / wall, "chunks_per_s": final.entries / wall,
    })
    figures["ratio_to_model"] = figures["chunks_per_s"] / figures["model_chunks_per_s"]
    for name in [*pids, "cli"]:
        values = [r[name] for r in samples if r[name] == r[name]]
        figures[f"rss_{name}_peak_mb"] = max(values) if values else float("nan")
        figures[f"rss_{name}_at25_mb"] = rss_at(samples, name, 0.25, n)
        figures[f"rss_{name}_at50_mb"] = rss_at(samples, name, 0.5, n)
        figures[f"rss_{name}_at100_mb"] = rss_at(samples, name, 1.0, n) if name != "cli" else float("nan")
    for key, value in figures.items():
        print(f"{key:>30}  {value:,.2f}" if isinstance(value, float) else f"{key:>30}  {value}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0 if figures["exact"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
