"""Corruption found automatically (storage/rowsums.py, scrub.py, tenants.py): a row whose bytes
changed behind the store's back is left out of answers and reported; a damaged page marks only
its tenant corrupt, naming the file; rows from before checksums are "unverified" until the scrub
gives them one; saved indexes newer than SQLite are reported as lost commits. Real SQLite files
in tmp_path, changed with a second connection or by writing bytes into them."""
from __future__ import annotations

import os
import shutil
import sqlite3

import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from shared.errors import FailedPrecondition
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

F = SearchFilters()


def _db(root, tenant: str = "t") -> sqlite3.Connection:
    return sqlite3.connect(root / "tenants" / tenant / "store.sqlite", isolation_level=None)


def _problems(store: KnowledgeStore, tenant: str) -> dict[str, str]:
    return {p.kind: p.message for p in store.status().problems if p.tenant_id == tenant}


async def _seed(store: KnowledgeStore, tenant: str, n: int = 4) -> None:
    await store.ingest(tenant, "", [doc(f"d{i}", f"Notes on pump {i}: the seal number {i} leaks under pressure.",
                                        title=f"Pump {i}") for i in range(n)])


async def test_a_row_changed_on_disk_is_left_out_of_answers_and_reported(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    await _seed(store, "t")
    await _seed(store, "u")
    store.close()
    db = _db(tmp_path)
    db.execute("UPDATE entries SET text = replace(text, 'seal', 'SEAL') WHERE entry_id = 'd1#0'")     # a bit rot
    db.execute("UPDATE artifacts SET visibility_groups = '[\"everyone\"]' WHERE artifact_id = 'd2'")  # metadata
    db.close()

    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    try:
        hits = await store.get_entries("t", ["d0#0", "d1#0", "d2#0", "d3#0"])
        assert [h.entry.id for h in hits] == ["d0#0", "d3#0"]
        found, _ = await store.keyword("t", "pump seal leaks", [], 10, F, hits=True)
        assert {h.entry.id for h in found} == {"d0#0", "d3#0"}             # excluded from answers too
        problem = _problems(store, "t")["corrupt_rows"]
        assert "store.sqlite" in problem and "fail their checksums" in problem and "no backup" in problem
        assert len(await store.get_entries("u", ["d1#0", "d2#0"])) == 2   # the other tenant is whole
        assert _problems(store, "u") == {}
        check = await store.check_tenant("t", repair=False)
        assert check.corrupt_rows == 2 and not check.consistent
    finally:
        store.close()


async def test_the_scrub_finds_a_changed_vector_and_clears_once_the_document_is_ingested_again(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    try:
        await _seed(store, "t")
        db = _db(tmp_path)
        blob = bytearray(db.execute("SELECT vector FROM entry_vectors WHERE rid = 1").fetchone()[0])
        blob[100] ^= 0x40
        db.execute("UPDATE entry_vectors SET vector = ? WHERE rid = 1", (bytes(blob),))
        db.close()
        report = await store.scrub()
        [t] = [r for r in report.tenants if r.tenant_id == "t"]
        assert (t.rows, t.corrupt_rows, t.unverified, t.page_error) == (4, 1, 0, "")
        assert "rid 1" in _problems(store, "t")["corrupt_rows"]
        assert "1 corrupt rows" in store.status().scrub
        await _seed(store, "t")                                     # the documents again: rows replaced
        await store.scrub()
        assert "corrupt_rows" not in _problems(store, "t")
    finally:
        store.close()


def _overwrite(path, offset: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(os.urandom(size))


async def test_random_bytes_in_a_page_mark_only_that_tenant_corrupt_naming_its_file(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    await _seed(store, "t", 40)
    await _seed(store, "u")
    store.close()
    db = _db(tmp_path)
    page = db.execute("PRAGMA page_size").fetchone()[0]
    roots = [r[0] for r in db.execute("SELECT rootpage FROM sqlite_master WHERE name IN "
                                      "('entries_by_artifact', 'entries') ORDER BY name")]
    db.close()
    for root in roots:                                      # a table page and an index page
        _overwrite(tmp_path / "tenants" / "t" / "store.sqlite", (root - 1) * page + 16, 64)

    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    try:
        with pytest.raises(FailedPrecondition, match=r"tenant 't' is corrupted: .*store\.sqlite"):
            await store.get_entries("t", ["d0#0"])
        assert "newest backup" in _problems(store, "t")["corrupt"] or "no backup" in _problems(store, "t")["corrupt"]
        assert len(await store.get_entries("u", ["d0#0"])) == 1
        report = await store.scrub()
        assert [r.tenant_id for r in report.tenants if r.page_error] == ["t"]
        assert _problems(store, "u") == {}
    finally:
        store.close()


async def test_rows_from_before_checksums_are_unverified_until_the_scrub_fills_them(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    await _seed(store, "t")
    store.close()
    db = _db(tmp_path)                                      # what schema 2 left: no checksum columns
    db.execute("ALTER TABLE entries DROP COLUMN checksum")
    db.execute("ALTER TABLE artifacts DROP COLUMN checksum")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.close()

    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    try:
        assert len(await store.get_entries("t", ["d0#0", "d1#0"])) == 2          # migrated, served
        check = await store.check_tenant("t", repair=False)
        assert check.unverified_rows == 8 and check.corrupt_rows == 0            # 4 entries + 4 artifacts
        report = await store.scrub()
        assert report.tenants[0].backfilled == 8 and report.tenants[0].unverified == 0
        db = _db(tmp_path)
        db.execute("UPDATE entries SET text = 'rewritten' WHERE entry_id = 'd3#0'")
        db.close()
        assert [h.entry.id for h in await store.get_entries("t", ["d2#0", "d3#0"])] == ["d2#0"]
    finally:
        store.close()


async def test_saved_indexes_newer_than_sqlite_are_reported_as_lost_commits_not_silently_rebuilt(tmp_path):
    settings = settings_for(tmp_path / "a", scrub_interval_s=0, persist_after_rows=1)
    store = KnowledgeStore(settings, HashEmbedder())
    await _seed(store, "t", 3)
    store.close()                                           # checkpointed: the main file holds 3 documents
    store = KnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", [doc(f"late{i}", f"Late note {i} about valves.") for i in range(5)])
    tenant = await store._tenants.get("t")
    store._tenants.save(tenant)                             # the saved indexes see all 8
    crashed = tmp_path / "b" / "tenants" / "t"              # kill -9 now, and the WAL is lost
    shutil.copytree(tmp_path / "a" / "tenants" / "t", crashed)
    (crashed / "store.sqlite-wal").write_bytes(b"")
    (crashed / "store.sqlite-shm").unlink(missing_ok=True)
    store.close()

    store = KnowledgeStore(settings_for(tmp_path / "b", scrub_interval_s=0), HashEmbedder())
    try:
        stats = await store.stats("t")
        assert stats.entries == 3                           # served from what SQLite holds
        lost = _problems(store, "t")["lost_commits"]
        assert "lost commits" in lost and "8 vectors" in lost and "3 entries" in lost and "row changes lost" in lost
        assert store._tenants.counters["lost_commits"] == 1
        store.close()
        store = KnowledgeStore(settings_for(tmp_path / "b", scrub_interval_s=0), HashEmbedder())
        await store.stats("t")
        assert "lost_commits" in _problems(store, "t")      # still reported after a restart...
        await store.check_tenant("t", repair=True)
        assert "lost_commits" not in _problems(store, "t")  # ...until the operator's check acknowledges it
    finally:
        store.close()


async def test_nucleus_status_shows_corrupt_rows_with_the_newest_backup_and_the_scrubs_last_pass(tmp_path):
    from cli.status import store_lines
    from cli.snapshots import write_snapshot

    store = KnowledgeStore(settings_for(tmp_path / "data", scrub_interval_s=0), HashEmbedder())
    try:
        await _seed(store, "t")
        snapshot = tmp_path / "backups" / "20260101T000000Z"
        (snapshot / "tenants").mkdir(parents=True)
        snaps = await store.backup(["t"], snapshot / "tenants", snapshot)
        write_snapshot(snapshot, [{k: getattr(s, k) for k in ("tenant_id", "file", "sha256", "bytes", "entries", "seq",
                                                              "database_id", "point_unix")} for s in snaps],
                       [], b"k" * 32, with_secrets=False)
        db = _db(tmp_path / "data")
        db.execute("UPDATE entries SET text = 'changed' WHERE entry_id = 'd2#0'")
        db.close()
        await store.scrub()
        text = "\n".join(store_lines(store.status()))
        assert "tenant [bold]t[/bold] corrupt_rows" in text and "rid 3" in text
        assert f"newest backup: {snapshot}" in text and f"nucleus restore {snapshot} --tenant t" in text
        assert "scrub: last pass" in text and "1 corrupt rows" in text
    finally:
        store.close()
