"""`nucleus tenant export` / `tenant import` as CLI processes against a KnowledgeStore process of
their own (embedding through the suite stack's LlmOrchestration): a tenant exported to a 0600
file and imported under another tenant id (with its user data, `--with-user-data`) answers the
same searches; a changed byte is refused
with a non-zero exit and the tenant it was to replace is unchanged; a read names the copy of the
data it read (`data_id`), kept by a write, new after an import replaced the tenant; a kill -9 of the
store after the first batch of an import is written leaves the tenant as it was and never answers
success, on the embedded backend and on Qdrant's local mode (whose folder is reopened after it)."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.backend import open_store
from services.knowledge_store.archive_file import open_archive, write_archive
from shared.errors import FailedPrecondition, Unavailable
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from shared.settings import KnowledgeStoreSettings
from tests.integration.test_backup_restore import nucleus_run, start_store, stop
from tests.support.retrieval import search_by_filters

pytestmark = pytest.mark.integration
NOTES = {"pump": "The pump seal leaks after the pressure test; replace the seal and torque the flange.",
         "valve": "Valve pressure test: close the outlet, raise to 12 bar, hold ten minutes, check the gauge.",
         "battery": "Battery controller reset: hold the service button for five seconds until the light blinks."}


async def _listing(client: KnowledgeStoreClient, tenant: str, query: str = "") -> list[tuple[str, str]]:
    hits, _ = await search_by_filters(client, tenant, query, [], 100, SearchFilters())
    return sorted((h.entry.artifact_id, h.entry.text) for h in hits)


async def test_a_tenant_exported_and_imported_under_another_id_answers_the_same_and_a_changed_byte_is_refused(
        stack, tmp_path: Path):
    data = tmp_path / "store"
    data.mkdir()
    proc, ks = start_store(data, stack["llm_orchestration"]["grpc"])
    key, archive = tmp_path / "backup.key", tmp_path / "out" / "src.archive"
    archive.parent.mkdir()

    def cli(*args: str):
        return nucleus_run("tenant", *args, "--key", str(key), "--knowledge-store-target", ks, data_dir=tmp_path)

    client = KnowledgeStoreClient(ks, ingest_timeout_s=60)
    try:
        await client.ingest("src", "", [DocumentIn(ArtifactMeta(artifact_id=a, title=a.title()), text)
                                         for a, text in NOTES.items()])
        await client.record_feedback("src", "artifact", "pump", True, "u1")
        exported = cli("export", "--tenant", "src", "--to", str(archive))
        assert exported.returncode == 0, exported.stderr
        assert oct(archive.stat().st_mode & 0o777) == "0o600"
        assert [p.name for p in archive.parent.iterdir()] == ["src.archive"]       # no partial file left
        assert not list(data.glob(".archive-*")), "the store left its temporary archive file"

        imported = cli("import", str(archive), "--as-tenant", "copy", "--with-user-data")
        assert imported.returncode == 0, imported.stderr
        assert "as copy: 3 artifacts" in imported.stdout and "2 user data records" in imported.stdout
        ack = await client.record_feedback("copy", "artifact", "pump", False, "u1")     # u1's vote came along
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
        assert (await client.stats("copy")).artifacts == 3
        for query in ("", "pressure test", "battery reset"):
            assert await _listing(client, "copy", query) == await _listing(client, "src", query)
        assert not list(data.glob(".archive-*")) and not list(data.glob(".import-*"))

        again = cli("export", "--tenant", "src", "--to", str(archive))             # never over a file
        assert again.returncode == 2 and "exists" in again.stderr

        tampered = tmp_path / "tampered.archive"
        shutil.copy(archive, tampered)
        raw = tampered.read_bytes()
        tampered.write_bytes(raw.replace(b"12 bar", b"99 bar", 1))
        before = await _listing(client, "copy")
        refused = cli("import", str(tampered), "--as-tenant", "copy", "--replace")
        assert refused.returncode == FailedPrecondition.exit_code, refused.stderr
        assert "SHA-256" in refused.stderr
        assert await _listing(client, "copy") == before

        # the store verifies too: the changed bytes sent past the CLI's check are refused there
        with pytest.raises(FailedPrecondition, match="SHA-256"):
            await client.import_tenant(_chunks(tampered.read_bytes()), bytes.fromhex(key.read_text().strip()),
                                       as_tenant="copy", replace=True)
        assert await _listing(client, "copy") == before
        assert not list(data.glob(".archive-*")) and not list(data.glob(".import-*"))

        # a read names the copy of the data it read (pages.py drops held rankings of a replaced one)
        held = client.data_id("copy")
        await client.ingest("copy", "", [DocumentIn(ArtifactMeta(artifact_id="extra"), "An extra pump note.")])
        await _listing(client, "copy")
        assert held and client.data_id("copy") == held, "a write keeps the data id"
        await client.import_tenant(_chunks(archive.read_bytes()), bytes.fromhex(key.read_text().strip()),
                                   as_tenant="copy", replace=True)
        await _listing(client, "copy")
        assert client.data_id("copy") not in ("", held), "an import that replaces the data gives it a new id"
    finally:
        await client.close()
        stop(proc)


async def _chunks(raw: bytes, size: int = 4096):
    for start in range(0, len(raw), size):
        yield raw[start:start + size]


def _count(db: Path, table: str) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.Error:
        return 0


def _stored_points(qdrant: Path) -> int:
    """The chunk points of Qdrant's local mode folder, of every generation (its sqlite file)."""
    return _count(qdrant / "collection" / "nucleus_chunks" / "storage.sqlite", "points")


