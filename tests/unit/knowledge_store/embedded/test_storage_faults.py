"""Storage faults reach the caller as typed errors naming the path, and the store's health says
which tenant is affected: a full disk (SQLite's page limit stands in for it), a read-only data
directory (SQLite's read-only open mode, and an immutable directory where the file system
allows it), a corrupted tenant database. Real SQLite and FAISS in tmp_path throughout."""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import grpc
import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.storage.db import DB_FILE
from shared.errors import FailedPrecondition, NotFound, StorageFull
from shared.grpc_errors import grpc_status
from shared.mcp_errors import error_code_for, mcp_error_text
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

NOTE = "The battery controller resets when the status light blinks green."


def db_path(root: Path, tenant: str) -> Path:
    return root / "tenants" / tenant / DB_FILE


async def keyword_hits(store: KnowledgeStore, tenant: str, words: str = "battery controller") -> list[str]:
    hits, _ = await store.keyword(tenant, words, [], 10, SearchFilters(), hits=True)
    return [h.entry.artifact_id for h in hits]


async def test_a_full_disk_is_storage_full_naming_the_data_directory_and_free_space_and_nothing_lands(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        await store.ingest("t", "", [doc("first", NOTE)])
        tenant = await store._tenants.get("t")
        pages = tenant.db.writer.execute("PRAGMA page_count").fetchone()[0]
        tenant.db.writer.execute(f"PRAGMA max_page_count = {pages}")     # the disk is now full
        big = " ".join(f"Paragraph {i} on battery controller firmware and its reset." for i in range(400))
        with pytest.raises(StorageFull) as caught:
            await store.ingest("t", "", [doc("second", big)])
        err = caught.value
        assert str(tmp_path) in str(err) and "free of" in str(err) and "ingest was not applied" in str(err)
        assert grpc_status(err) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error_code_for(err) == "backend_unavailable" and mcp_error_text(err).startswith("storage_full: ")
        assert await keyword_hits(store, "t") == ["first"]               # nothing half-written
        integrity = await store.verify_integrity("t")
        assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"]
        status = store.status()
        assert status.state == "degraded" and [(p.tenant_id, p.kind) for p in status.problems] == [("t", "full")]

        tenant.db.writer.execute("PRAGMA max_page_count = 1073741823")   # space freed
        await store.ingest("t", "", [doc("second", big)])
        assert (await store.stats("t")).artifacts == 2
        assert store.status().state == "ok"
    finally:
        store.close()


async def test_a_read_only_store_serves_searches_and_refuses_writes_with_the_path(tmp_path):
    writer = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await writer.ingest("t", "", [doc("first", NOTE)])
    writer.close()
    store = KnowledgeStore(settings_for(tmp_path, read_only=True), HashEmbedder())
    try:
        assert await keyword_hits(store, "t") == ["first"]
        vectors = await HashEmbedder().embed([NOTE])
        assert [h.entry.artifact_id for h in (await store.dense("t", vectors, 5, SearchFilters(), hits=True))[0]] \
            == ["first"]
        assert (await store.stats("t")).entries == 1
        for write in (store.ingest("t", "", [doc("second", NOTE)]), store.delete("t", ["first"]),
                      store.record_feedback("t", "artifact", "first", True, "u")):
            with pytest.raises(FailedPrecondition) as caught:
                await write
            assert "read-only" in str(caught.value) and "searches are still served" in str(caught.value)
            assert grpc_status(caught.value) == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(FailedPrecondition, match="cannot be created"):
            await store.ingest("new", "", [doc("x", NOTE)])
        assert await keyword_hits(store, "t") == ["first"]
        assert [(p.tenant_id, p.kind) for p in store.status().problems] == [("t", "read_only")]
    finally:
        store.close()


@pytest.fixture
def immutable(tmp_path):
    """Make paths immutable (refused even to root); skipped where the file system cannot."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not available")
    made: list[Path] = []

    def make(path: Path) -> None:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("this file system does not support immutable files")
        made.append(path)

    yield make
    for path in reversed(made):
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


async def test_a_data_directory_that_refuses_writes_is_detected_and_served_read_only(tmp_path, immutable):
    writer = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await writer.ingest("t", "", [doc("first", NOTE)])
    writer.close()
    immutable(db_path(tmp_path, "t"))
    immutable(db_path(tmp_path, "t").parent)          # not even the WAL's shared-memory file can be made
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        assert await keyword_hits(store, "t") == ["first"]
        with pytest.raises(FailedPrecondition) as caught:
            await store.ingest("t", "", [doc("second", NOTE)])
        assert str(db_path(tmp_path, "t").parent) in str(caught.value)
        assert store.status().problems[0].kind == "read_only"
    finally:
        store.close()


def _corrupt_header(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"this is no longer a database" * 4)


def _corrupt_table(path: Path, table: str) -> None:
    conn = sqlite3.connect(path)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xff" * page)


@pytest.mark.parametrize("damage", [_corrupt_header, lambda p: _corrupt_table(p, "entries")],
                         ids=["header", "entries-table"])
async def test_a_corrupted_tenant_reports_itself_and_the_other_tenants_are_served(tmp_path, damage):
    writer = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    for tenant in ("good", "bad"):
        await writer.ingest(tenant, "", [doc(f"{tenant}{i}", f"{NOTE} Copy {i}.") for i in range(20)])
    writer.close()
    damage(db_path(tmp_path, "bad"))
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        with pytest.raises(FailedPrecondition) as caught:
            await keyword_hits(store, "bad")
        assert "is corrupted" in str(caught.value) and str(db_path(tmp_path, "bad")) in str(caught.value)
        assert "other tenants are served" in str(caught.value)
        assert grpc_status(caught.value) == grpc.StatusCode.FAILED_PRECONDITION
        assert len(await keyword_hits(store, "good")) == 10
        await store.ingest("good", "", [doc("more", NOTE)])
        status = store.status()
        assert status.state == "degraded"
        assert [(p.tenant_id, p.kind) for p in status.problems] == [("bad", "corrupt")]
        with pytest.raises(FailedPrecondition):                # still reported, not a crash
            await keyword_hits(store, "bad")
        with pytest.raises(NotFound):
            await keyword_hits(store, "never")
    finally:
        store.close()


async def test_health_listeners_hear_the_store_turn_degraded_and_healthy_again(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    heard: list[bool] = []
    store.health.watch(heard.append)
    try:
        await store.ingest("t", "", [doc("first", NOTE)])
        tenant = await store._tenants.get("t")
        pages = tenant.db.writer.execute("PRAGMA page_count").fetchone()[0]
        tenant.db.writer.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StorageFull):
            await store.ingest("t", "", [doc("second", NOTE * 300)])
        tenant.db.writer.execute("PRAGMA max_page_count = 1073741823")
        await store.ingest("t", "", [doc("second", NOTE)])
        assert heard == [True, False, True]
    finally:
        store.close()
