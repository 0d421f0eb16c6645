"""Soak: a stack under a steady, seeded mix of reads and writes for minutes, sampled as it goes.

    python -m benchmarks.soak --minutes 30 --seed 1                  # own single-mode stack
    python -m benchmarks.soak --seconds 180 --interval 30 --seed 1
    python -m benchmarks.soak --use-running --data-dir .nucleus-data --minutes 30

Stack: without `--use-running`, `benchmarks.stack.own_stack` on `--stack-dir` (default
`.bench-cache/soak-stack`) in single mode (NUCLEUS_MODE, when set, decides); a healthy stack already
serving that directory is used. With `--use-running`, the one in `<data-dir>/run/stack.json`.

Before the clock starts the tenant gets the first `--docs` documents of `--dataset` (only those it
lacks, looked up by id). Then, until the time is up, in one tenant:

    searchers   `--clients` RAGPipeline.SearchAndRank clients back to back, a seeded query each,
                30 % of them with the soak ranking profile
    writer      re-ingests one of a fixed set of documents (a tenth of them, at most 40) with new
                content, ~1/s
    deleter     deletes one of another such set, or re-ingests one it deleted, ~1 per 5 s
    folder      rewrites a small folder (a file changed, removed, added) and syncs it with the
                library behind `nucleus ingest <folder> --sync` (cli/folder_ingest.py), ~1 per 15 s
    profile     RAGPipeline.PutRankingProfile of the soak profile, a new dense weight, ~1 per 10 s
    feedback    RAGPipeline.RecordFeedback on a document nobody rewrites, ~2/s

Every `--interval` seconds (default 60) a row: resident memory (MiB), open file descriptors and
threads of the stack's processes (/proc), the tenant's SQLite WAL size, what the KnowledgeStore
reports of its open tenants (GetStoreStatus: count, estimated MiB), the interval's searches (count,
p50, p99, errors, degraded answers), other errors, acknowledged writes and the 1-minute load
average. An error is any non-OK status for a valid request.

At the end every acknowledged write is read back by id (KnowledgeStore.GetEntries, chunk 0 of its
artifact) and must carry its latest content; every artifact whose last acknowledged operation was a
delete must be absent. Targets (`targets`), each PASS, FAIL or n/a (run too short); exit 1 on a FAIL:

    after the first --settle-minutes (10): RSS grows <= 5 %, fds and threads vary by <= 5
    p99 of the last 10 minutes <= 1.3 x p99 of minutes 5-15 (runs of 25 minutes or more)
    0 errors, 0 lost writes, 0 resurrected deletes
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.beir import Doc, load_corpus, load_queries
from benchmarks.metrics import percentile, rss_mb
from benchmarks.stack import Stack, add_running_arguments, open_stack
from cli.folder_ingest import FolderIngest
from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.embedded.storage.db import DB_FILE, tenant_dir_name
from shared.documents.manifest import Manifest
from shared.errors import NucleusError
from shared.grpc_client import aio_channel, call
from shared.records import ArtifactMeta, DocumentIn

PROFILE = "soak"
FOLDER_FILES = 6
EVERY_S = {"writer": 1.0, "deleter": 5.0, "folder": 15.0, "profile": 10.0, "feedback": 0.5}   # mean pause
P99_EARLY, P99_LATE_S, P99_RATIO = (300.0, 900.0), 600.0, 1.3
RSS_GROWTH, FD_THREAD_SPREAD = 0.05, 5


@dataclass
class Run:
    """What the actors share: the acknowledged-operations ledger, errors and search samples."""
    started: float = field(default_factory=time.monotonic)
    latest: dict[str, tuple[str, str]] = field(default_factory=dict)   # artifact -> ("write", marker) | ("delete", "")
    acked_writes: int = 0
    acked_deletes: int = 0
    searches: list[tuple[float, float, bool, bool]] = field(default_factory=list)   # (t, ms, ok, degraded)
    errors: list[tuple[float, str]] = field(default_factory=list)                   # (t, what) other than searches
    search_errors: Counter[str] = field(default_factory=Counter)                    # kind: message -> count

    def now(self) -> float:
        return time.monotonic() - self.started

    def wrote(self, artifact_id: str, marker: str) -> None:
        self.latest[artifact_id] = ("write", marker)
        self.acked_writes += 1

    def deleted(self, artifact_id: str) -> None:
        self.latest[artifact_id] = ("delete", "")
        self.acked_deletes += 1

    def failed(self, what: str, err: Exception, artifact_ids: tuple[str, ...] = ()) -> None:
        """A failed call: an error; the artifacts it touched are left out of the read-back (their
        state is whatever the store made of it)."""
        self.errors.append((self.now(), f"{what}: {getattr(err, 'kind', type(err).__name__)}: {err}"))
        for a in artifact_ids:
            self.latest.pop(a, None)


def document(doc: Doc, marker: str) -> DocumentIn:
    """The dataset document with `marker` opening its content (chunk 0 carries it)."""
    return DocumentIn(ArtifactMeta(artifact_id=doc.id, title=doc.title.strip(), source_type="soak"),
                      f"{marker} {doc.text or doc.title}")


async def _pause(rng: random.Random, name: str, stop: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(stop.wait(), rng.expovariate(1.0 / EVERY_S[name]))
    except TimeoutError:
        pass


# ---- the actors ------------------------------------------------------------------------------

async def searcher(rag, tenant: str, queries: list[str], rng: random.Random, run: Run, stop: asyncio.Event,
                   timeout_s: float) -> None:
    while not stop.is_set():
        prefs = pb.RankingPreferences(profile_name=PROFILE if rng.random() < 0.3 else "")
        request = rag_pb.SearchAndRankRequest(tenant_id=tenant, user_query_text=rng.choice(queries),
                                              top_k_initial_retrieve=50, top_k_final_rank=10, ranking_prefs=prefs)
        began = time.perf_counter()
        try:
            response = await call(rag.SearchAndRank, request, timeout=timeout_s, service="RAGPipeline")
            ok, degraded = True, response.degraded
        except NucleusError as err:
            ok, degraded = False, False
            run.search_errors[f"{err.kind}: {str(err)[:120]}"] += 1
        run.searches.append((run.now(), (time.perf_counter() - began) * 1000, ok, degraded))


async def _rewrite(ks: KnowledgeStoreClient, tenant: str, doc: Doc, marker: str, run: Run, what: str) -> None:
    """`doc` ingested again with `marker` in its content, acknowledged to `run` (or its failure)."""
    try:
        await ks.ingest(tenant, "", [document(doc, marker)])
        run.wrote(doc.id, marker)
    except NucleusError as err:
        run.failed(what, err, (doc.id,))


async def writer(ks: KnowledgeStoreClient, tenant: str, docs: list[Doc], rng: random.Random, run: Run,
                 stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        doc, n = rng.choice(docs), n + 1
        await _rewrite(ks, tenant, doc, f"soak-w{n}-{rng.getrandbits(32):08x}", run, "ingest")
        await _pause(rng, "writer", stop)


async def deleter(ks: KnowledgeStoreClient, tenant: str, docs: list[Doc], rng: random.Random, run: Run,
                  stop: asyncio.Event) -> None:
    present, gone, n = list(docs), [], 0
    while not stop.is_set():
        if gone and (rng.random() < 0.5 or not present):
            doc, n = gone.pop(rng.randrange(len(gone))), n + 1
            await _rewrite(ks, tenant, doc, f"soak-r{n}-{rng.getrandbits(32):08x}", run, "re-ingest")
            present.append(doc)
        else:
            doc = present.pop(rng.randrange(len(present)))
            try:
                await ks.delete(tenant, [doc.id])
                run.deleted(doc.id)
            except NucleusError as err:
                run.failed("delete", err, (doc.id,))
            gone.append(doc)
        await _pause(rng, "deleter", stop)


class Folder:
    """A small folder of dataset texts the run rewrites, kept in sync with the tenant."""

    def __init__(self, root: Path, ks: KnowledgeStoreClient, tenant: str, texts: list[Doc], rng: random.Random):
        self.root, self.ks, self.tenant, self.texts, self.rng = root, ks, tenant, texts, rng
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest_path = root.parent / f"{root.name}.manifest.json"
        self.markers: dict[str, str] = {}          # file name -> marker of its current content
        self.n = 0
        for old in self.root.glob("*.txt"):
            old.unlink()
        for i in range(FOLDER_FILES):
            self.write(f"f{i}.txt")

    def write(self, name: str) -> None:
        self.n += 1
        marker = f"soak-f{self.n}-{self.rng.getrandbits(32):08x}"
        (self.root / name).write_text(f"{marker} {self.rng.choice(self.texts).text}\n")
        self.markers[name] = marker

    def change(self) -> None:
        names = sorted(self.markers)
        self.write(self.rng.choice(names))
        if len(names) > 3:
            gone = self.rng.choice(names)
            (self.root / gone).unlink()
            del self.markers[gone]
        if len(self.markers) < FOLDER_FILES + 2:
            self.write(f"f{max(int(n[1:-4]) for n in names) + 1}.txt")

    async def sync(self, run: Run) -> None:
        manifest = Manifest.load(self.manifest_path, self.root)
        before = {rel: rec.artifact_ids for rel, rec in manifest.files.items()}
        try:
            summary = await FolderIngest(self.ks, self.root, self.tenant, manifest=manifest, sync=True).run()
        except NucleusError as err:
            run.failed("folder sync", err, tuple(a for ids in before.values() for a in ids))
            return
        for o in summary.failed:
            run.errors.append((run.now(), f"folder sync: {o.path}: {o.reason} {o.detail}"))
        after = {rel: rec.artifact_ids for rel, rec in manifest.files.items()}
        for rel, ids in before.items():
            for a in set(ids) - set(after.get(rel, ())):
                run.deleted(a)
        for rel, ids in after.items():
            for a in ids:
                run.wrote(a, self.markers[rel])


async def folder_syncer(folder: Folder, rng: random.Random, run: Run, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await _pause(rng, "folder", stop)
        folder.change()
        await folder.sync(run)


async def profiler(rag, tenant: str, rng: random.Random, run: Run, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await put_profile(rag, tenant, rng.choice((0.3, 0.5, 0.7)))
        except NucleusError as err:
            run.failed("PutRankingProfile", err)
        await _pause(rng, "profile", stop)


async def put_profile(rag, tenant: str, dense_weight: float) -> None:
    await call(rag.PutRankingProfile, pb.RankingProfile(
        tenant_id=tenant, name=PROFILE, relevancy_weight=1.0, recency_weight=0.1, richness_weight=0.1,
        reputation_weight=0.2, fusion_method=pb.FUSION_METHOD_CONVEX, dense_weight=dense_weight,
        recency_mode=pb.RECENCY_MODE_NEVER, recency_half_life_days=180.0, reputation_prior_strength=4.0),
        timeout=10.0, service="RAGPipeline")


async def feedback(rag, tenant: str, docs: list[Doc], rng: random.Random, run: Run, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await call(rag.RecordFeedback, pb.Feedback(
                tenant_id=tenant, target=pb.FEEDBACK_TARGET_ARTIFACT, target_id=rng.choice(docs).id,
                helpful=rng.random() < 0.7, user_id=f"soak-user-{rng.randrange(20)}"),
                timeout=10.0, service="RAGPipeline")
        except NucleusError as err:
            run.failed("RecordFeedback", err)
        await _pause(rng, "feedback", stop)


# ---- sampling ----------------------------------------------------------------------------------

def _proc(pid: int) -> tuple[float, int, int]:
    """(RSS MiB, open fds, threads) of a process from /proc; NaN / -1 once it is gone."""
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        threads = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                           if line.startswith("Threads:")))
    except (OSError, StopIteration):
        return math.nan, -1, -1
    return rss_mb(pid), fds, threads


async def sample(ks: KnowledgeStoreClient, tenant: str, pids: list[int], run: Run, since: float) -> dict:
    """One row: the stack's processes now, the KnowledgeStore's view, and the searches since `since`."""
    procs = [_proc(pid) for pid in pids]
    row = {"t": run.now(), "rss_mib": sum(p[0] for p in procs), "fds": sum(p[1] for p in procs),
           "threads": sum(p[2] for p in procs), "wal_mib": math.nan, "open_tenants": -1, "tenant_mib": math.nan}
    if any(p[1] < 0 for p in procs):
        run.errors.append((run.now(), f"a stack process exited (pids {pids})"))
    try:
        status = await ks.store_status()
        row.update(open_tenants=status.open_tenants, tenant_mib=status.open_tenant_bytes / 2**20)
        wal = Path(status.data_dir) / "tenants" / tenant_dir_name(tenant) / f"{DB_FILE}-wal"
        row["wal_mib"] = wal.stat().st_size / 2**20 if wal.is_file() else 0.0
    except NucleusError as err:
        run.failed("GetStoreStatus", err)
    window = [s for s in run.searches if since <= s[0] < row["t"]]
    ok_ms = [ms for _, ms, ok, _ in window if ok]
    row.update(searches=len(ok_ms), p50_ms=percentile(ok_ms, 50), p99_ms=percentile(ok_ms, 99),
               search_errors=sum(1 for s in window if not s[2]), degraded=sum(1 for s in window if s[3]),
               other_errors=sum(1 for t, _ in run.errors if since <= t < row["t"]),
               acked_writes=run.acked_writes, load1=os.getloadavg()[0])
    return row


ROW = ("{t:>6.0f} {rss_mib:>8.0f} {fds:>5} {threads:>7} {wal_mib:>7.1f} {open_tenants:>7} {tenant_mib:>8.1f} "
       "{searches:>8} {p50_ms:>7.0f} {p99_ms:>7.0f} {search_errors:>6} {degraded:>5} {other_errors:>6} "
       "{acked_writes:>6} {load1:>5.1f}")
HEAD = (f"{'t s':>6} {'RSS MiB':>8} {'fds':>5} {'threads':>7} {'WAL MiB':>7} {'tenants':>7} {'KS MiB':>8} "
        f"{'searches':>8} {'p50 ms':>7} {'p99 ms':>7} {'s.err':>6} {'degr':>5} {'errors':>6} {'writes':>6} "
        f"{'load':>5}")


# ---- verdicts ----------------------------------------------------------------------------------

async def read_back(ks: KnowledgeStoreClient, tenant: str, run: Run) -> tuple[int, int, list[str]]:
    """(lost writes, resurrected deletes, examples): chunk 0 of each artifact by id."""
    ids = sorted(run.latest)
    found: dict[str, str] = {}
    for i in range(0, len(ids), 100):
        for hit in await ks.get_entries(tenant, [f"{a}#0" for a in ids[i:i + 100]]):
            found[hit.entry.artifact_id] = hit.entry.text
    lost, resurrected, examples = 0, 0, []
    for a in ids:
        op, marker = run.latest[a]
        if op == "write" and marker not in found.get(a, ""):
            lost += 1
            examples.append(f"lost write {a}: expected {marker}, found {found.get(a, '(absent)')[:60]!r}")
        elif op == "delete" and a in found:
            resurrected += 1
            examples.append(f"resurrected delete {a}: {found[a][:60]!r}")
    return lost, resurrected, examples


def targets(rows: list[dict], searches: list[tuple[float, float, bool, bool]], errors: int, lost: int,
            resurrected: int, duration_s: float, settle_s: float) -> list[tuple[str, str, bool | None]]:
    """(target, figure, passed) per target; passed None = not evaluated (the run is too short)."""
    out: list[tuple[str, str, bool | None]] = []
    settled = [r for r in rows if r["t"] >= settle_s]
    what = f"after {settle_s / 60:g} min"
    if len(settled) >= 2:
        growth = settled[-1]["rss_mib"] / settled[0]["rss_mib"] - 1
        out.append((f"RSS growth {what} <= {RSS_GROWTH:.0%}", f"{growth:+.1%} "
                    f"({settled[0]['rss_mib']:.0f} -> {settled[-1]['rss_mib']:.0f} MiB)", growth <= RSS_GROWTH))
        for key in ("fds", "threads"):
            values = [r[key] for r in settled]
            spread = max(values) - min(values)
            out.append((f"{key} spread {what} <= {FD_THREAD_SPREAD}", f"{spread} ({min(values)}-{max(values)})",
                        spread <= FD_THREAD_SPREAD and min(values) >= 0))
    else:
        out += [(f"{k} {what}", "n/a: fewer than 2 samples after it", None) for k in ("RSS growth", "fds", "threads")]
    early_ms = [ms for t, ms, ok, _ in searches if ok and P99_EARLY[0] <= t < P99_EARLY[1]]
    late_ms = [ms for t, ms, ok, _ in searches if ok and t >= duration_s - P99_LATE_S]
    name = f"p99 last 10 min <= {P99_RATIO}x p99 min 5-15"
    if duration_s >= P99_EARLY[1] + P99_LATE_S and early_ms and late_ms:
        early, late = percentile(early_ms, 99), percentile(late_ms, 99)
        out.append((name, f"{late:.0f} vs {early:.0f} ms ({late / early:.2f}x)", late <= P99_RATIO * early))
    else:
        out.append((name, "n/a: run shorter than 25 min", None))
    search_errors = sum(1 for s in searches if not s[2])
    out.append(("errors == 0", f"{search_errors + errors} ({search_errors} search, {errors} other)",
                search_errors + errors == 0))
    out.append(("lost writes == 0", str(lost), lost == 0))
    out.append(("resurrected deletes == 0", str(resurrected), resurrected == 0))
    return out


# ---- the run -----------------------------------------------------------------------------------

async def soak(stack: Stack, args: argparse.Namespace) -> int:
    corpus = load_corpus(args.dataset / "corpus.jsonl")[:args.docs]
    queries = list(load_queries(args.dataset / "queries.jsonl").values())
    if len(corpus) < 20:
        raise SystemExit(f"--docs {args.docs}: {args.dataset} gives {len(corpus)} documents, at least 20 are needed")
    docs = list(corpus)
    random.Random(f"{args.seed}-docs").shuffle(docs)
    n = min(40, len(docs) // 10)           # the writer's and the deleter's sets; the rest only read
    written, deleted, still = docs[:n], docs[n:2 * n], docs[2 * n:]
    ks = KnowledgeStoreClient(stack.grpc("knowledge_store"), timeout_s=30.0, ingest_timeout_s=120.0)
    channel = aio_channel(stack.grpc("rag_pipeline"))
    rag = rag_grpc.RagPipelineStub(channel)
    pids = sorted({int(s["pid"]) for s in stack.services.values() if "pid" in s})
    try:
        began = time.perf_counter()
        missing = await _missing(ks, args.tenant, docs)
        for i in range(0, len(missing), 32):
            await ks.ingest(args.tenant, "", [document(d, "soak-base") for d in missing[i:i + 32]])
        await put_profile(rag, args.tenant, 0.5)
        folder = Folder(stack.data_dir / "soak" / f"{args.tenant}-folder", ks, args.tenant, still,
                        random.Random(f"{args.seed}-folder"))
        setup = Run()
        await folder.sync(setup)
        if setup.errors:
            raise RuntimeError(f"the folder's first sync failed: {setup.errors[0][1]}")
        print(f"setup: {len(docs) - len(missing)} of {len(docs)} documents present, {len(missing)} ingested, "
              f"folder synced, {time.perf_counter() - began:.0f} s; stack pids {pids}; tenant {args.tenant!r}; "
              f"{args.clients} search clients for {args.seconds:g} s, a row every {args.interval:g} s", flush=True)
        run = Run()                  # the clock starts now; the setup's writes are not the run's
        stop = asyncio.Event()
        rng = lambda name: random.Random(f"{args.seed}-{name}")          # noqa: E731
        actors = [searcher(rag, args.tenant, queries, rng(f"search{i}"), run, stop, args.timeout)
                  for i in range(args.clients)]
        actors += [writer(ks, args.tenant, written, rng("writer"), run, stop),
                   deleter(ks, args.tenant, deleted, rng("deleter"), run, stop),
                   folder_syncer(folder, rng("folder"), run, stop),
                   profiler(rag, args.tenant, rng("profile"), run, stop),
                   feedback(rag, args.tenant, still, rng("feedback"), run, stop)]
        tasks = [asyncio.ensure_future(a) for a in actors]
        print(HEAD, flush=True)
        rows: list[dict] = []
        since = 0.0
        while since < args.seconds - 1e-6:
            due = min(since + args.interval, args.seconds)
            done, _ = await asyncio.wait(tasks, timeout=max(0.0, due - run.now()),
                                         return_when=asyncio.FIRST_EXCEPTION)
            crashed = [t for t in done if t.exception() is not None]
            if crashed:
                raise crashed[0].exception()
            rows.append(await sample(ks, args.tenant, pids, run, since))
            print(ROW.format(**rows[-1]), flush=True)
            since = rows[-1]["t"]
        stop.set()
        async with asyncio.timeout(args.timeout + 130.0):        # in-flight calls finish within their deadlines
            await asyncio.gather(*tasks)
        lost, resurrected, examples = await read_back(ks, args.tenant, run)
    finally:
        await channel.close()
        await ks.close()
    searches = run.searches
    print(f"\n{len(searches)} searches, {run.acked_writes} acknowledged writes, {run.acked_deletes} acknowledged "
          f"deletes; read back {len(run.latest)} artifacts: {lost} lost writes, {resurrected} resurrected deletes")
    for line in (examples[:10] + [f"error at {t:.0f} s: {what}" for t, what in run.errors[:10]]
                 + [f"{n} searches failed: {what}" for what, n in run.search_errors.most_common(5)]):
        print("  " + line)
    verdicts = targets(rows, searches, len(run.errors), lost, resurrected, args.seconds, args.settle_minutes * 60)
    for name, figure, passed in verdicts:
        print(f"{'n/a ' if passed is None else 'PASS' if passed else 'FAIL'}  {name}: {figure}")
    return 1 if any(p is False for _, _, p in verdicts) else 0


async def _missing(ks: KnowledgeStoreClient, tenant: str, docs: list[Doc]) -> list[Doc]:
    present: set[str] = set()
    for i in range(0, len(docs), 100):
        try:
            ids = [f"{d.id}#0" for d in docs[i:i + 100]]
            present |= {h.entry.artifact_id for h in await ks.get_entries(tenant, ids)}
        except NucleusError as err:
            if err.kind != "not_found":       # a tenant that does not exist yet holds nothing
                raise
    return [d for d in docs if d.id not in present]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    length = p.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long the load runs (default 30; fractions allowed)")
    length.add_argument("--seconds", type=float, help="... or in seconds")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between rows (default 60)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset", type=Path, default=Path("../shared/data/scifact"),
                   help="BEIR-format folder with corpus.jsonl and queries.jsonl (default ../shared/data/scifact)")
    p.add_argument("--docs", type=int, default=1000, help="documents of it the tenant holds (default 1000)")
    p.add_argument("--tenant", default="soak")
    p.add_argument("--clients", type=int, default=16, help="search clients (default 16)")
    p.add_argument("--timeout", type=float, default=30.0, help="deadline per search, s (default 30)")
    p.add_argument("--settle-minutes", type=float, default=10.0,
                   help="RSS, fds and threads are judged after this (default 10)")
    add_running_arguments(p)
    p.add_argument("--stack-dir", type=Path, default=Path(".bench-cache/soak-stack"),
                   help="data directory of the stack it starts (default .bench-cache/soak-stack)")
    args = p.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else (args.minutes or 30.0) * 60
    if args.seconds <= 0 or args.interval <= 0 or args.clients < 1:
        p.error("--minutes/--seconds, --interval and --clients must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("NUCLEUS_MODE", "single")          # own stack: one process (Supervisor reads it)
    try:
        stack = open_stack(args, args.stack_dir)
    except NucleusError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(soak(stack, args))
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
