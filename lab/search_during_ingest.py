"""Searches during an ingest: do 4 search clients keep their latency while 1,500 documents are
ingested on the same stack? (issue "long work finishes", item "searches first")

    .venv/bin/python -m lab.search_during_ingest --dataset ../shared/data/scifact \\
        [--modes single,split] [--docs 1500] [--clients 4] [--batch 32]

Per mode, a fresh stack (`lab.deployment_modes.start_stack`: query-embedding cache off):
  1. a search tenant: the dataset's first 300 documents ingested, then `--clients` clients
     searching the dataset's queries for `--quiet-s` seconds: the quiet p50 / p99;
  2. the same clients searching while another tenant ingests the next `--docs` documents in
     requests of `--batch` (as `nucleus ingest` sends them): p50 / p99 during the ingest, the
     answers marked degraded, the errors, and the ingest's duration.
Prints a row per mode and phase, then the ratio of the two p99s (target <= 3x, 0 degraded).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.beir import load_dataset
from benchmarks.queries import Method, RagClient
from lab.deployment_modes import start_stack
from lab.probe import LoopStates, thread_shares, thread_times
from shared.records import ArtifactMeta, DocumentIn

ROOT = Path(__file__).resolve().parents[1]
WHERE = ("embed", "retrieve", "total", "outside")    # SearchAndRank's own stages, and the time outside its handler


def _docs(dataset, rows: range) -> list[DocumentIn]:
    corpus = dataset.corpus
    return [DocumentIn(ArtifactMeta(artifact_id=corpus[r].id, title=corpus[r].title), corpus[r].text) for r in rows]


async def _search_until(target: str, tenant: str, queries: list[tuple[str, str]], clients: int,
                        done: asyncio.Event) -> tuple[list[float], int, int, dict[str, list[float]]]:
    latencies: list[float] = []
    stages: dict[str, list[float]] = {}
    degraded = errors = 0

    async def one(index: int) -> None:
        nonlocal degraded, errors
        client = RagClient(target, top_k_initial=50, top_k_final=10, timeout_s=30)
        try:
            i = index
            while not done.is_set():
                qid, text = queries[i % len(queries)]
                i += clients
                record = await client.search(tenant, Method("default"), qid, text)
                if record.error:
                    errors += 1
                else:
                    latencies.append(record.e2e_ms)
                    degraded += record.degraded
                    for stage, ms in record.stages_ms.items():
                        stages.setdefault(stage, []).append(ms)
                    if "total" in record.stages_ms:     # queued in front of the handler, or its answer behind it
                        stages.setdefault("outside", []).append(record.e2e_ms - record.stages_ms["total"])
        finally:
            await client.close()

    await asyncio.gather(*(one(i) for i in range(clients)))
    return latencies, degraded, errors, stages


async def measure(mode: str, args: argparse.Namespace) -> list[dict]:
    from services.knowledge_store.client import KnowledgeStoreClient

    dataset = load_dataset(args.dataset)
    queries = [(qid, dataset.queries[qid]) for qid in list(dataset.queries)[:300]]
    stack_dir = args.stack_dir / mode
    shutil.rmtree(stack_dir, ignore_errors=True)
    supervisor, services = start_stack(mode, stack_dir)
    rows = []
    try:
        ks = KnowledgeStoreClient(services["knowledge_store"]["grpc"], ingest_timeout_s=900)
        target = services["rag_pipeline"]["grpc"]
        searched = _docs(dataset, range(300))
        for i in range(0, len(searched), args.batch):
            await ks.ingest("searched", "", searched[i:i + args.batch])
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(args.quiet_s, done.set)
        pids = sorted({int(a["pid"]) for a in services.values()})
        threads = thread_times(pids)
        with LoopStates(pids) as states:
            quiet, q_degraded, q_errors, q_stages = await _search_until(target, "searched", queries, args.clients,
                                                                        done)
        rows.append(_row(mode, "quiet", quiet, q_degraded, q_errors, args.quiet_s, q_stages,
                         thread_shares(threads, thread_times(pids), args.quiet_s, len(quiet)), states.shares()))
        ingested = _docs(dataset, range(300, 300 + args.docs))
        done = asyncio.Event()
        threads = thread_times(pids)
        with LoopStates(pids) as states:
            searching = asyncio.create_task(_search_until(target, "searched", queries, args.clients, done))
            t0 = time.perf_counter()
            try:
                for i in range(0, len(ingested), args.batch):
                    await ks.ingest("ingesting", "", ingested[i:i + args.batch])
            finally:
                done.set()
            took = time.perf_counter() - t0
            during, d_degraded, d_errors, d_stages = await searching
        rows.append(_row(mode, "during ingest", during, d_degraded, d_errors, took, d_stages,
                         thread_shares(threads, thread_times(pids), took, len(during)), states.shares()))
        await ks.close()
    finally:
        supervisor.stop()
    return rows


def _row(mode: str, phase: str, latencies: list[float], degraded: int, errors: int, seconds: float,
         stages: dict[str, list[float]], threads: dict[str, float], loop: dict[str, float]) -> dict:
    return {"mode": mode, "phase": phase, "searches": len(latencies), "degraded": degraded, "errors": errors,
            "p50_ms": float(np.percentile(latencies, 50)), "p99_ms": float(np.percentile(latencies, 99)),
            "seconds": seconds, "load": os.getloadavg()[0],
            "stages": {k: (float(np.percentile(v, 50)), float(np.percentile(v, 99))) for k, v in stages.items()
                       if k in WHERE},
            "cores": {k[:-6]: v for k, v in threads.items() if k.endswith("_cores")}, "loop": loop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--modes", default="single,split")
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--quiet-s", type=float, default=30.0)
    parser.add_argument("--stack-dir", type=Path, default=ROOT / ".bench-cache" / "search-during-ingest")
    args = parser.parse_args()
    rows = []
    for mode in args.modes.split(","):
        rows += asyncio.run(measure(mode, args))
    print(f"{'mode':<7} {'phase':<14} {'searches':>8} {'p50 ms':>7} {'p99 ms':>7} {'degraded':>8} {'errors':>6} "
          f"{'seconds':>7} {'load':>5}")
    for r in rows:
        print(f"{r['mode']:<7} {r['phase']:<14} {r['searches']:>8} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f} "
              f"{r['degraded']:>8} {r['errors']:>6} {r['seconds']:7.1f} {r['load']:5.1f}")
        print("    where, p50/p99 ms: " + ", ".join(f"{k} {a:.1f}/{b:.1f}" for k, (a, b) in r["stages"].items()))
        print("    cores busy: " + ", ".join(f"{k} {v:.2f}" for k, v in r["cores"].items())
              + "; main thread: " + ", ".join(f"{k} {v:.0%}" for k, v in r["loop"].items()))
    for mode in args.modes.split(","):
        quiet, during = (next(r for r in rows if r["mode"] == mode and r["phase"] == p)
                         for p in ("quiet", "during ingest"))
        print(f"{mode}: p99 during / quiet {during['p99_ms'] / quiet['p99_ms']:.2f}x (target <= 3x), "
              f"degraded {during['degraded']} (target 0)")


if __name__ == "__main__":
    main()