def _first_batch_written(data: Path, qdrant: Path | None, points_before: int) -> bool:
    """Embedded: the import's side directory (embedded/archive.py) holds a tenant database with
    artifacts; qdrant: the chunks collection holds more points than before the import."""
    if qdrant is not None:
        return _stored_points(qdrant) > points_before
    return any(_count(db, "artifacts") for db in data.glob(".import-*/tenants/*/store.sqlite"))


@pytest.mark.parametrize("backend", ["embedded", "qdrant"])
async def test_a_kill_9_after_the_first_batch_of_an_import_leaves_the_previous_tenant_and_never_answers_success(
        stack, tmp_path: Path, backend: str):
    data = tmp_path / "store"
    data.mkdir()
    llm = stack["llm_orchestration"]["grpc"]
    qdrant = tmp_path / "qdrant" if backend == "qdrant" else None
    env = {"NUCLEUS_KS_BACKEND": "qdrant", "NUCLEUS_QDRANT_PATH": str(qdrant)} if qdrant else {}
    proc, ks = start_store(data, llm, **env)
    key = os.urandom(32)
    client = KnowledgeStoreClient(ks, ingest_timeout_s=60)
    try:
        await client.ingest("acme", "", [DocumentIn(ArtifactMeta(artifact_id=a, title=a.title()), text)
                                         for a, text in NOTES.items()])
        before = await _listing(client, "acme")
        small = tmp_path / "acme.archive"
        small.write_bytes(b"".join([c async for c in client.export_tenant("acme", key)]))
        archive = open_archive(small, key)

        async def many():           # the same artifacts 600 times over: ~8 write batches of 256
            for n in range(600):
                for r in archive.records():
                    if r["kind"] == "artifact":
                        yield {**r, "artifact": {**r["artifact"], "artifact_id": f"{r['artifact']['artifact_id']}-{n}"}}

        big = tmp_path / "big.archive"
        await write_archive(big, key, "acme", archive.manifest["model"], many())
        points_before = _stored_points(qdrant) if qdrant else 0
        call = asyncio.create_task(client.import_tenant(_chunks(big.read_bytes(), 1 << 20), key, replace=True))
        deadline = time.monotonic() + 60
        while not _first_batch_written(data, qdrant, points_before):
            assert not call.done(), f"the import ended before its first batch was seen: {call.result()}"
            assert time.monotonic() < deadline, "no batch of the import was written"
            await asyncio.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        with pytest.raises(Unavailable):                   # the import never answered success
            await call
    finally:
        await client.close()
    settings = KnowledgeStoreSettings(data_dir=data, **({"backend": "qdrant", "qdrant_path": qdrant} if qdrant else {}))
    store = open_store(settings, embedder=None)     # the data dir (the Qdrant folder, its lock gone), reopened
    try:
        listing = await store.archive_listing("acme", "", 100)
        hits = await store.get_entries("acme", [e for _, entries in listing for e in entries])
        assert sorted((h.entry.artifact_id, h.entry.text) for h in hits) == before
        assert (await store.stats("acme")).entries == len(before) and store.list_tenants() == ["acme"]
        assert not list(data.glob(".import-*")) and not list(data.glob(".archive-*"))   # swept at the start
        if qdrant:              # the generation written part-way deleted when the store opened
            assert _stored_points(qdrant) == points_before and (await store.check_tenant("acme", repair=False)).consistent
    finally:
        store.close()
