"""The long reliability scenario: a real stack, broken the way an operator would break it. Not part
of `make test`; run it with `make reliability` or

    python -m lab.reliability [--docs 2000] [--kills 7] [--race-seconds 30] [--out DIR]

Phases (one line each, and a JSON report in `<out>/reliability.json`; exit 1 on any failure):

  ingest-under-kills  `--docs` documents ingested in batches while the KnowledgeStore is killed -9
                      `--kills` times (each time once it has served `--kill-interval` s); a batch
                      that was not acknowledged is sent again. Then every document is there once,
                      entries = vectors = keyword rows (CheckTenant), and the supervisor restarted
                      the store once per kill while the other services kept their processes.
  races               8 writers (upsert into more chunks, upsert into one, delete) against 8
                      readers (SearchAndRank over gRPC) for `--race-seconds`: no error, no degraded
                      answer, no result without text (an entry deleted mid-query).
  crash-loop          the KnowledgeStore is killed until the supervisor marks it failed: the other
                      services keep serving, stack.json says why; another try (what `nucleus up`
                      asks with SIGHUP) brings it back.
  disk                a KnowledgeStore on an 8 MiB tmpfs: ingest until RESOURCE_EXHAUSTED naming
                      the directory and its free space, searches still served, store degraded; the
                      file system grows: writes succeed and the store is ok again; remounted
                      read-only: the restarted store serves searches and refuses writes with
                      FAILED_PRECONDITION. Skipped, and reported so, where tmpfs cannot be mounted.
  backup-and-corruption  a backup while 4 writers ingest, restored into a fresh data directory
                      (every document acknowledged before its point there, none torn); random
                      bytes at six offsets of one of three tenants: reported, the others
                      untouched, the latest backup brings it back (lab/backup_scrub.py).

The scenario's supervisor uses the restart policy given by `--max-restarts`, `--window-s` and
`--max-delay-s` (short delays keep the run to a few minutes).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cli.restarts import FAILED, RUNNING, RestartPolicy
from cli.supervisor import GRPC_NAMES, SERVICES, Supervisor
from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import DeadlineExceeded, FailedPrecondition, NucleusError, StorageFull, Unavailable
from shared.healthcheck import health_ok
from shared.records import ArtifactMeta, DocumentIn, RetrievalRequest

WORDS = ("battery controller reset firmware update turbine inspection gearbox bearing vibration sensor "
         "calibration charging status light warranty incident report policy travel expense approval "
         "network switch outage backup restore schedule maintenance checklist safety procedure").split()
QUERIES = ("battery controller reset", "firmware update procedure", "turbine gearbox inspection",
           "incident report policy", "network outage restore", "sensor calibration checklist")
RETRYABLE = (Unavailable, DeadlineExceeded)


def make_doc(artifact_id: str, rng: random.Random, paragraphs: int) -> DocumentIn:
    body = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 140))) + "."
                       for _ in range(paragraphs))
    return DocumentIn(artifact=ArtifactMeta(artifact_id=artifact_id, title=f"Note {artifact_id}"), content=body)


class Report:
    def __init__(self) -> None:
        self.phases: dict[str, dict] = {}

    def phase(self, name: str, failures: list[str], **facts: object) -> None:
        self.phases[name] = {"failures": failures, **facts}
        mark = "ok  " if not failures else "FAIL"
        print(f"[{mark}] {name}: " + ", ".join(f"{k}={v}" for k, v in facts.items())
              + "".join(f"\n       - {f}" for f in failures[:10]), flush=True)

    @property
    def failures(self) -> int:
        return sum(len(p["failures"]) for p in self.phases.values())


async def ingest_with_retries(target: str, tenant: str, batch: list[DocumentIn], failures: list[str],
                              budget_s: float = 300.0) -> tuple[int, int]:
    """(entries acknowledged, retries): the batch is sent until acknowledged (upserts are idempotent)."""
    deadline, retries = time.monotonic() + budget_s, 0
    while True:
        client = KnowledgeStoreClient(target, timeout_s=30, ingest_timeout_s=120)
        try:
            return (await client.ingest(tenant, "", batch)).total_entries, retries
        except RETRYABLE as err:
            retries += 1
            if time.monotonic() > deadline:
                failures.append(f"batch {batch[0].artifact.artifact_id}… never acknowledged: {err}")
                return 0, retries
            await asyncio.sleep(0.5)
        finally:
            await client.close()


async def with_client(target: str, work):
    client = KnowledgeStoreClient(target, timeout_s=60, ingest_timeout_s=300)
    try:
        return await work(client)
    finally:
        await client.close()


def ks_pid(sup: Supervisor) -> int:
    return sup.children["knowledge_store"].proc.pid


def wait_state(sup: Supervisor, state: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sup.supervision["knowledge_store"].state == state:
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------------------- phases
async def ingest_under_kills(sup: Supervisor, args: argparse.Namespace, report: Report) -> None:
    target, failures = sup.children["knowledge_store"].address["grpc"], []
    others = {n: sup.children[n].proc.pid for n in SERVICES if n != "knowledge_store"}
    rng = random.Random(7)
    docs = [make_doc(f"doc{i:05d}", rng, rng.randint(1, 3)) for i in range(args.docs)]
    done, kills = threading.Event(), []

    def killer() -> None:
        while len(kills) < args.kills and not done.is_set():
            sup_state = sup.supervision["knowledge_store"]
            if sup_state.state == RUNNING and time.time() - sup_state.changed_unix >= args.kill_interval:
                os.kill(ks_pid(sup), signal.SIGKILL)
                kills.append(time.time())
                time.sleep(0.5)
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    started = time.monotonic()
    thread.start()
    entries = retries = 0
    for i in range(0, len(docs), args.batch):
        n, r = await ingest_with_retries(target, "reliability", docs[i:i + args.batch], failures)
        entries, retries = entries + n, retries + r
    done.set()
    thread.join(timeout=30)
    wait_state(sup, RUNNING, 120)
    stats = await with_client(target, lambda c: c.stats("reliability"))
    check = await with_client(target, lambda c: c.check_tenant("reliability", repair=False))
    if stats.artifacts != len(docs):
        failures.append(f"{stats.artifacts} artifacts stored, {len(docs)} acknowledged")
    if stats.entries != entries:
        failures.append(f"{stats.entries} entries stored, {entries} acknowledged (lost or duplicated)")
    if not check.consistent:
        failures.append(f"inconsistent after the kills: {check.summary()}")
    restarts = sup.supervision["knowledge_store"].restarts
    if restarts != len(kills):
        failures.append(f"{len(kills)} kills but {restarts} restarts")
    if any(sup.children[n].proc.pid != pid for n, pid in others.items()):
        failures.append("another service was restarted")
    report.phase("ingest-under-kills", failures, docs=len(docs), entries=entries, kills=len(kills),
                 restarts=restarts, retried_batches=retries, seconds=round(time.monotonic() - started, 1))


async def races(sup: Supervisor, args: argparse.Namespace, report: Report) -> None:
    import grpc

    from nucleus.v1 import rag_pipeline_pb2 as rag_pb
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc

    ks, failures = sup.children["knowledge_store"].address["grpc"], []
    rng = random.Random(11)
    owned = [[f"race{w}-{j}" for j in range(5)] for w in range(8)]
    await with_client(ks, lambda c: c.ingest("race", "", [make_doc(a, rng, 3) for ids in owned for a in ids]))
    deadline = time.monotonic() + args.race_seconds
    counts = {"writes": 0, "answers": 0, "results": 0}

    async def writer(ids: list[str]) -> None:
        client = KnowledgeStoreClient(ks, timeout_s=30, ingest_timeout_s=60)
        local = random.Random(ids[0])
        try:
            i = 0
            while time.monotonic() < deadline:
                aid = ids[i % len(ids)]
                try:
                    if i % 3 == 2:
                        await client.delete("race", [aid])
                    else:
                        await client.ingest("race", "", [make_doc(aid, local, 3 if i % 3 == 0 else 1)])
                    counts["writes"] += 1
                except NucleusError as err:
                    failures.append(f"write {aid}: {err}")
                i += 1
        finally:
            await client.close()

    async def reader(n: int) -> None:
        async with grpc.aio.insecure_channel(sup.children["rag_pipeline"].address["grpc"]) as channel:
            stub = rag_grpc.RagPipelineStub(channel)
            while time.monotonic() < deadline:
                request = rag_pb.SearchAndRankRequest(tenant_id="race", user_query_text=QUERIES[n % len(QUERIES)],
                                                      top_k_final_rank=10)
                try:
                    response = await stub.SearchAndRank(request, timeout=30)
                except grpc.aio.AioRpcError as err:
                    failures.append(f"SearchAndRank: {err.code().name} {err.details()}")
                    continue
                counts["answers"] += 1
                counts["results"] += len(response.results)
                if response.degraded:
                    failures.append(f"degraded: {'; '.join(response.degraded_reasons)}")
                failures.extend(f"result {r.persona_knowledge_entry_id} without text" for r in response.results
                                if not r.snippet)

    await asyncio.gather(*(writer(ids) for ids in owned), *(reader(n) for n in range(8)))
    report.phase("races", failures, seconds=args.race_seconds, **counts)


async def crash_loop(sup: Supervisor, report: Report) -> None:
    failures: list[str] = []
    kills = 0
    while sup.supervision["knowledge_store"].state != FAILED and kills <= sup.policy.max_restarts + 1:
        if not wait_state(sup, RUNNING, 120):
            break
        os.kill(ks_pid(sup), signal.SIGKILL)
        kills += 1
        time.sleep(0.3)
    state = json.loads(sup.state_file.read_text())["supervision"]["knowledge_store"]
    if state["state"] != "failed":
        failures.append(f"not marked failed after {kills} kills: {state}")
    for name in ("llm_orchestration", "rag_pipeline"):
        if not health_ok(sup.children[name].address["grpc"], GRPC_NAMES[name]):
            failures.append(f"{name} stopped serving while the store was failed")
    sup.retry_requested = True                     # what `nucleus up` asks with SIGHUP
    if not wait_state(sup, RUNNING, 120):
        failures.append("the store did not come back after another try")
    report.phase("crash-loop", failures, kills=kills, reason=state.get("reason", ""))


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _start_store(data_dir: Path, llm: str, ready: Path) -> subprocess.Popen:
    ready.unlink(missing_ok=True)
    env = {**os.environ, "NUCLEUS_KS_DATA_DIR": str(data_dir), "NUCLEUS_KS_GRPC_PORT": "0",
           "NUCLEUS_KS_MCP_PORT": "-1", "NUCLEUS_KS_LLM_TARGET": llm, "NUCLEUS_OTEL_TRACE_FILE": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "services.knowledge_store.main", "--ready-file", str(ready)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def disk(sup: Supervisor, out: Path, report: Report) -> None:
    mount = out / "small-fs"
    mount.mkdir(parents=True, exist_ok=True)
    if not _mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)):
        report.phase("disk", [], skipped="tmpfs cannot be mounted here (needs root / CAP_SYS_ADMIN)")
        return
    failures: list[str] = []
    ready, data = out / "small-ks.ready.json", mount / "ks"
    llm = sup.children["llm_orchestration"].address["grpc"]
    rng, proc = random.Random(5), None
    facts: dict[str, object] = {}
    try:
        proc = _start_store(data, llm, ready)
        target = json.loads(ready.read_text())["grpc"]
        full = None
        for i in range(400):
            try:
                await with_client(target, lambda c: c.ingest("t", "", [make_doc(f"d{i}-{j}", rng, 3)
                                                                       for j in range(10)]))
            except StorageFull as err:
                full = err
                break
        facts["batches_before_full"] = i
        if full is None or str(data) not in str(full) or "free" not in str(full):
            failures.append(f"no RESOURCE_EXHAUSTED naming {data} and its free space: {full}")
        hits = (await with_client(target, lambda c: c.retrieve(RetrievalRequest("t", "battery", 5, keyword=True, hits=True)))).keyword_hits
        if not hits:
            failures.append("searches not served on a full disk")
        if (await with_client(target, lambda c: c.store_status())).state != "degraded":
            failures.append("the store did not report itself degraded on a full disk")
        _mount("-o", "remount,size=32m", str(mount))
        await with_client(target, lambda c: c.ingest("t", "", [make_doc("after", rng, 1)]))
        if (await with_client(target, lambda c: c.store_status())).state != "ok":
            failures.append("still degraded after space was freed and a write succeeded")
        _stop(proc)
        if not _mount("-o", "remount,ro", str(mount)):
            failures.append("could not remount read-only")
        proc = _start_store(data, llm, ready)
        target = json.loads(ready.read_text())["grpc"]
        hits = (await with_client(target, lambda c: c.retrieve(RetrievalRequest("t", "battery", 5, keyword=True, hits=True)))).keyword_hits
        facts["read_only_hits"] = len(hits)
        if not hits:
            failures.append("a read-only data directory serves no searches")
        try:
            await with_client(target, lambda c: c.delete("t", ["after"]))
            failures.append("a write on a read-only data directory was accepted")
        except FailedPrecondition as err:
            facts["read_only_error"] = str(err)[:100]
    except (NucleusError, OSError, ValueError) as err:
        failures.append(f"{type(err).__name__}: {err}")
    finally:
        if proc is not None:
            _stop(proc)
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    report.phase("disk", failures, **facts)


# ---------------------------------------------------------------------------- main
async def run(sup: Supervisor, args: argparse.Namespace, report: Report) -> None:
    await ingest_under_kills(sup, args, report)
    await races(sup, args, report)
    await crash_loop(sup, report)
    await disk(sup, args.out, report)
    from lab.backup_scrub import reliability_phase

    failures, facts = await reliability_phase(sup.children["knowledge_store"].address["grpc"], args.out / "backup")
    report.phase("backup-and-corruption", failures, **facts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.reliability", description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--kills", type=int, default=7)
    parser.add_argument("--kill-interval", type=float, default=5.0)
    parser.add_argument("--race-seconds", type=float, default=30.0)
    parser.add_argument("--max-restarts", type=int, default=10)
    parser.add_argument("--window-s", type=float, default=300.0)
    parser.add_argument("--max-delay-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None, help="report and data directory (default: a temp dir)")
    args = parser.parse_args(argv)
    args.out = (args.out or Path(tempfile.mkdtemp(prefix="nucleus-reliability-"))).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    policy = RestartPolicy(max_restarts=args.max_restarts, window_s=args.window_s, max_delay_s=args.max_delay_s)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NUCLEUS_OTEL_TRACE_FILE": "false"}
    sup = Supervisor(args.out / "stack", ephemeral_ports=True, extra_env=env, policy=policy)
    print(f"reliability scenario in {args.out} (restarts: {policy.describe()}, back-off up to "
          f"{policy.max_delay_s:g}s)", flush=True)
    sup.start(timeout_s=240)
    stop = [False]
    monitor = threading.Thread(target=sup.monitor, args=(stop,), daemon=True)
    monitor.start()
    report = Report()
    try:
        asyncio.run(run(sup, args, report))
    finally:
        stop[0] = True
        monitor.join(timeout=10)
        sup.stop()
    (args.out / "reliability.json").write_text(json.dumps(report.phases, indent=2))
    print(f"{report.failures} failures; report: {args.out / 'reliability.json'}", flush=True)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
