"""The consistency of a tenant's rows: every entry has one vector and one keyword row, and no
vector or keyword row outlives its entry.

    cheap_count     entries only (compared on open with the vectors and keyword rows the
                    indexes were just built from; no join, no scan of the derived tables)
    find_problems   the full check: rids of entries missing a vector or a keyword row,
                    malformed vectors (wrong size, not finite), orphaned vectors and keyword
                    rows, entries whose artifact row is gone, SQLite's `quick_check`, and rows
                    failing their checksums (rowsums.py)
    stored_entries  what a repair needs to rebuild an entry's derived rows (text, headline,
                    artifact title)
    put_vectors, put_keyword_rows, delete_orphans
                    the repair's writes; each skips a row whose entry is gone by then, and
                    replaces only the malformed vectors it is told to
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded.storage import rowsums

MAX_INTEGRITY_MESSAGES = 20


@dataclass(frozen=True, slots=True)
class Found:
    """What the full check found (row ids, best first by rid)."""
    entries: int
    vectors: int
    keyword_rows: int
    missing_vectors: list[int]
    malformed_vectors: list[int]
    missing_keyword_rows: list[int]
    orphan_vectors: list[int]
    orphan_keyword_rows: list[int]
    entries_without_artifact: int
    integrity_errors: list[str]
    corrupt_rows: list[int] = field(default_factory=list)          # entries failing their checksums
    corrupt_artifacts: list[str] = field(default_factory=list)
    unverified_rows: int = 0                                        # rows without a checksum yet


def cheap_count(conn: sqlite3.Connection) -> int:
    """Entries of the tenant (SQLite counts the smallest index; nothing is joined)."""
    return conn.execute("SELECT count(*) FROM entries").fetchone()[0]


def _rids(conn: sqlite3.Connection, sql: str, *params: object) -> list[int]:
    return [r[0] for r in conn.execute(sql, params)]


def find_problems(conn: sqlite3.Connection, dimension: int) -> Found:
    """The full check (see the module docstring); reads every row once."""
    integrity = [r[0] for r in conn.execute("PRAGMA quick_check")]
    corrupt: list[int] = []
    corrupt_artifacts: list[str] = []
    unverified = 0
    if rowsums.has_columns(conn):
        step = rowsums.Scanned()
        while not step.done:
            step = rowsums.scan(conn, step.last_rid, 2_000)
            corrupt += step.corrupt
            corrupt_artifacts += step.corrupt_artifacts
        unverified = rowsums.unverified(conn)
    else:
        unverified = rowsums.unverified(conn)
    size = dimension * 4
    live = "rid IN (SELECT rid FROM entries)"            # an orphan counts as an orphan, not as malformed
    malformed = _rids(conn, f"SELECT rid FROM entry_vectors WHERE {live} AND "
                            "(typeof(vector) != 'blob' OR length(vector) != ?)", size)
    for rid, blob in conn.execute(f"SELECT rid, vector FROM entry_vectors WHERE {live} AND length(vector) = ?",
                                  (size,)):
        if not np.isfinite(np.frombuffer(blob, dtype=np.float32)).all():
            malformed.append(rid)
    return Found(
        entries=cheap_count(conn),
        vectors=conn.execute("SELECT count(*) FROM entry_vectors").fetchone()[0],
        keyword_rows=conn.execute("SELECT count(*) FROM entries_fts").fetchone()[0],
        missing_vectors=_rids(conn, "SELECT e.rid FROM entries e WHERE NOT EXISTS "
                                    "(SELECT 1 FROM entry_vectors v WHERE v.rid = e.rid) ORDER BY e.rid"),
        malformed_vectors=sorted(malformed),
        missing_keyword_rows=_rids(conn, "SELECT e.rid FROM entries e WHERE NOT EXISTS "
                                         "(SELECT 1 FROM entries_fts f WHERE f.rowid = e.rid) ORDER BY e.rid"),
        orphan_vectors=_rids(conn, "SELECT v.rid FROM entry_vectors v WHERE NOT EXISTS "
                                   "(SELECT 1 FROM entries e WHERE e.rid = v.rid) ORDER BY v.rid"),
        orphan_keyword_rows=_rids(conn, "SELECT rowid FROM entries_fts WHERE rowid NOT IN "
                                        "(SELECT rid FROM entries) ORDER BY rowid"),
        entries_without_artifact=conn.execute(
            "SELECT count(*) FROM entries e WHERE NOT EXISTS "
            "(SELECT 1 FROM artifacts a WHERE a.artifact_id = e.artifact_id)").fetchone()[0],
        integrity_errors=[] if integrity == ["ok"] else integrity[:MAX_INTEGRITY_MESSAGES],
        corrupt_rows=sorted(set(corrupt) - set(malformed)),      # a malformed vector is re-embedded, not lost
        corrupt_artifacts=sorted(set(corrupt_artifacts)), unverified_rows=unverified,
    )


@dataclass(frozen=True, slots=True)
class StoredEntry:
    rid: int
    title: str                 # the artifact's title ("" if its row is gone)
    headline: str
    text: str


def stored_entries(conn: sqlite3.Connection, rids: Sequence[int]) -> list[StoredEntry]:
    """The stored entries with these rids that still exist, in rid order."""
    rows = conn.execute(
        "SELECT e.rid, coalesce(a.title, ''), e.headline, e.text FROM entries e "
        "LEFT JOIN artifacts a ON a.artifact_id = e.artifact_id "
        "WHERE e.rid IN (SELECT value FROM json_each(?)) ORDER BY e.rid", (json.dumps(sorted(set(rids))),))
    return [StoredEntry(*row) for row in rows]


def put_vectors(conn: sqlite3.Connection, rids: Sequence[int], vectors: NDArray[np.float32],
                replace: Sequence[int] = ()) -> int:
    """Store the vectors of entries that still exist and have none (or whose rid is in
    `replace`: malformed ones); returns rows written."""
    if replace:
        conn.execute("DELETE FROM entry_vectors WHERE rid IN (SELECT value FROM json_each(?))",
                     (json.dumps(sorted(set(replace))),))
    written = 0
    for rid, vector in zip(rids, vectors, strict=True):
        cur = conn.execute("INSERT INTO entry_vectors(rid, vector) SELECT ?, ? "
                           "WHERE EXISTS (SELECT 1 FROM entries WHERE rid = ?) "
                           "ON CONFLICT(rid) DO NOTHING",
                           (rid, np.ascontiguousarray(vector, dtype=np.float32).tobytes(), rid))
        written += max(cur.rowcount, 0)
    rowsums.refresh_entries(conn, rids)     # the re-embedded vector is part of the entry's checksum
    return written


def put_keyword_rows(conn: sqlite3.Connection, rows: Sequence[tuple[int, str, str]]) -> int:
    """Store (rid, analysed title, analysed body) for entries that still exist and have no
    keyword row; returns rows written."""
    written = 0
    for rid, title, body in rows:
        cur = conn.execute("INSERT INTO entries_fts(rowid, title, body) SELECT ?, ?, ? "
                           "WHERE EXISTS (SELECT 1 FROM entries WHERE rid = ?) "
                           "AND NOT EXISTS (SELECT 1 FROM entries_fts WHERE rowid = ?)",
                           (rid, title, body, rid, rid))
        written += max(cur.rowcount, 0)
    return written


def delete_orphans(conn: sqlite3.Connection) -> int:
    """Delete vectors and keyword rows whose entry is gone; returns rows deleted."""
    vectors = conn.execute("DELETE FROM entry_vectors WHERE rid NOT IN (SELECT rid FROM entries)").rowcount
    orphans = _rids(conn, "SELECT rowid FROM entries_fts WHERE rowid NOT IN (SELECT rid FROM entries)")
    if orphans:
        conn.execute("DELETE FROM entries_fts WHERE rowid IN (SELECT value FROM json_each(?))", (json.dumps(orphans),))
    return vectors + len(orphans)
