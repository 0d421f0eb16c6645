"""Backups, restores and corruption through real processes: one KnowledgeStore process (embedding
through the suite stack's LlmOrchestration), `nucleus backup` / `backup verify` / `restore` run as
CLI processes against it. Backup while 4 writers ingest, restore into a fresh data directory and
online; tampered snapshots refused; random bytes in a tenant's database found by the scrub or on
read while another tenant serves, and the latest backup brings it back; a WAL lost after kill -9
reported as lost commits. The long versions run in `make reliability`."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import FailedPrecondition
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from tests.support import background
from tests.support.processes import run_cli
from tests.support.retrieval import search_by_filters, search_by_vector

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration
QUERIES = ["pump seal leak", "valve pressure test", "battery controller reset", "turbine blade inspection"]
TOPICS = ["pump seal leak", "valve pressure test", "battery controller reset", "turbine blade inspection",
          "cable insulation check", "boiler water level"]


def start_store(data_dir: Path, llm_target: str, **env_extra: str) -> tuple[subprocess.Popen, str]:
    ready = data_dir / "ks.ready.json"
    ready.unlink(missing_ok=True)
    env = dict(os.environ, NUCLEUS_DATA_DIR=str(data_dir), NUCLEUS_KS_DATA_DIR=str(data_dir), NUCLEUS_KS_GRPC_PORT="0",
               NUCLEUS_KS_MCP_PORT="-1", NUCLEUS_KS_LLM_TARGET=llm_target, NUCLEUS_OTEL_TRACE_FILE="false",
               NUCLEUS_KS_SCRUB_INTERVAL_S="1", NUCLEUS_KS_SCRUB_RATE_MB_S="50", **env_extra)
    proc = subprocess.Popen([sys.executable, "-m", "services.knowledge_store.main", "--ready-file", str(ready)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, "knowledge store exited during start-up"
        assert time.monotonic() < deadline, "knowledge store did not start"
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["grpc"]


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    proc.wait(timeout=30)


def nucleus(*args: str, data_dir: Path) -> int:
    """The operator CLI, as a process of its own (tests/support/processes.py `run_cli`)."""
    return nucleus_run(*args, data_dir=data_dir).returncode


def nucleus_run(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    return run_cli(["--data-dir", str(data_dir), *args])


def document(i: int) -> DocumentIn:
    # a few chunks each, so a torn artifact would show as fewer chunks than the source holds
    body = "\n\n".join(f"## Part {p}\nNote {i} part {p} on {TOPICS[(i + p) % len(TOPICS)]}. " + " ".join(
        f"w{i}x{p}y{w}" for w in range(70)) for p in range(2))
    return DocumentIn(artifact=ArtifactMeta(artifact_id=f"doc-{i}", title=f"Note {i}"), content=body,
                      content_type="text/markdown")


class Env:
    def __init__(self, root: Path, llm_target: str) -> None:
        self.root = root
        self.llm_target = llm_target
        self.data = root / "a"
        self.data.mkdir()
        self.backups = root / "backups"
        self.key = root / "backup.key"
        self.proc, self.target = start_store(self.data, llm_target)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        stop(self.proc, sig)
        self.proc, self.target = start_store(self.data, self.llm_target)

    def backup(self, *args: str) -> Path:
        code = nucleus("backup", "--to", str(self.backups), "--key", str(self.key), "--keep", "0",
                       "--knowledge-store-target", self.target, *args, data_dir=self.root)
        assert code == 0
        return sorted(p for p in self.backups.iterdir() if not p.name.startswith("."))[-1]


@pytest.fixture(scope="module")
def env(stack, tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("backup"), stack["llm_orchestration"]["grpc"])
    yield e
    proc = e.proc
    background.stop_in_background("backup-restore", lambda: stop(proc))   # while the next module runs


async def answers(client: KnowledgeStoreClient, tenant: str, artifact_ids: tuple[str, ...] = ()) -> list:
    """Vector answers (ids and scores; with `artifact_ids` only among those) and keyword answers."""
    out = []
    filters = SearchFilters(artifact_ids=artifact_ids)
    for query in QUERIES:
        hits = await search_by_vector(client, tenant, _QUERY_VECTORS[query], 10, filters)
        out.append([(h.entry.id, round(h.score, 5)) for h in hits[0]])
        if not artifact_ids:
            kw, _ = await search_by_filters(client, tenant, query, [], 10, filters)
            out.append([(h.entry.id, round(h.score, 4)) for h in kw])
    return out


_QUERY_VECTORS: dict = {}


@pytest.fixture(scope="module")
async def query_vectors(stack):
    from services.llm_orchestration.client import LlmOrchestrationClient

    llm = LlmOrchestrationClient(stack["llm_orchestration"]["grpc"])
    try:
        vectors = await llm.embed(QUERIES, purpose="query")
    finally:
        await llm.close()
    _QUERY_VECTORS.update({q: vectors[i:i + 1] for i, q in enumerate(QUERIES)})


async def chunks_per_artifact(client: KnowledgeStoreClient) -> dict[str, int]:
    listing, _ = await search_by_filters(client, "bk", "", [], 1_000, SearchFilters())
    out: dict[str, int] = {}
    for hit in listing:
        out[hit.entry.artifact_id] = out.get(hit.entry.artifact_id, 0) + 1
    return out


async def _writer(target: str, first: int, step: int, acked: dict[str, float], stop_at: asyncio.Event) -> None:
    client = KnowledgeStoreClient(target, ingest_timeout_s=60)
    try:
        i = first
        while not stop_at.is_set():
            await client.ingest("bk", "", [document(i)])
            acked[f"doc-{i}"] = time.time()
            i += step
    finally:
        await client.close()


async def test_backup_while_4_writers_ingest_restores_every_acknowledged_document_once(env, query_vectors):
    acked: dict[str, float] = {}
    stop_at = asyncio.Event()
    writers = [asyncio.create_task(_writer(env.target, w, 4, acked, stop_at)) for w in range(4)]
    try:
        deadline = time.monotonic() + 90
        while len(acked) < 8:
            assert time.monotonic() < deadline and not any(w.done() for w in writers), "writers did not ingest"
            await asyncio.sleep(0.05)
        snapshot = await asyncio.to_thread(env.backup, "--tenant", "bk")
        during = len(acked)
        while len(acked) < during + 4:                       # ingest went on during and after the backup
            assert time.monotonic() < deadline and not any(w.done() for w in writers), "writers stopped"
            await asyncio.sleep(0.05)
    finally:
        stop_at.set()
        await asyncio.gather(*writers)
    manifest = json.loads((snapshot / "manifest.json").read_text())
    point = manifest["tenants"]["bk"]["point_unix"]
    assert all((snapshot / f).stat().st_mode & 0o777 == 0o600 for f in ("manifest.json", "manifest.mac"))
    fresh = env.root / "fresh"
    with ThreadPoolExecutor(2) as pool:                  # both only read the snapshot: two CLI processes at once
        verified = pool.submit(nucleus, "backup", "verify", str(snapshot), "--key", str(env.key), data_dir=env.root)
        restored_offline = pool.submit(nucleus, "restore", str(snapshot), "--offline", "--ks-data-dir", str(fresh),
                                       "--key", str(env.key), data_dir=fresh)
        assert verified.result() == 0
        assert restored_offline.result() == 0
    proc, target = start_store(fresh, env.llm_target)
    restored = KnowledgeStoreClient(target)
    source = KnowledgeStoreClient(env.target)
    try:
        stats = await restored.stats("bk")
        assert stats.entries == stats.vectors == stats.keyword_docs == manifest["tenants"]["bk"]["entries"]
        per_artifact = await chunks_per_artifact(restored)
        in_source = await chunks_per_artifact(source)
        before_point = {a for a, t in acked.items() if t < point}
        assert before_point <= set(per_artifact), sorted(before_point - set(per_artifact))
        assert per_artifact == {a: in_source[a] for a in per_artifact}   # nothing torn, each once
        assert len(per_artifact) < len(acked)                            # later acks are not in it
        present = tuple(sorted(per_artifact))
        assert await answers(restored, "bk", present) == await answers(source, "bk", present)
    finally:
        await restored.close()
        await source.close()
        stop(proc)


async def test_a_tampered_snapshot_or_another_stacks_key_is_refused(env):
    snapshot = sorted(p for p in env.backups.iterdir() if not p.name.startswith("."))[-1]
    other_key = env.root / "other.key"
    other_key.write_text("ab" * 32)
    changed_byte = env.root / "changed-byte"
    shutil.copytree(snapshot, changed_byte)
    db = next((changed_byte / "tenants").iterdir())
    data = bytearray(db.read_bytes())
    data[len(data) // 3] ^= 0x01
    db.write_bytes(bytes(data))
    changed_manifest = env.root / "changed-manifest"
    shutil.copytree(snapshot, changed_manifest)
    text = (changed_manifest / "manifest.json").read_text()
    (changed_manifest / "manifest.json").write_text(text.replace('"bk"', '"bq"', 1))
    cases = ((changed_byte, env.key, "does not match its SHA-256"),
             (changed_manifest, env.key, "manifest or its MAC was changed"),
             (snapshot, other_key, "another backup key"))
    with ThreadPoolExecutor(len(cases)) as pool:          # three CLI processes at once: each is refused alone
        runs = list(pool.map(lambda case: nucleus_run("restore", str(case[0]), "--key", str(case[1]),
                                                      "--knowledge-store-target", env.target, data_dir=env.root),
                             cases))
    for (_, _, why), done in zip(cases, runs):
        err = " ".join(done.stderr.split())
        assert done.returncode == FailedPrecondition.exit_code and why in err, err


def _overwrite(path: Path, offset: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(os.urandom(size))


async def test_random_bytes_in_a_tenants_database_are_found_and_an_online_restore_undoes_them(env, query_vectors):
    client = KnowledgeStoreClient(env.target)
    await client.ingest("cx", "", [document(i) for i in range(3000, 3030)])
    before = await answers(client, "cx")
    snapshot = await asyncio.to_thread(env.backup, "--tenant", "cx")
    await client.close()
    stop(env.proc)                                           # checkpointed into store.sqlite
    path = env.data / "tenants" / "cx" / "store.sqlite"
    data = path.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    text_at = data.find(b"Note 3017 part 1 on")               # an entry's text, in a table page
    assert text_at > 0
    _overwrite(path, text_at + 4, 16)
    with sqlite3.connect(path) as db:
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'entries_by_artifact'").fetchone()[0]
    _overwrite(path, (root - 1) * page, 48)                  # an index page's header
    env.proc, env.target = start_store(env.data, env.llm_target)
    client = KnowledgeStoreClient(env.target)
    try:
        with pytest.raises(FailedPrecondition, match=r"tenant 'cx' is corrupted: .*store\.sqlite"):
            await client.get_entries("cx", ["doc-3000#0"])          # on read: the open's quick_check
        deadline = time.monotonic() + 60
        problems: dict[str, str] = {}
        while not {"corrupt", "corrupt_rows"} <= set(problems):     # and the scrub's walk finds the row
            assert time.monotonic() < deadline, f"the corruption was not reported: {problems}"
            await asyncio.sleep(0.2)
            status = await client.store_status()
            problems = {p.kind: p.message for p in status.problems if p.tenant_id == "cx"}
        assert all("store.sqlite" in m and snapshot.name in m for m in problems.values()), problems
        assert "fail their checksums" in problems["corrupt_rows"]
        assert not [p for p in status.problems if p.tenant_id == "bk"]
        served: list[int] = []

        async def read_other() -> None:
            while True:
                hits, _ = await search_by_filters(client, "bk", "pump seal", [], 5, SearchFilters())
                served.append(len(hits))
                await asyncio.sleep(0.01)

        reader = asyncio.create_task(read_other())
        code = await asyncio.to_thread(nucleus, "restore", str(snapshot), "--tenant", "cx", "--key", str(env.key),
                                       "--knowledge-store-target", env.target, data_dir=env.root)
        reader.cancel()
        assert code == 0
        assert served and min(served) > 0                    # the other tenant answered throughout
        assert await answers(client, "cx") == before
        assert not [p for p in (await client.store_status()).problems if p.tenant_id == "cx"]
    finally:
        await client.close()


async def test_a_write_ahead_log_lost_after_kill_9_is_reported_as_lost_commits(env):
    client = KnowledgeStoreClient(env.target)
    await client.ingest("wal", "", [document(i) for i in range(4000, 4003)])
    await client.close()
    stop(env.proc)                                           # the first 3 are in store.sqlite now
    env.proc, env.target = start_store(env.data, env.llm_target, NUCLEUS_KS_PERSIST_AFTER_ROWS="1")
    client = KnowledgeStoreClient(env.target)
    manifest = env.data / "tenants" / "wal" / "derived" / "manifest.json"
    seq_before = json.loads(manifest.read_text())["seq"] if manifest.exists() else 0
    await client.ingest("wal", "", [document(i) for i in range(4003, 4008)])
    deadline = time.monotonic() + 30
    while not manifest.exists() or json.loads(manifest.read_text())["seq"] <= seq_before:
        assert time.monotonic() < deadline, "the indexes were never saved"
        await asyncio.sleep(0.05)
    await client.close()
    stop(env.proc, signal.SIGKILL)
    (env.data / "tenants" / "wal" / "store.sqlite-wal").write_bytes(b"")      # the damage
    env.proc, env.target = start_store(env.data, env.llm_target)
    client = KnowledgeStoreClient(env.target)
    try:
        assert (await client.stats("wal")).entries == 6           # 3 documents of 2 chunks survived
        lost = {p.kind: p.message for p in (await client.store_status()).problems if p.tenant_id == "wal"}
        assert "lost_commits" in lost and "row changes lost" in lost["lost_commits"], lost
        code = await asyncio.to_thread(nucleus, "check", "--tenant", "wal", "--knowledge-store-target", env.target,
                                       data_dir=env.root)
        assert code == 0
        assert not [p for p in (await client.store_status()).problems if p.tenant_id == "wal"]
    finally:
        await client.close()
