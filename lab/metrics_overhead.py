"""What the Prometheus series cost: the same stack with the span-derived series on and off, in
alternating pairs within one run.

    .venv/bin/python -m lab.metrics_overhead --dataset ../shared/data/scifact \\
        [--pairs 8] [--queries 60] [--docs 400] [--mode single|split] [--scrape-interval-s 1]

Two stacks run side by side (their own data directories under .bench-cache/), both scraped
at `--scrape-interval-s` on every service's /metrics for the whole run (a stricter interval
than the shipped 15 s): "on" with the defaults, "off" with NUCLEUS_OTEL_PROMETHEUS=false (no
span-derived series; spans, trace files and scrape-time collectors unchanged). Each pair runs
`--queries` SearchAndRank calls, one at a time, on each stack, the order alternating from pair
to pair; per arm: p50 client latency and the stack processes' CPU ms per query (from /proc).
Printed: each pair, then the median paired difference (on - off) of p50 and CPU per query,
with the 1-minute load average. The query-embedding cache is off in both (every query embeds).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.beir import load_dataset
from lab.probe import _cpu_seconds
from benchmarks.queries import Method, RagClient
from shared.records import ArtifactMeta, DocumentIn

ROOT = Path(__file__).resolve().parents[1]
TENANT = "metrics-bench"
ARMS = ("on", "off")


async def _start(arm: str, args: argparse.Namespace, docs: list[DocumentIn]) -> tuple[object, dict]:
    from cli.supervisor import Supervisor
    from services.knowledge_store.client import KnowledgeStoreClient

    data = ROOT / ".bench-cache" / f"metrics-{arm}"
    shutil.rmtree(data, ignore_errors=True)
    env = {"NUCLEUS_DATA_DIR": str(data), "NUCLEUS_LLM_CACHE_SIZE": "0", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "NUCLEUS_OTEL_PROMETHEUS": "true" if arm == "on" else "false"}
    supervisor = Supervisor(data, ephemeral_ports=True, extra_env=env, mode=args.mode)
    services = supervisor.start(timeout_s=300)
    ks = KnowledgeStoreClient(services["knowledge_store"]["grpc"], ingest_timeout_s=900)
    try:
        for i in range(0, len(docs), 64):
            await ks.ingest(TENANT, "", docs[i:i + 64])
    finally:
        await ks.close()
    return supervisor, services


async def _scrape(urls: list[str], interval_s: float, stop: asyncio.Event) -> int:
    scrapes = 0
    async with httpx.AsyncClient(timeout=5) as client:
        while not stop.is_set():
            for url in urls:
                (await client.get(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
                 ).raise_for_status()
                scrapes += 1
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except TimeoutError:
                pass
    return scrapes


async def _arm(services: dict, queries: list[tuple[str, str]], args: argparse.Namespace) -> tuple[float, float]:
    """(p50 ms, stack CPU ms per query) of one arm."""
    pids = sorted({int(a["pid"]) for a in services.values()})
    client = RagClient(services["rag_pipeline"]["grpc"], top_k_initial=50, top_k_final=10, timeout_s=30)
    try:
        before = {pid: _cpu_seconds(pid) or 0.0 for pid in pids}
        latencies = []
        for qid, text in queries:
            record = await client.search(TENANT, Method("default"), qid, text)
            if record.error:
                raise RuntimeError(f"SearchAndRank failed: {record.error}")
            latencies.append(record.e2e_ms)
        cpu = sum((_cpu_seconds(pid) or 0.0) - before[pid] for pid in pids) * 1000 / len(queries)
    finally:
        await client.close()
    return statistics.median(latencies), cpu


async def run(args: argparse.Namespace) -> dict:
    dataset = load_dataset(args.dataset)
    docs = [DocumentIn(ArtifactMeta(artifact_id=d.id, title=d.title), d.text) for d in dataset.corpus[:args.docs]]
    texts = list(dataset.queries.items())
    stacks: dict[str, tuple[object, dict]] = {}
    stop = asyncio.Event()
    scraper = None
    try:
        for arm in ARMS:
            stacks[arm] = await _start(arm, args, docs)
        urls = [a["mcp"].removesuffix("/mcp") + "/metrics" for _, services in stacks.values()
                for a in services.values()]
        scraper = asyncio.create_task(_scrape(sorted(set(urls)), args.scrape_interval_s, stop))
        for arm in ARMS:                                           # warm-up: models, caches, indexes
            await _arm(stacks[arm][1], texts[:8], args)
        pairs = []
        for i in range(args.pairs):
            batch = texts[8 + i * args.queries: 8 + (i + 1) * args.queries] or texts[:args.queries]
            order = ARMS if i % 2 == 0 else ARMS[::-1]
            figures = {arm: await _arm(stacks[arm][1], batch, args) for arm in order}
            pairs.append(figures)
            print(f"pair {i + 1}: on p50 {figures['on'][0]:.2f} ms, {figures['on'][1]:.2f} ms CPU/q | "
                  f"off p50 {figures['off'][0]:.2f} ms, {figures['off'][1]:.2f} ms CPU/q | "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        stop.set()
        scrapes = await scraper if scraper is not None else 0
        for supervisor, _ in stacks.values():
            supervisor.stop()
    d_p50 = statistics.median(p["on"][0] - p["off"][0] for p in pairs)
    d_cpu = statistics.median(p["on"][1] - p["off"][1] for p in pairs)
    off_cpu = statistics.median(p["off"][1] for p in pairs)
    off_p50 = statistics.median(p["off"][0] for p in pairs)
    summary = {"mode": args.mode, "pairs": len(pairs), "queries_per_arm": args.queries, "docs": len(docs),
               "scrapes": scrapes, "median_d_p50_ms": d_p50, "median_d_cpu_ms_per_query": d_cpu,
               "off_p50_ms": off_p50, "off_cpu_ms_per_query": off_cpu}
    print(f"\n{args.mode} mode, {len(pairs)} pairs x {args.queries} queries, {len(docs)} docs, {scrapes} scrapes "
          f"every {args.scrape_interval_s:g} s:\n"
          f"  median paired difference (on - off): p50 {d_p50:+.2f} ms (off p50 {off_p50:.2f} ms), "
          f"CPU {d_cpu:+.3f} ms/query (off {off_cpu:.2f} ms/query; target <= +0.3)")
    return summary


def span_cost_us(n: int = 20_000) -> float:
    """µs of `ServiceMetrics.record_span` per span, over the span shapes of one SearchAndRank
    (a gRPC SERVER span, stage spans, a degraded-free root), on this thread: the CPU the series
    add per span, measured without the stacks' noise."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import SpanKind

    from shared.telemetry.prometheus import ServiceMetrics

    spans = []

    class Keep(SpanExporter):
        def export(self, batch):
            spans.extend(batch)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    tracer = provider.get_tracer("bench")
    with tracer.start_as_current_span("nucleus.v1.RagPipeline/SearchAndRank", kind=SpanKind.SERVER, attributes={
            "rpc.system": "grpc", "rpc.service": "nucleus.v1.RagPipeline", "rpc.method": "SearchAndRank",
            "rpc.grpc.status_code": 0}):
        for name in ("rag.embed", "rag.retrieve.keyword", "rag.retrieve.vector", "rag.merge", "rag.rank",
                     "rag.search_and_rank"):
            with tracer.start_as_current_span(name):
                pass
    metrics = ServiceMetrics("rag_pipeline", process_series=False)
    started = time.perf_counter()
    for i in range(n):
        metrics.record_span(spans[i % len(spans)])
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--mode", choices=("single", "split"), default="single")
    parser.add_argument("--scrape-interval-s", type=float, default=1.0)
    args = parser.parse_args()
    if args.pairs < 6:
        parser.error("--pairs must be >= 6")
    started = time.monotonic()
    per_span = span_cost_us()
    print(f"record_span: {per_span:.1f} µs per span on this thread (x ~20 spans per SearchAndRank in single mode "
          f"= {per_span * 20 / 1000:.3f} ms CPU per query, off the request path)", flush=True)
    asyncio.run(run(args))
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
