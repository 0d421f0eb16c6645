"""Quick latency probe against a running stack: SearchAndRank end to end (client clock) and the
server's stage timings, p50 over the last N test queries of a BEIR dataset; optionally each
retrieval leg and the embedding called directly. For before/after checks of one change
(e.g. `OTEL_SDK_DISABLED=true` on the stack); `nucleus bench` is the benchmark of record.

    nucleus --data-dir D up --detach --ephemeral-ports
    .venv/bin/python -m lab.probe --data-dir D --dataset ../shared/data/scifact \\
        --tenant scifact --top-k-initial 50 --top-k-final 10 [--legs] [--clients 1,4,16]

`--clients` adds a throughput sweep as `nucleus bench` runs it (each client its own channel,
`--per-client` queries back to back; queries/s, p50/p99 under that load) and the CPU time each
service process and this client spent per query at that level (from /proc; Linux only).

A stack started by `nucleus up` keeps LlmOrchestration's query-embedding cache on: only the
first pass over a set of queries measures cold embeddings.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from benchmarks.queries import run_concurrent
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import RetrievalRequest
from services.llm_orchestration.client import LlmOrchestrationClient
from shared.grpc_client import aio_channel, call


def _p50(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far, None where /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


THREAD_GROUPS = ("loop", "model", "other")


def thread_group(pid: int, tid: int, comm: str) -> str:
    """Which part of a service process a thread is: "loop" (the main thread: the event loop,
    every request's Python), "model" (the embedding model's workers, named "embed…" by
    `shared.native_threads`), "other" (store readers, exporters, gRPC's own threads)."""
    if tid == pid:
        return "loop"
    return "model" if comm.startswith("embed") else "other"


def thread_times(pids: Sequence[int]) -> dict[str, dict[str, float]]:
    """Per thread group (THREAD_GROUPS) of the processes `pids`, summed: CPU seconds so far
    ("cpu", user + system) and seconds runnable but waiting for a core ("wait", from
    schedstat). Threads that ended are not counted (a difference of two snapshots undercounts
    them); {} where /proc cannot tell."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, dict[str, float]] = {g: {"cpu": 0.0, "wait": 0.0} for g in THREAD_GROUPS}
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return {}
        for tid in tids:
            base = Path(f"/proc/{pid}/task/{tid}")
            try:
                comm = (base / "comm").read_text().strip()
                fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
                sched = (base / "schedstat").read_text().split()
            except (OSError, IndexError):
                continue                # the thread ended meanwhile
            group = out[thread_group(pid, tid, comm)]
            group["cpu"] += (int(fields[11]) + int(fields[12])) / hz
            group["wait"] += int(sched[1]) / 1e9 if len(sched) > 1 else 0.0
    return out


def thread_shares(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]],
                  wall_s: float, done: int) -> dict[str, float]:
    """From two `thread_times` snapshots: per group, the cores it kept busy over `wall_s`
    (`<group>_cores`), its CPU ms per query (`<group>_ms`), and the loop's run-queue wait in
    cores (`loop_wait_cores`: runnable but no core free)."""
    if not before or not after or wall_s <= 0:
        return {}
    shares: dict[str, float] = {}
    for group in THREAD_GROUPS:
        cpu = after[group]["cpu"] - before[group]["cpu"]
        shares[f"{group}_cores"] = cpu / wall_s
        shares[f"{group}_ms"] = cpu * 1000 / max(1, done)
    shares["loop_wait_cores"] = (after["loop"]["wait"] - before["loop"]["wait"]) / wall_s
    return shares


#: x86-64 syscall numbers of what an idle or blocked event-loop thread sits in
_EPOLL_WAIT, _EPOLL_PWAIT, _FUTEX = 232, 281, 202


class LoopStates:
    """Samples, on a thread of this process, what the main threads of `pids` are doing
    (/proc/<pid>/task/<pid>/syscall, every `interval_s`): "running" (on a core, or runnable),
    "idle" (in epoll_wait: the event loop has nothing ready), "gil" (in futex: waiting for the
    GIL, or another lock), "other" (any other system call). `shares()` gives each state's share
    of the samples; empty where /proc cannot tell (not Linux, or not x86-64 numbering).

        with LoopStates(pids) as states:
            ... load ...
        states.shares()    # {"running": 0.73, "idle": 0.15, "gil": 0.11, "other": 0.01}
    """

    def __init__(self, pids: Sequence[int], interval_s: float = 0.005) -> None:
        self._pids = list(pids)
        self._interval_s = interval_s
        self._counts = {"running": 0, "idle": 0, "gil": 0, "other": 0}
        self._stop = None
        self._thread = None

    def _sample(self) -> None:
        import platform

        if platform.machine() not in ("x86_64", "AMD64"):
            return
        while not self._stop.wait(self._interval_s):
            for pid in self._pids:
                try:
                    call = Path(f"/proc/{pid}/task/{pid}/syscall").read_text().split()[0]
                except (OSError, IndexError):
                    continue
                if call == "running":
                    state = "running"
                elif call.lstrip("-").isdigit() and int(call) in (_EPOLL_WAIT, _EPOLL_PWAIT):
                    state = "idle"
                elif call.lstrip("-").isdigit() and int(call) == _FUTEX:
                    state = "gil"
                else:
                    state = "other"
                self._counts[state] += 1

    def __enter__(self) -> "LoopStates":
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="loop-states", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self) -> dict[str, float]:
        total = sum(self._counts.values())
        return {k: v / total for k, v in self._counts.items()} if total else {}


def _cpu_snapshot(pids: dict[str, int]) -> dict[str, float | None]:
    return {name: _cpu_seconds(pid) for name, pid in pids.items()} | {"client": time.process_time()}


async def probe(args: argparse.Namespace) -> None:
    services = json.loads((args.data_dir / "run" / "stack.json").read_text())["services"]
    lines = (args.dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    queries = [json.loads(line)["text"] for line in lines if line.strip()][-args.queries:]
    channel = aio_channel(services["rag_pipeline"]["grpc"])
    stub = rag_grpc.RagPipelineStub(channel)

    def request(text: str) -> rag_pb.SearchAndRankRequest:
        return rag_pb.SearchAndRankRequest(tenant_id=args.tenant, user_query_text=text,
                                           top_k_initial_retrieve=args.top_k_initial,
                                           top_k_final_rank=args.top_k_final)

    for text in ("warm-up query one", "warm-up query two", "warm-up query three"):
        await call(stub.SearchAndRank, request(text), timeout=30, service="RagPipeline")
    e2e: list[float] = []
    stages: dict[str, list[float]] = {}
    for text in queries:
        started = time.perf_counter()
        response = await call(stub.SearchAndRank, request(text), timeout=30, service="RagPipeline")
        e2e.append((time.perf_counter() - started) * 1000)
        for timing in response.timings:
            stages.setdefault(timing.stage, []).append(timing.ms)
    print(f"SearchAndRank p50 end to end {_p50(e2e)} ms;",
          " ".join(f"{stage}={_p50(ms)}" for stage, ms in stages.items()))
    await channel.close()
    if args.clients:
        work = [(args.tenant, str(i), text) for i, text in enumerate(queries)]
        by_pid: dict[int, list[str]] = {}          # one process may host several services (--mode single)
        for name, info in services.items():
            if info.get("pid"):
                by_pid.setdefault(int(info["pid"]), []).append(name)
        pids = {"+".join(names): pid for pid, names in by_pid.items()}
        for clients in args.clients:
            before = _cpu_snapshot(pids)
            result = await run_concurrent(services["rag_pipeline"]["grpc"], work, clients, args.per_client,
                                          top_k_initial=args.top_k_initial, top_k_final=args.top_k_final,
                                          timeout_s=30.0)
            lat = result.latencies_ms or [0.0]
            print(f"{clients:>3} clients: {result.qps:6.1f} queries/s, {result.completed} done, "
                  f"{result.errors} errors, p50 {_p50(lat)} ms, p99 {float(np.percentile(lat, 99)):.1f} ms")
            after = _cpu_snapshot(pids)
            spent = {name: (after[name] - start) * 1000 / max(1, result.completed)
                     for name, start in before.items() if start is not None and after[name] is not None}
            print("     CPU ms per query: " + ", ".join(f"{name} {ms:.2f}" for name, ms in spent.items())
                  + f" (total {sum(spent.values()):.2f})")
    if not args.legs:
        return
    ks = KnowledgeStoreClient(services["knowledge_store"]["grpc"])
    llm = LlmOrchestrationClient(services["llm_orchestration"]["grpc"])
    embed, vector, keyword = [], [], []
    for text in queries:
        started = time.perf_counter()
        vectors = await llm.embed([text])
        embed.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        columns = (await ks.retrieve(RetrievalRequest(args.tenant, text, args.top_k_initial, keyword=True))).keyword
        keyword.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await ks.retrieve(RetrievalRequest(args.tenant, text, args.top_k_initial, vectors=vectors, complete=True,
                                           complete_rows=columns.row_ids))
        vector.append((time.perf_counter() - started) * 1000)
    print(f"direct calls p50: embed {_p50(embed)} ms (cached after the pass above), "
          f"keyword leg {_p50(keyword)} ms, vector leg with score completion {_p50(vector)} ms")
    await asyncio.gather(ks.close(), llm.close())


def _client_counts(value: str) -> list[int]:
    try:
        counts = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: comma-separated client counts >= 1 are accepted, e.g. 1,4,16")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="data dir of the running stack")
    parser.add_argument("--dataset", type=Path, required=True, help="BEIR dataset (queries.jsonl)")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--queries", type=int, default=300, help="last N queries of queries.jsonl")
    parser.add_argument("--top-k-initial", type=int, default=50)
    parser.add_argument("--top-k-final", type=int, default=10)
    parser.add_argument("--legs", action="store_true", help="also time the embedding and each leg directly")
    parser.add_argument("--clients", type=_client_counts, default=[],
                        help="also a throughput sweep at these client counts, e.g. 1,4,16")
    parser.add_argument("--per-client", type=int, default=20, help="queries per client in the sweep (default 20)")
    asyncio.run(probe(parser.parse_args()))


if __name__ == "__main__":
    main()
