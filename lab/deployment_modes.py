"""Both deployment modes and the in-process baseline, side by side, in one run.

    .venv/bin/python -m lab.deployment_modes --dataset ../shared/data/scifact \\
        [--rounds 2] [--queries 200] [--per-client 30] [--clients 16]

Each round starts a stack per mode on the same data directory (`<stack dir>`, default
`.bench-cache/modes-stack`; the tenant is ingested once, through the first stack), one after
the other, never two at once (the embedded store owns its directory), then runs the in-process
baseline (benchmarks/baseline.py) over the same queries. Per mode and round:

    p50 / p95   SearchAndRank at agent size (--top-k-initial 50 --top-k-final 10), one query at a
                time, client clock, over the last --queries queries of the dataset; and the p50 of
                its embed stage (the server's timing) against the model alone encoding the same
                queries in this process (the baseline's encode)
    16 clients  queries/s, p50, p99, errors (`benchmarks.queries.run_concurrent`, as the probe)
    CPU         CPU ms per query of the stack's processes (from /proc, as lab/probe.py
                measures it; single mode is one process) and of this client, over the 16-client run
    threads     over the 16-client run, the cores kept busy and the CPU ms per query of each part
                of the stack's processes (`lab.probe.thread_times`): "loop", the main threads (the
                event loop, where a service's request Python runs — in single mode the one
                GIL-bound thread of the three services), with the time it was runnable but had
                no core ("loop wait"); "model", the embedding model's workers; "other"; and
                where a query waited under that load: the p50 of the server's embed stage and
                of its whole handler (SearchAndRank's own timings), and the p50 end to end less
                the handler's ("outside": queued in front of the handler, or its answer behind it);
                and what the main threads were doing, sampled every 5 ms (`lab.probe.LoopStates`):
                running (or runnable), idle in epoll (nothing ready), waiting on a futex (the GIL)
    memory      resident MiB of the stack's processes together, after the 16-client run
    spans       spans a SearchAndRank trace holds (the stack's own trace files, this round's traces):
                the median, for the searches that ran their keyword leg beside the embedding (a
                lone search) and for those that asked for both legs in one call (concurrent ones)

Both stacks run with LlmOrchestration's query-embedding cache off (NUCLEUS_LLM_CACHE_SIZE=0)
and the same tracing settings (the defaults: local trace files on). The 1-minute load average
is printed with every row: on a shared machine the figures are noisy, compare within a round.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.beir import load_dataset
from benchmarks.metrics import rss_mb
from lab.probe import LoopStates, _cpu_seconds, thread_shares, thread_times
from benchmarks.queries import Method, RagClient, run_concurrent
from benchmarks.tenants import TenantPlan, ingest_plan

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STACK = ROOT / ".bench-cache" / "modes-stack"
MODES = ("split", "single")
WARMUP = ("warm-up query one", "warm-up query two", "warm-up query three", "warm-up query four")


def _load() -> float:
    return os.getloadavg()[0]


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def start_stack(mode: str, stack_dir: Path, extra_env: dict[str, str] | None = None,
                commands: dict[str, list[str]] | None = None) -> tuple[Any, dict]:
    """A stack in `mode` on `stack_dir`, query-embedding cache off, `extra_env` on top (`commands`:
    argv per process, the Supervisor's): its Supervisor (stop it) and the services' addresses and pids."""
    from cli.supervisor import Supervisor

    env = {"NUCLEUS_DATA_DIR": str(stack_dir), "NUCLEUS_KS_DATA_DIR": str(stack_dir / "knowledge_store"),
           "NUCLEUS_LLM_CACHE_SIZE": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(extra_env or {})}
    (stack_dir / "run" / "stack.json").unlink(missing_ok=True)
    supervisor = Supervisor(stack_dir, ephemeral_ports=True, extra_env=env, mode=mode, commands=commands)
    return supervisor, supervisor.start(timeout_s=300)


async def measure_load(services: dict, work: list[tuple[str, str, str]], *, clients: int, per_client: int,
                       top_k_initial: int, top_k_final: int) -> dict:
    """`clients` × `per_client` queries of `work` against the stack's RAGPipeline: queries/s,
    p50 / p99, errors, CPU ms a query of the stack's processes and of this client, the loop /
    model / other split (`thread_times`), the loop's states (`LoopStates`) and the server's
    embed-stage and handler p50 under that load (module docstring)."""
    pids = sorted({int(a["pid"]) for a in services.values()})
    before = {pid: _cpu_seconds(pid) for pid in pids}
    threads_before = thread_times(pids)
    client_before = time.process_time()
    with LoopStates(pids) as states:
        result = await run_concurrent(services["rag_pipeline"]["grpc"], work, clients, per_client,
                                      top_k_initial=top_k_initial, top_k_final=top_k_final, timeout_s=30.0)
    done = max(1, result.completed)
    row: dict = {f"loop_{state}": share for state, share in states.shares().items()}
    row.update(thread_shares(threads_before, thread_times(pids), result.wall_s, result.completed))
    # where a query waited under load: the server's embed stage and whole handler (p50), and
    # the client's time outside the handler (p50 end to end − p50 handler: the gRPC front)
    row.update(embed_p50_at16=_pct(result.stages_ms.get("embed", []), 50),
               server_p50_at16=_pct(result.stages_ms.get("total", []), 50))
    stack_cpu = sum((_cpu_seconds(pid) or 0.0) - (before[pid] or 0.0) for pid in pids) * 1000 / done
    row.update(qps=result.qps, c_p50_ms=_pct(result.latencies_ms, 50), c_p99_ms=_pct(result.latencies_ms, 99),
               errors=result.errors, completed=result.completed, processes=len(pids),
               cpu_ms_per_query=stack_cpu, busy_cores=result.qps * stack_cpu / 1000,
               client_cpu_ms_per_query=(time.process_time() - client_before) * 1000 / done)
    return row


async def _measure_stack(mode: str, args: argparse.Namespace, plan: TenantPlan,
                         queries: list[tuple[str, str]]) -> dict:
    from services.knowledge_store.client import KnowledgeStoreClient

    supervisor, services = start_stack(mode, args.stack_dir)
    row: dict = {"mode": mode, "load_start": _load()}
    started_ns = time.time_ns()
    try:
        ks = KnowledgeStoreClient(services["knowledge_store"]["grpc"], ingest_timeout_s=900)
        try:
            await ingest_plan(ks, plan, args.stack_dir / "bench", batch=64)
        finally:
            await ks.close()
        target = services["rag_pipeline"]["grpc"]
        client = RagClient(target, top_k_initial=args.top_k_initial, top_k_final=args.top_k_final, timeout_s=30)
        try:
            for i, text in enumerate(WARMUP):
                await client.search(plan.tenant, Method("default"), f"w{i}", text)
            e2e, embed = [], []
            for qid, text in queries:
                record = await client.search(plan.tenant, Method("default"), qid, text)
                if record.error:
                    raise RuntimeError(f"{mode}: SearchAndRank failed: {record.error}")
                e2e.append(record.e2e_ms)
                embed.append(record.stages_ms.get("embed", float("nan")))
        finally:
            await client.close()
        row.update(p50_ms=statistics.median(e2e), p95_ms=_pct(e2e, 95), embed_p50_ms=statistics.median(embed))
        row.update(await measure_load(services, [(plan.tenant, qid, text) for qid, text in queries],
                                      clients=args.clients, per_client=args.per_client,
                                      top_k_initial=args.top_k_initial, top_k_final=args.top_k_final))
        pids = sorted({int(a["pid"]) for a in services.values()})
        row.update(rss_mib=sum(rss_mb(pid) for pid in pids), load_end=_load())
    finally:
        supervisor.stop()
    row.update(spans_per_query(args.stack_dir / "traces", started_ns))
    return row


def spans_per_query(traces: Path, since_ns: int) -> dict:
    """The median number of spans of the SearchAndRank traces begun after `since_ns` in the
    stack's trace files, by how the search ran its legs (module docstring: spans)."""
    found: dict[str, list[dict]] = {}
    for path in traces.glob("*.jsonl*"):
        if ".metrics." in path.name:
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                span = json.loads(line)
            except ValueError:
                continue
            found.setdefault(span["trace_id"], []).append(span)
    counts: dict[str, list[int]] = {"lone": [], "both_legs": []}
    for spans in found.values():
        root = [s for s in spans if s["name"] == "nucleus.v1.RagPipeline/SearchAndRank" and s["kind"] == "SERVER"]
        if not root or root[0]["start_unix_nano"] < since_ns:
            continue
        names = {s["name"] for s in spans}
        leg = "lone" if "rag.retrieve.keyword" in names else "both_legs" if "rag.retrieve.hybrid" in names else ""
        if leg:
            counts[leg].append(len(spans))
    return {f"spans_{leg}": statistics.median(n) if n else float("nan") for leg, n in counts.items()}


def _baseline(model, plan: TenantPlan, vectors: np.ndarray, queries: list[tuple[str, str]], depth: int) -> dict:
    from benchmarks.baseline import InProcessBaseline

    corpus = plan.dataset.corpus
    load_start = _load()
    baseline = InProcessBaseline(model, [corpus[r].id for r in plan.rows], [corpus[r].body for r in plan.rows],
                                 vectors[list(plan.rows)], depth=depth)
    for text in WARMUP * 2:
        baseline.search(text)
    timings = [baseline.search(text)[0].timings_ms for _, text in queries]
    total = [t["total"] for t in timings]
    return {"mode": "in-process baseline", "load_start": load_start, "p50_ms": statistics.median(total),
            "p95_ms": _pct(total, 95), "embed_p50_ms": statistics.median(t["encode"] for t in timings),
            "load_end": _load()}


def _print(rows: list[dict]) -> None:
    head = (f"{'round':>5}  {'mode':<20} {'load':>9}  {'p50 ms':>7} {'p95 ms':>7}  {'q/s@16':>7} {'p50@16':>7} "
            f"{'p99@16':>7} {'err':>4}  {'CPU ms/q':>8} {'client':>6}  {'RSS MiB':>8} {'procs':>5}")
    print(head)
    for r in rows:
        load = f"{r['load_start']:.1f}-{r['load_end']:.1f}"
        if "qps" in r:
            print(f"{r['round']:>5}  {r['mode']:<20} {load:>9}  {r['p50_ms']:7.1f} {r['p95_ms']:7.1f}  {r['qps']:7.1f} "
                  f"{r['c_p50_ms']:7.1f} {r['c_p99_ms']:7.1f} {r['errors']:>4}  {r['cpu_ms_per_query']:8.2f} "
                  f"{r['client_cpu_ms_per_query']:6.2f}  {r['rss_mib']:8.0f} {r['processes']:>5}")
        else:
            print(f"{r['round']:>5}  {r['mode']:<20} {load:>9}  {r['p50_ms']:7.1f} {r['p95_ms']:7.1f}")
    print(f"\n{'round':>5}  {'mode':<20} {'loop cores':>10} {'loop ms/q':>9} {'loop wait':>9}  "
          f"{'model cores':>11} {'model ms/q':>10}  {'other cores':>11} {'other ms/q':>10}  "
          f"{'embed@16':>8} {'server@16':>9} {'outside@16':>10}  {'loop: run / idle / GIL':>22}")
    for r in rows:
        if "loop_cores" in r:
            print(f"{r['round']:>5}  {r['mode']:<20} {r['loop_cores']:10.2f} {r['loop_ms']:9.2f} "
                  f"{r['loop_wait_cores']:9.2f}  {r['model_cores']:11.2f} {r['model_ms']:10.2f}  "
                  f"{r['other_cores']:11.2f} {r['other_ms']:10.2f}  {r['embed_p50_at16']:8.1f} "
                  f"{r['server_p50_at16']:9.1f} {r['c_p50_ms'] - r['server_p50_at16']:10.1f}  "
                  f"{r.get('loop_running', float('nan')):6.0%} / {r.get('loop_idle', float('nan')):4.0%} / "
                  f"{r.get('loop_gil', float('nan')):4.0%}")
    for rnd in sorted({r["round"] for r in rows}):
        by = {r["mode"]: r for r in rows if r["round"] == rnd}
        if {"split", "single", "in-process baseline"} <= set(by):
            s, p, b = by["single"], by["split"], by["in-process baseline"]
            print(f"round {rnd}: single/baseline p50 {s['p50_ms'] / b['p50_ms']:.2f}x, split/baseline "
                  f"{p['p50_ms'] / b['p50_ms']:.2f}x; single/split q/s@16 {s['qps'] / p['qps']:.2f}x; "
                  f"CPU ms/q single {s['cpu_ms_per_query']:.2f} vs split {p['cpu_ms_per_query']:.2f}; "
                  f"RSS single {s['rss_mib']:.0f} vs split {p['rss_mib']:.0f} MiB; embed stage p50 at one client "
                  f"single {s['embed_p50_ms']:.2f}, split {p['embed_p50_ms']:.2f} vs the model alone "
                  f"{b['embed_p50_ms']:.2f} ms ({s['embed_p50_ms'] / b['embed_p50_ms']:.2f}x, "
                  f"{p['embed_p50_ms'] / b['embed_p50_ms']:.2f}x); spans a query (lone / both legs in one "
                  f"call) single {s['spans_lone']:.0f} / {s['spans_both_legs']:.0f}, split {p['spans_lone']:.0f} / "
                  f"{p['spans_both_legs']:.0f}")


async def run(args: argparse.Namespace) -> list[dict]:
    from benchmarks.baseline import EmbeddingCache, load_model

    dataset = load_dataset(args.dataset)
    plan = TenantPlan(args.tenant, dataset, tuple(range(len(dataset.corpus))))
    queries = [(qid, dataset.queries[qid]) for qid in plan.query_ids][-args.queries:]
    model = load_model()
    vectors, _ = EmbeddingCache(args.cache_dir).corpus_vectors(dataset, model)
    rows: list[dict] = []
    for rnd in range(1, args.rounds + 1):
        order = MODES if rnd % 2 else tuple(reversed(MODES))       # alternate which mode goes first
        for mode in order:
            rows.append({"round": rnd, **await _measure_stack(mode, args, plan, queries)})
            print(json.dumps(rows[-1]), flush=True)
        rows.append({"round": rnd, **_baseline(model, plan, vectors, queries, args.top_k_final)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def add_load_arguments(parser: argparse.ArgumentParser, *, per_client: int) -> None:
    """The options this lab and `lab.mode_settings` share: the data, the stack, the load."""
    parser.add_argument("--tenant", default="scifact")
    parser.add_argument("--stack-dir", type=Path, default=DEFAULT_STACK)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--per-client", type=int, default=per_client)
    parser.add_argument("--top-k-initial", type=int, default=50)
    parser.add_argument("--top-k-final", type=int, default=10)
    parser.add_argument("--out", type=Path, help="also write the rows here as JSON")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.deployment_modes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="BEIR dataset directory")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".bench-cache", help="baseline embedding cache")
    parser.add_argument("--queries", type=int, default=200, help="last N judged queries")
    add_load_arguments(parser, per_client=30)
    args = parser.parse_args()
    args.stack_dir = args.stack_dir.resolve()
    rows = asyncio.run(run(args))
    print()
    _print(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
