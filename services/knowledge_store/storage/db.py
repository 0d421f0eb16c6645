"""The tenant database itself: schema, connections, transactions, meta keys, directory names.

`TenantDB` is the entry point of the storage package: it owns one tenant's SQLite files (a
writer connection and a pool of readers, see the package docstring for durability and
concurrency); the other storage modules run their SQL on a connection it hands out.

Tenant directories: the tenant id itself for lower-case ids; an upper-case letter X is
written "+x" (so "Acme" lives in "+acme"), which keeps tenants that differ only in case apart
on case-insensitive file systems. '+' is not a tenant-id character, so the mapping is
reversible.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

SCHEMA_VERSION = 1
DB_FILE = "store.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS artifacts (
    artifact_id        TEXT PRIMARY KEY,
    title              TEXT NOT NULL,
    source_type        TEXT NOT NULL,
    source_id          TEXT NOT NULL,
    source_uri         TEXT NOT NULL,
    file_name          TEXT NOT NULL,
    file_type          TEXT NOT NULL,
    created_unix       INTEGER NOT NULL,
    modified_unix      INTEGER NOT NULL,
    owners             TEXT NOT NULL,
    tags               TEXT NOT NULL,
    reputation_prior   REAL NOT NULL,
    visibility_groups  TEXT NOT NULL,
    persona_id         TEXT NOT NULL,
    indexed_unix       INTEGER NOT NULL,
    feedback_helpful   INTEGER NOT NULL DEFAULT 0,
    feedback_unhelpful INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS artifacts_by_source ON artifacts(source_id, source_type);

CREATE TABLE IF NOT EXISTS entries (
    rid             INTEGER PRIMARY KEY AUTOINCREMENT,
    entry_id        TEXT NOT NULL UNIQUE,
    artifact_id     TEXT NOT NULL,
    persona_id      TEXT NOT NULL,
    chunk_index     INTEGER NOT NULL,
    timestamp_unix  INTEGER NOT NULL,
    richness        REAL NOT NULL,
    headline        TEXT NOT NULL,
    content_summary TEXT NOT NULL,
    text            TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_artifact ON entries(artifact_id, chunk_index);

CREATE TABLE IF NOT EXISTS entry_vectors (
    rid    INTEGER PRIMARY KEY,
    vector BLOB NOT NULL
);

CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
    title, body, tokenize = 'unicode61 remove_diacritics 0'
);

CREATE TABLE IF NOT EXISTS profiles (
    seq                       INTEGER PRIMARY KEY AUTOINCREMENT,
    persona_id                TEXT NOT NULL,
    name                      TEXT NOT NULL,
    version                   INTEGER NOT NULL,
    relevancy_weight          REAL NOT NULL,
    recency_weight            REAL NOT NULL,
    richness_weight           REAL NOT NULL,
    reputation_weight         REAL NOT NULL,
    fusion_method             TEXT NOT NULL,
    dense_weight              REAL NOT NULL,
    recency_mode              TEXT NOT NULL,
    recency_half_life_days    REAL NOT NULL,
    reputation_prior_strength REAL NOT NULL,
    is_default                INTEGER NOT NULL,
    updated_unix              INTEGER NOT NULL,
    UNIQUE (persona_id, name, version)
);

CREATE TABLE IF NOT EXISTS feedback (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    created_unix INTEGER NOT NULL,
    target       TEXT NOT NULL,
    target_id    TEXT NOT NULL,
    artifact_id  TEXT NOT NULL,
    helpful      INTEGER NOT NULL,
    user_id      TEXT NOT NULL,
    comment      TEXT NOT NULL,
    counted      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_by_artifact_user ON feedback(artifact_id, user_id);
"""


# -- tenant directories ----------------------------------------------------------------------

def tenant_dir_name(tenant_id: str) -> str:
    return "".join(f"+{c.lower()}" if c.isupper() else c for c in tenant_id)


def tenant_from_dir_name(name: str) -> str:
    out, upper = [], False
    for c in name:
        if c == "+":
            upper = True
            continue
        out.append(c.upper() if upper else c)
        upper = False
    return "".join(out)


# -- connections -----------------------------------------------------------------------------

def _connect(path: Path, *, writer: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("PRAGMA temp_store = MEMORY")
    if writer:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    else:
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA cache_size = -32000")
        conn.execute("PRAGMA mmap_size = 268435456")
    return conn


class TenantDB:
    """The SQLite files of one tenant: a writer connection and a pool of readers."""

    def __init__(self, directory: Path, tenant_id: str, dimension: int, index_config_json: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / DB_FILE
        self.tenant_id = tenant_id
        self.writer = _connect(self.path, writer=True)
        self._init_schema(dimension, index_config_json)
        self._pool: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()

    def _init_schema(self, dimension: int, index_config_json: str) -> None:
        conn = self.writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            defaults = {"schema_version": str(SCHEMA_VERSION), "tenant_id": self.tenant_id,
                        "dimension": str(dimension), "index_config": index_config_json}
            conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", defaults.items())
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A reader connection inside one read transaction (a consistent snapshot)."""
        with self._pool_lock:
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = _connect(self.path, writer=False)
            with self._pool_lock:
                self._all.append(conn)
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")
        finally:
            with self._pool_lock:
                self._pool.append(conn)

    def close(self) -> None:
        with self._pool_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
            self._pool.clear()
        self.writer.close()


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE … the caller COMMITs (so it can do so under its own lock); rolled back
    if the block raises or leaves without committing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


# -- meta ------------------------------------------------------------------------------------

def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))


# -- parameters ------------------------------------------------------------------------------

def json_list(values: Iterable[str]) -> str:
    """A list parameter as JSON, for `json_each(?)` (SQLite has no array parameters)."""
    return json.dumps(list(values), ensure_ascii=False)
