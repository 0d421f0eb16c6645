"""The change log the persisted derived indexes are stamped against and caught up from.

`index_log` (created with the schema, db.py) gets a row per vector or keyword row added,
changed or removed, written by triggers on `entry_vectors` and on FTS5's own per-row table
`entries_fts_docsize` (a virtual table takes no trigger; FTS5 writes that table for every row
of `entries_fts`) inside the writer's own transaction, so it never disagrees with what was
committed — even rows changed behind the store's back are logged. Row ids are never reused
(AUTOINCREMENT), so the set of rids logged after a stamp, looked up in SQLite now, tells
exactly what a derived index must drop and add.

    stamp       (database id, last seq): a persisted index is trusted only when both match,
                or when its seq is older and the log still holds every later row (replay)
    rid -1      a marker: every derived index must be rebuilt (a repair writes vectors and
                keyword rows the log does not see, see writes.py)
    trim        rows up to a persisted stamp are deleted once that stamp is on disk; the meta
                key `index_log_trimmed` remembers how far, so an older file is known stale
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded.storage.db import get_meta, set_meta

REBUILD_MARKER = -1


@dataclass(frozen=True, slots=True)
class Stamp:
    database_id: str
    seq: int


def has_log(conn: sqlite3.Connection) -> bool:
    """False for a database made before the log existed and opened read-only (never migrated)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'index_log'").fetchone() is not None


def stamp(conn: sqlite3.Connection) -> Stamp | None:
    """The commit the tenant's data is at now (None without a log or a database id)."""
    if not has_log(conn):
        return None
    database_id = get_meta(conn, "database_id")
    if not database_id:
        return None
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'index_log'").fetchone()
    return Stamp(database_id, int(row[0]) if row else 0)


def changed_since(conn: sqlite3.Connection, seq: int, limit: int) -> list[int] | None:
    """The distinct rids added or removed after `seq`, ascending; None when they cannot be
    replayed: the log no longer holds them all, a rebuild marker is among them, or there are
    more than `limit`."""
    trimmed = int(get_meta(conn, "index_log_trimmed") or 0)
    if seq < trimmed:
        return None
    rows = conn.execute("SELECT DISTINCT rid FROM index_log WHERE seq > ? ORDER BY rid LIMIT ?",
                        (seq, limit + 1)).fetchall()
    if len(rows) > limit or (rows and rows[0][0] == REBUILD_MARKER):
        return None
    return [r[0] for r in rows]


def mark_rebuild(conn: sqlite3.Connection) -> None:
    """Log that the derived indexes must be rebuilt (inside the writer's transaction)."""
    conn.execute("INSERT INTO index_log(rid) VALUES (?)", (REBUILD_MARKER,))


def trim(conn: sqlite3.Connection, seq: int) -> None:
    """Forget log rows up to `seq` (a persisted index now covers them)."""
    conn.execute("DELETE FROM index_log WHERE seq <= ?", (seq,))
    if seq > int(get_meta(conn, "index_log_trimmed") or 0):
        set_meta(conn, "index_log_trimmed", str(seq))


def vectors_of(conn: sqlite3.Connection, rids: Sequence[int],
               dimension: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """The well-formed vectors stored for `rids` now, in rid order."""
    ids: list[int] = []
    blobs: list[bytes] = []
    size = dimension * 4
    for rid, blob in conn.execute("SELECT rid, vector FROM entry_vectors WHERE rid IN "
                                  "(SELECT value FROM json_each(?)) ORDER BY rid", (json.dumps(list(rids)),)):
        if isinstance(blob, bytes) and len(blob) == size:
            ids.append(rid)
            blobs.append(blob)
    vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), dimension)
    return np.asarray(ids, np.int64), vectors.copy()


def keyword_rows_of(conn: sqlite3.Connection, rids: Sequence[int]) -> list[tuple[int, str, str]]:
    """(rid, title terms, body terms) of the FTS5 rows of `rids` now, in rid order."""
    return conn.execute("SELECT rowid, title, body FROM entries_fts WHERE rowid IN "
                        "(SELECT value FROM json_each(?)) ORDER BY rowid", (json.dumps(list(rids)),)).fetchall()
