"""Derived rows (vectors, keyword rows) lost or orphaned behind the store's back are found — by
the cheap counts on open, or by the full check on demand — and rebuilt from the stored text:
keyword rows re-analysed, vectors re-embedded (they wait while the embedder is unreachable),
orphans removed, with a log line and a counter. Real SQLite and FAISS in tmp_path."""
from __future__ import annotations

import logging
import sqlite3

import numpy as np
import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.storage.db import DB_FILE
from shared.errors import Unavailable
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

GUIDE = """# Battery guide

## Controller reset

Hold the reset button of the battery controller for ten seconds.

## Charging

Charge the battery overnight; the status light turns green when it is full.
"""
DOCS = [doc(f"guide{i}", GUIDE.replace("ten seconds", f"{i + 10} seconds"), "text/markdown",
            title=f"Battery guide {i}") for i in range(6)] + [doc(f"note{i}", f"Plain note {i} about turbines.")
                                                               for i in range(6)]


class SwitchableEmbedder(HashEmbedder):
    """The feature-hashing embedder, unreachable while `down` (as LlmOrchestration would be)."""

    down = False

    async def embed(self, texts: list[str]) -> np.ndarray:
        if self.down:
            raise Unavailable("LlmOrchestration unavailable: connection refused")
        return await super().embed(texts)


def raw(tmp_path, tenant: str = "t") -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "tenants" / tenant / DB_FILE, isolation_level=None)


def derived(conn: sqlite3.Connection) -> tuple[dict[int, tuple[str, str]], dict[int, bytes]]:
    keywords = {rid: (title, body) for rid, title, body in conn.execute("SELECT rowid, title, body FROM entries_fts")}
    vectors = dict(conn.execute("SELECT rid, vector FROM entry_vectors"))
    return keywords, vectors


def lose_rows(conn: sqlite3.Connection, vectors: int, keywords: int) -> tuple[list[int], list[int]]:
    """Delete derived rows behind the store's back; returns (rids without vector, without keyword row)."""
    rids = [r[0] for r in conn.execute("SELECT rid FROM entries ORDER BY rid")]
    no_vector, no_keywords = rids[1:1 + vectors], rids[-keywords:]
    conn.executemany("DELETE FROM entry_vectors WHERE rid = ?", [(r,) for r in no_vector])
    conn.executemany("DELETE FROM entries_fts WHERE rowid = ?", [(r,) for r in no_keywords])
    return no_vector, no_keywords


async def test_open_counts_find_lost_rows_and_the_background_repair_rebuilds_them_exactly(tmp_path, caplog):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", DOCS)
    store.close()
    conn = raw(tmp_path)
    before_keywords, before_vectors = derived(conn)
    lose_rows(conn, vectors=5, keywords=5)
    conn.close()

    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        with caplog.at_level(logging.WARNING):
            stats = await store.stats("t")                      # the first access opens the tenant
            assert stats.vectors == stats.entries - 5
            assert [p.kind for p in store.status().problems] == ["inconsistent"]
            await store.settle_repairs(timeout_s=30)
        after_keywords, after_vectors = derived(raw(tmp_path))
        assert after_keywords == before_keywords                # re-analysed exactly as at ingest
        assert after_vectors.keys() == before_vectors.keys()
        for rid, blob in before_vectors.items():
            np.testing.assert_allclose(np.frombuffer(after_vectors[rid], np.float32),
                                       np.frombuffer(blob, np.float32), atol=1e-6)
        integrity = await store.verify_integrity("t")
        assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"] == len(before_vectors)
        status = store.status()
        assert status.state == "ok" and status.repaired_rows == 10
        assert "tenant t repaired: 5 vectors re-embedded, 5 keyword rows rebuilt" in caplog.text
    finally:
        store.close()


