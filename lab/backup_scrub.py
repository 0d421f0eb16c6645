"""Backup, restore and scrub figures for the embedded KnowledgeStore (docs/BENCHMARKS.md, "Backups,
restores and the scrub"):

    python -m lab.backup_scrub [--docs 40000] [--queries 300] [--out DIR]

One in-process KnowledgeStore over a fresh data directory (real SQLite, FAISS, BM25; vectors from
a seeded random embedder, so no model is needed), one tenant of `--docs` one-chunk documents, and:

  backup      an online snapshot (embedded/backup.py) while a writer keeps ingesting: seconds,
              MB/s and seconds per GB of database; writes committed during it
  restore     staging (copy, SHA-256, SQLite integrity_check) and the swap, per GB; how long the
              tenant answered UNAVAILABLE; the first open after it (saved indexes from the
              snapshot loaded and the change log replayed), and, for comparison, a rebuild
  scrub       one pass unthrottled (rows/s, MB/s)
  query cost  p50 / p95 of a keyword search and a vector search, alone and while the scrub runs
              passes back to back at each `--scrub-rates` (default 8 and 2 MB/s); the ratio
              is the scrub's cost

It prints the figures and the 1-minute load average (the machine is shared) and writes
`<out>/backup_scrub.json`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from shared.settings import KnowledgeStoreSettings

WORDS = ("battery controller reset firmware update turbine inspection gearbox bearing vibration sensor "
         "calibration charging status light warranty incident report policy travel expense approval network "
         "switch outage backup restore schedule maintenance checklist safety procedure valve pump seal").split()


class RandomEmbedder:
    """Seeded unit vectors (the figures are about storage, not relevance)."""

    def __init__(self, dimension: int = 384) -> None:
        self.dimension = dimension
        self.rng = np.random.default_rng(7)

    async def embed(self, texts: list[str]) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), self.dimension)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_doc(i: int, rng: random.Random) -> DocumentIn:
    text = f"Note {i}. " + " ".join(rng.choice(WORDS) for _ in range(180))
    return DocumentIn(artifact=ArtifactMeta(artifact_id=f"doc-{i}", title=f"Note {i}"), content=text)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else 0.0


async def query_times(store: KnowledgeStore, n: int, rng: random.Random) -> dict[str, list[float]]:
    embedder = RandomEmbedder()
    out: dict[str, list[float]] = {"keyword": [], "vector": []}
    for _ in range(n):
        query = " ".join(rng.choice(WORDS) for _ in range(3))
        started = time.perf_counter()
        await store.keyword("t", query, [], 10, SearchFilters(), hits=True)
        out["keyword"].append((time.perf_counter() - started) * 1000)
        vector = await embedder.embed([query])
        started = time.perf_counter()
        await store.dense("t", vector, 10, SearchFilters(), hits=True)
        out["vector"].append((time.perf_counter() - started) * 1000)
    return out


async def run(args: argparse.Namespace) -> dict:
    rng = random.Random(11)
    data = args.out / "data"
    settings = KnowledgeStoreSettings(data_dir=data, scrub_interval_s=0, persist_after_rows=1_000_000)
    store = KnowledgeStore(settings, RandomEmbedder())
    facts: dict = {"docs": args.docs, "load_1min_start": round(os.getloadavg()[0], 2)}
    try:
        started = time.perf_counter()
        for first in range(0, args.docs, 500):
            await store.ingest("t", "", [make_doc(i, rng) for i in range(first, min(first + 500, args.docs))])
        facts["ingest_s"] = round(time.perf_counter() - started, 1)
        store._tenants.save(await store._tenants.get("t"))       # the steady state: saved indexes exist
        db = data / "tenants" / "t" / "store.sqlite"
        size = db.stat().st_size + (db.with_name("store.sqlite-wal").stat().st_size
                                    if db.with_name("store.sqlite-wal").exists() else 0)
        gb = size / 1e9
        facts["database_mb"] = round(size / 1e6, 1)

        # backup while a writer ingests
        snap_dir = args.out / "snapshot"
        snap_dir.mkdir(exist_ok=True)
        writes = [0]
        stop = asyncio.Event()

        async def writer() -> None:
            i = args.docs
            while not stop.is_set():
                await store.ingest("t", "", [make_doc(i, rng)])
                writes[0] += 1
                i += 1

        task = asyncio.create_task(writer())
        await asyncio.sleep(0.2)
        before = writes[0]
        started = time.perf_counter()
        [snap] = await store.backup(["t"], snap_dir)
        backup_s = time.perf_counter() - started
        during = writes[0] - before
        stop.set()
        await task
        facts["backup"] = {"seconds": round(backup_s, 2), "s_per_gb": round(backup_s / gb, 1),
                           "mb_per_s": round(size / 1e6 / backup_s, 1), "writes_committed_during": during,
                           "snapshot_mb": round(snap.bytes / 1e6, 1)}

        # restore (staging + swap), then the first open
        started = time.perf_counter()
        _, unavailable = await store.restore_tenant("t", snap_dir / snap.file, snap.sha256)
        restore_s = time.perf_counter() - started
        started = time.perf_counter()
        stats = await store.stats("t")
        first_open = time.perf_counter() - started
        facts["restore"] = {"seconds": round(restore_s, 2), "s_per_gb": round(restore_s / gb, 1),
                            "unavailable_ms": round(unavailable * 1000, 1), "first_open_s": round(first_open, 2),
                            "entries": stats.entries, "index": stats.index_kind,
                            "opened": {k: v for k, v in store._tenants.counters.items() if k.startswith("opened_")}}

        # scrub
        fast = KnowledgeStoreSettings(data_dir=data, scrub_interval_s=0, scrub_rate_mb_s=100_000)
        scrub = store._scrub
        scrub._settings = fast
        report = await store.scrub()
        t = report.tenants[0]
        facts["scrub_unthrottled"] = {"seconds": round(report.seconds, 2), "rows_per_s": round(t.rows / report.seconds),
                                      "mb_per_s": round(t.bytes / 1e6 / report.seconds, 1),
                                      "quick_check": t.quick_checked, "corrupt_rows": t.corrupt_rows}
        alone = await query_times(store, args.queries, rng)
        facts["query_ms_alone"] = {kind: {"p50": round(pct(alone[kind], 50), 3), "p95": round(pct(alone[kind], 95), 3)}
                                   for kind in ("keyword", "vector")}
        facts["scrub_rates"] = {}
        for rate in args.scrub_rates:
            scrub._settings = KnowledgeStoreSettings(data_dir=data, scrub_interval_s=0, scrub_rate_mb_s=rate)
            scrub._stop.clear()
            running = threading.Event()

            def scrub_loop() -> None:
                while not running.is_set():
                    scrub.run_pass()

            thread = threading.Thread(target=scrub_loop, daemon=True)
            thread.start()
            during = await query_times(store, args.queries, rng)
            running.set()
            scrub.close()
            thread.join(timeout=300)
            last = scrub.last
            facts["scrub_rates"][str(rate)] = {
                "measured_mb_per_s": round(last.tenants[0].bytes / 1e6 / last.seconds, 1) if last and last.seconds
                else None,
                **{kind: {"p50": round(pct(during[kind], 50), 3), "p95": round(pct(during[kind], 95), 3),
                          "p50_ratio": round(pct(during[kind], 50) / max(pct(alone[kind], 50), 1e-9), 2)}
                   for kind in ("keyword", "vector")}}
        facts["load_1min_end"] = round(os.getloadavg()[0], 2)
    finally:
        store.close()
    return facts


# ---------------------------------------------------------------------------- make reliability
async def reliability_phase(target: str, out: Path) -> tuple[list[str], dict]:
    """`make reliability`'s backup and corruption phase (lab/reliability.py): (failures,
    facts). A backup of the stack's KnowledgeStore (`target`) while 4 writers ingest, restored
    into a fresh data directory: every document acknowledged before its point present, none torn;
    then random bytes at six offsets (table and index pages, an entry's text) of one of three
    tenants of an in-process store: found (on read, by the scrub), the others untouched, and the
    latest backup brings it back with identical answers."""
    from cli import snapshots as cli_backup
    from services.knowledge_store.client import KnowledgeStoreClient
    from shared.errors import NucleusError

    failures: list[str] = []
    facts: dict = {}
    key = os.urandom(32)
    rng = random.Random(5)
    acked: dict[str, float] = {}
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        client = KnowledgeStoreClient(target, ingest_timeout_s=120)
        try:
            i = w
            while not stop.is_set():
                await client.ingest("rel-backup", "", [make_doc(i, rng)])
                acked[f"doc-{i}"] = time.time()
                i += 4
        finally:
            await client.close()

    writers = [asyncio.create_task(writer(w)) for w in range(4)]
    while len(acked) < 40 and not any(t.done() for t in writers):
        await asyncio.sleep(0.05)
    started = time.perf_counter()
    snapshot = out / "backups" / "snapshot"
    (snapshot / "tenants").mkdir(parents=True)
    client = KnowledgeStoreClient(target)
    try:
        snapshots = await client.backup_tenants(["rel-backup"], str(snapshot / "tenants"), str(snapshot))
    finally:
        await client.close()
    manifest = cli_backup.write_snapshot(snapshot, snapshots, [], key, with_secrets=False)
    facts["backup_s"] = round(time.perf_counter() - started, 2)
    during = len(acked)
    while len(acked) < during + 40 and not any(t.done() for t in writers):
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*writers, return_exceptions=True)
    cli_backup.verify(snapshot, key)
    fresh = out / "restored"
    cli_backup.restore_offline(fresh, snapshot, manifest, ["rel-backup"])
    point = manifest["tenants"]["rel-backup"]["point_unix"]
    restored = KnowledgeStore(KnowledgeStoreSettings(data_dir=fresh, scrub_interval_s=0), RandomEmbedder())
    source = KnowledgeStoreClient(target)
    try:
        mine, _ = await restored.keyword("rel-backup", "", [], 1_000, SearchFilters(), hits=True)
        theirs, _ = await source.keyword("rel-backup", "", [], 1_000, SearchFilters(), hits=True)
        count = lambda hits: {a: sum(1 for h in hits if h.entry.artifact_id == a)  # noqa: E731
                              for a in {h.entry.artifact_id for h in hits}}
        have, full = count(mine), count(theirs)
        missing = sorted(a for a, t in acked.items() if t < point and a not in have)
        torn = sorted(a for a, n in have.items() if full.get(a) != n)
        if missing:
            failures.append(f"acknowledged before the backup's point but not restored: {missing[:10]}")
        if torn:
            failures.append(f"torn or duplicated after restore: {torn[:10]}")
        facts.update(acked=len(acked), acked_before_point=sum(1 for t in acked.values() if t < point),
                     restored_documents=len(have))
    finally:
        restored.close()
        await source.close()

    # corruption in one of three tenants, the latest backup brings it back
    data = out / "corrupt"
    settings = KnowledgeStoreSettings(data_dir=data, scrub_interval_s=0)
    store = KnowledgeStore(settings, RandomEmbedder())
    before: dict[str, list] = {}
    try:
        for tenant in ("c0", "c1", "c2"):
            await store.ingest(tenant, "", [make_doc(i, rng) for i in range(300)])
            hits, _ = await store.keyword(tenant, "pump seal valve", [], 20, SearchFilters(), hits=True)
            before[tenant] = [(h.entry.id, round(h.score, 5)) for h in hits]
        (out / "csnap").mkdir(exist_ok=True)
        [snap] = await store.backup(["c1"], out / "csnap")
    finally:
        store.close()
    import sqlite3

    path = data / "tenants" / "c1" / "store.sqlite"
    raw = path.read_bytes()
    page = int.from_bytes(raw[16:18], "big")
    with sqlite3.connect(path) as db:
        roots = [r[0] for r in db.execute("SELECT rootpage FROM sqlite_master WHERE rootpage > 1")]
    offsets = [(roots[0] - 1) * page + 100, (roots[-1] - 1) * page + 20, raw.find(b"Note 150.") + 12,
               raw.find(b"Note 250.") + 30, (len(raw) // page // 2) * page + 512, (len(raw) // page - 3) * page + 64]
    with open(path, "r+b") as f:
        for offset in offsets:
            f.seek(offset)
            f.write(os.urandom(32))
    store = KnowledgeStore(settings, RandomEmbedder())
    try:
        on_read = ""
        try:
            await store.get_entries("c1", [f"doc-{i}#0" for i in range(300)])
        except NucleusError as err:
            on_read = type(err).__name__
        report = await store.scrub()
        problems = {(p.tenant_id, p.kind) for p in store.status().problems}
        facts["found"] = sorted(f"{t}:{k}" for t, k in problems)
        facts["found_on_read"] = on_read or "rows left out"
        if not any(t == "c1" for t, _ in problems):
            failures.append("random bytes in tenant c1 were not reported")
        if any(t != "c1" for t, _ in problems):
            failures.append(f"other tenants reported: {problems}")
        for tenant in ("c0", "c2"):
            hits, _ = await store.keyword(tenant, "pump seal valve", [], 20, SearchFilters(), hits=True)
            if [(h.entry.id, round(h.score, 5)) for h in hits] != before[tenant]:
                failures.append(f"tenant {tenant} answers changed")
        await store.restore_tenant("c1", out / "csnap" / snap.file, snap.sha256)
        hits, _ = await store.keyword("c1", "pump seal valve", [], 20, SearchFilters(), hits=True)
        if [(h.entry.id, round(h.score, 5)) for h in hits] != before["c1"]:
            failures.append("tenant c1 answers differ after the restore")
        if store.status().problems:
            failures.append(f"problems after the restore: {store.status().problems}")
        facts["scrub_rows"] = sum(t.rows for t in report.tenants)
    finally:
        store.close()
    return failures, facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.backup_scrub", description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=40_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--scrub-rates", type=float, nargs="+", default=[8.0, 2.0],
                        help="scrub rates (MB/s) to measure the query cost at")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out = (args.out or Path(tempfile.mkdtemp(prefix="nucleus-backup-scrub-"))).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    facts = asyncio.run(run(args))
    print(json.dumps(facts, indent=2), flush=True)
    (args.out / "backup_scrub.json").write_text(json.dumps(facts, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