async def test_the_full_check_reports_on_demand_and_repairs_a_tenant_that_is_open(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        await store.ingest("t", "", DOCS)
        assert (await store.check_tenant("t", repair=False)).consistent
        conn = raw(tmp_path)
        no_vector, no_keywords = lose_rows(conn, vectors=3, keywords=2)
        conn.execute("INSERT INTO entry_vectors(rid, vector) VALUES (999999, ?)", (b"\0" * 16,))
        conn.execute("INSERT INTO entries_fts(rowid, title, body) VALUES (999998, 'orphan', 'orphan')")
        conn.execute("UPDATE entry_vectors SET vector = ? WHERE rid = (SELECT min(rid) FROM entry_vectors)",
                     (np.full(384, np.nan, np.float32).tobytes(),))
        conn.close()

        found = await store.check_tenant("t", repair=False)
        assert not found.consistent
        assert (found.missing_vectors, found.missing_keyword_rows) == (3, 2)
        assert (found.orphan_vectors, found.orphan_keyword_rows, found.malformed_vectors) == (1, 1, 1)
        assert found.integrity_errors == () and found.repaired_vectors == 0
        assert [p.kind for p in store.status().problems] == ["inconsistent"]

        repaired = await store.check_tenant("t", repair=True)
        assert repaired.consistent, repaired.summary()
        assert (repaired.repaired_vectors, repaired.repaired_keyword_rows, repaired.removed_orphans) == (4, 2, 2)
        assert repaired.entries == repaired.vectors_indexed == repaired.keyword_rows_indexed
        assert store.status().state == "ok"
        entry_of = {r[0]: r[1] for r in raw(tmp_path).execute("SELECT rid, artifact_id FROM entries")}
        hits, _ = await store.keyword("t", "plain note turbines", [], 20, SearchFilters(), hits=True)
        assert {entry_of[r] for r in no_keywords} <= {h.entry.artifact_id for h in hits}
        vectors = await HashEmbedder().embed([GUIDE])
        dense = (await store.dense("t", vectors, 20, SearchFilters(), hits=True))[0]
        assert {entry_of[r] for r in no_vector} <= {h.entry.artifact_id for h in dense}
    finally:
        store.close()


async def test_re_embedding_waits_while_the_embedder_is_unreachable_and_completes_later(tmp_path):
    embedder = SwitchableEmbedder()
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        await store.ingest("t", "", DOCS)
        conn = raw(tmp_path)
        lose_rows(conn, vectors=2, keywords=2)
        conn.close()
        embedder.down = True
        waiting = await store.check_tenant("t", repair=True)
        assert waiting.repaired_keyword_rows == 2 and waiting.repaired_vectors == 0
        assert waiting.missing_vectors == 2 and not waiting.consistent
        assert "2 vectors wait for re-embedding" in waiting.deferred and "connection refused" in waiting.deferred
        [problem] = store.status().problems
        assert problem.kind == "inconsistent" and "wait for re-embedding" in problem.message

        embedder.down = False
        done = await store.check_tenant("t", repair=True)
        assert done.consistent and done.repaired_vectors == 2 and done.deferred == ""
        assert store.status().state == "ok"
    finally:
        store.close()


async def test_a_consistent_tenant_opens_without_a_repair(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", DOCS)
    store.close()
    embedder = HashEmbedder()
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        await store.stats("t")
        await store.settle_repairs(timeout_s=5)
        assert embedder.calls == 0 and store.status().state == "ok" and store.status().repaired_rows == 0
    finally:
        store.close()


@pytest.mark.parametrize("repair", [False, True])
async def test_a_read_only_tenant_is_checked_but_not_repaired(tmp_path, repair):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", DOCS)
    store.close()
    conn = raw(tmp_path)
    lose_rows(conn, vectors=1, keywords=1)
    conn.close()
    store = KnowledgeStore(settings_for(tmp_path, read_only=True), HashEmbedder())
    try:
        report = await store.check_tenant("t", repair=repair)
        assert not report.consistent and report.repaired_vectors == report.repaired_keyword_rows == 0
        assert ("read-only" in report.deferred) == repair
        assert {p.kind for p in store.status().problems} == {"read_only", "inconsistent"}
    finally:
        store.close()
