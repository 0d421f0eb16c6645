"""The tenant database itself: schema, connections, transactions, meta keys, directory names.

`TenantDB` is the entry point of the storage package: it owns one tenant's SQLite files (a
writer connection and a pool of readers, see the package docstring for durability and
concurrency); the other storage modules run their SQL on a connection it hands out, inside
`read()` (a snapshot), `write()` (one IMMEDIATE transaction) or `guard()`.

Faults: every SQLite or file-system error raised inside those blocks, or while opening,
leaves as a typed error naming the path (faults.py), and its kind ("full", "read_only",
"corrupt") is reported to `on_fault` (the store's health). Read-only: a database whose file or
directory refuses writes (a read-only mount, an immutable file) is opened read-only instead
of failing: searches are served from it, `write()` raises FailedPrecondition. Without a
`-shm` file to share (it cannot be created in a read-only directory) it is opened immutable,
unless its write-ahead log still holds commits, which only a writable open can apply.

Tenant directories: the tenant id itself for lower-case ids; an upper-case letter X is
written "+x" (so "Acme" lives in "+acme"), which keeps tenants that differ only in case apart
on case-insensitive file systems. '+' is not a tenant-id character, so the mapping is
reversible.
"""
from __future__ import annotations

import errno
import functools
import json
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from services.knowledge_store.embedded.storage import faults, ranking_inputs, rowsums
from shared.errors import FailedPrecondition, NucleusError, Unavailable
from shared.text_hash import text_hash

log = logging.getLogger(__name__)

SCHEMA_VERSION = 9            # 2: `votes`, one vote per user per artifact; 3: row checksums (rowsums.py);
                              # 4: a profile's re-rank fields (ranking_inputs.add_rerank_columns);
                              # 5: a profile's learned-ranking fields (add_model_columns), `ranking_models`;
                              # 6: `title_vectors` (artifacts stored before are backfilled in the
                              # background: ../../title_vectors.py); 7: `ingest_keys`;
                              # 8: `entries.text_hash` (shared/text_hash.py), backfilled from the text;
                              # a profile's `fold_duplicates`; 9: `entries.span_start/span_end`
                              # (chunking.py), NULL for the entries stored before
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
    feedback_unhelpful INTEGER NOT NULL DEFAULT 0,
    checksum           INTEGER
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
    text            TEXT NOT NULL,
    checksum        INTEGER,
    text_hash       TEXT,
    span_start      INTEGER,
    span_end        INTEGER
);
CREATE INDEX IF NOT EXISTS entries_by_artifact ON entries(artifact_id, chunk_index);

CREATE TABLE IF NOT EXISTS entry_vectors (
    rid    INTEGER PRIMARY KEY,
    vector BLOB NOT NULL
);

CREATE TABLE IF NOT EXISTS title_vectors (
    artifact_id TEXT PRIMARY KEY,
    vector      BLOB NOT NULL
) WITHOUT ROWID;

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
    reranker                  TEXT NOT NULL DEFAULT '',
    rerank_top_n              INTEGER NOT NULL DEFAULT 20,
    rerank_weight             REAL NOT NULL DEFAULT 0.5,
    model_sha256              TEXT NOT NULL DEFAULT '',
    feature_version           INTEGER NOT NULL DEFAULT 0,
    feedback_expansion        TEXT NOT NULL DEFAULT '',
    fold_duplicates           INTEGER NOT NULL DEFAULT 0,
    is_default                INTEGER NOT NULL,
    updated_unix              INTEGER NOT NULL,
    UNIQUE (persona_id, name, version)
);

CREATE TABLE IF NOT EXISTS ranking_models (
    sha256          TEXT PRIMARY KEY,
    feature_version INTEGER NOT NULL,
    model           BLOB NOT NULL,
    created_unix    INTEGER NOT NULL
) WITHOUT ROWID;

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

CREATE TABLE IF NOT EXISTS index_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rid INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS index_log_vector_add AFTER INSERT ON entry_vectors
    BEGIN INSERT INTO index_log(rid) VALUES (new.rid); END;
CREATE TRIGGER IF NOT EXISTS index_log_vector_set AFTER UPDATE ON entry_vectors
    BEGIN INSERT INTO index_log(rid) VALUES (new.rid); END;
CREATE TRIGGER IF NOT EXISTS index_log_vector_remove AFTER DELETE ON entry_vectors
    BEGIN INSERT INTO index_log(rid) VALUES (old.rid); END;
CREATE TRIGGER IF NOT EXISTS index_log_keyword_add AFTER INSERT ON entries_fts_docsize
    BEGIN INSERT INTO index_log(rid) VALUES (new.id); END;
CREATE TRIGGER IF NOT EXISTS index_log_keyword_remove AFTER DELETE ON entries_fts_docsize
    BEGIN INSERT INTO index_log(rid) VALUES (old.id); END;

CREATE TABLE IF NOT EXISTS votes (
    artifact_id  TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    helpful      INTEGER NOT NULL,
    target       TEXT NOT NULL,
    target_id    TEXT NOT NULL,
    updated_unix INTEGER NOT NULL,
    PRIMARY KEY (artifact_id, user_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS searches (
    search_id    TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL,
    created_unix INTEGER NOT NULL,
    query_sha256 TEXT NOT NULL,
    items        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS searches_by_time ON searches(created_unix);

CREATE TABLE IF NOT EXISTS search_votes (
    search_id    TEXT NOT NULL,
    target_id    TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    helpful      INTEGER NOT NULL,
    created_unix INTEGER NOT NULL,
    PRIMARY KEY (search_id, target_id, user_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS ingest_keys (
    key          TEXT PRIMARY KEY,
    results      TEXT NOT NULL,
    created_unix INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS source_votes (
    source_id    TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    helpful      INTEGER NOT NULL,
    target_id    TEXT NOT NULL,
    updated_unix INTEGER NOT NULL,
    PRIMARY KEY (source_id, user_id)
) WITHOUT ROWID;
"""

# Schema version -> the step that brings an older database up to it, keeping its data.
def _add_title_vectors(conn: sqlite3.Connection) -> None:
    """Schema 6: the table of title vectors, empty: the background backfill (title_vectors.py
    of the KnowledgeStore) embeds the titles of the artifacts stored before."""
    conn.execute("CREATE TABLE IF NOT EXISTS title_vectors (artifact_id TEXT PRIMARY KEY, vector BLOB NOT NULL) "
                 "WITHOUT ROWID")


def _add_ingest_keys(conn: sqlite3.Connection) -> None:
    """Schema 7: the idempotency keys of committed ingests (storage/entries.py `remember`)."""
    conn.execute("CREATE TABLE IF NOT EXISTS ingest_keys (key TEXT PRIMARY KEY, results TEXT NOT NULL, "
                 "created_unix INTEGER NOT NULL) WITHOUT ROWID")


def _add_text_hashes(conn: sqlite3.Connection) -> None:
    """Schema 8: each entry's normalised text hash (shared/text_hash.py), computed from its stored
    text — derived data outside the row checksums (rowsums.py), so no row reads as corrupt after
    it — and a profile's `fold_duplicates` (off)."""
    ranking_inputs.add_fold_column(conn)
    if not has_text_hash(conn):
        conn.execute("ALTER TABLE entries ADD COLUMN text_hash TEXT")
    rows = conn.execute("SELECT rid, text FROM entries WHERE text_hash IS NULL").fetchall()
    conn.executemany("UPDATE entries SET text_hash = ? WHERE rid = ?", ((text_hash(t or ""), rid) for rid, t in rows))


def has_text_hash(conn: sqlite3.Connection) -> bool:
    return "text_hash" in {r[1] for r in conn.execute("PRAGMA table_info(entries)")}


def _add_spans(conn: sqlite3.Connection) -> None:
    """Schema 9: each entry's span in its document's extracted text (chunking.py), NULL (unknown)
    for the entries stored before — the document text is not kept, so it cannot be backfilled.
    Outside the row checksums, like the text hash."""
    if not has_spans(conn):
        conn.execute("ALTER TABLE entries ADD COLUMN span_start INTEGER")
        conn.execute("ALTER TABLE entries ADD COLUMN span_end INTEGER")


def has_spans(conn: sqlite3.Connection) -> bool:
    return "span_end" in {r[1] for r in conn.execute("PRAGMA table_info(entries)")}


_MIGRATIONS = {2: ranking_inputs.keep_one_vote_per_user, 3: rowsums.add_columns,
               4: ranking_inputs.add_rerank_columns, 5: ranking_inputs.add_model_columns,
               6: _add_title_vectors, 7: _add_ingest_keys, 8: _add_text_hashes, 9: _add_spans}


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

class TenantConnection(sqlite3.Connection):
    """A connection of one tenant: reads that find rows failing their checksums tell
    `row_faults` (storage/rowsums.py), which TenantDB reports to the store's health."""
    row_faults: Callable[[Iterable[int], Iterable[str]], None] | None = None
    known_corrupt: set[int] | frozenset[int] = frozenset()   # rids found corrupt so far (left out of answers); shared
    has_checksums: bool = True              # False: a schema-2 database served read-only (not migrated)
    has_text_hash: bool = True              # False: a schema-7 one (entries.text_hash is computed on read)
    has_spans: bool = True                  # False: a schema-8 one (no entry has a span)


def _connect_read_only(path: Path, *, immutable: bool) -> sqlite3.Connection:
    """A read-only connection (`mode=ro`, or `immutable=1`: no locking, no WAL), checked by a read."""
    uri = path.resolve().as_uri() + ("?mode=ro&immutable=1" if immutable else "?mode=ro")
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0,
                           factory=TenantConnection)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _unwritable(directory: Path, path: Path) -> str:
    """Why the file system refuses writes to the database (or its directory); "" if it does not."""
    for target in (directory, path):
        if target.exists() and not os.access(target, os.W_OK):
            return f"{target} is not writable"
    return ""


def _connect(path: Path, *, writer: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0,
                           factory=TenantConnection)
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


def connect_for_scrub(path: Path, *, writer: bool = False) -> sqlite3.Connection:
    """A connection of its own for the background scrub (../scrub.py) or a backup (../backup.py):
    read-only (checked by a read), or a writer for the checksum backfill. Raises sqlite3.Error."""
    if not path.is_file():
        raise sqlite3.OperationalError(f"unable to open database file {path}: it does not exist")
    conn = _connect(path, writer=True) if writer else _connect_read_only(path, immutable=False)
    conn.text_factory = decode_text
    return conn


#: Text columns as str; bytes a disk changed into invalid UTF-8 stay readable (as surrogates) so
#: the row fails its checksum (rowsums.py) instead of failing the whole read. A partial of `str`:
#: SQLite calls it for every text value read, and it runs in C.
decode_text = functools.partial(str, encoding="utf-8", errors="surrogateescape")


FaultReporter = Callable[[str, str], None]        # (kind, message), see faults.py


class TenantDB:
    """The SQLite files of one tenant: a writer connection and a pool of readers.

    `read_only_reason` is "" for a writable tenant; otherwise why it is served read-only (then
    `writer` is a read-only connection too, used for the loads that rebuild the indexes)."""

    def __init__(self, directory: Path, tenant_id: str, dimension: int, index_config_json: str, *,
                 data_dir: Path | None = None, read_only: bool = False,
                 on_fault: FaultReporter | None = None, on_write: Callable[[], None] | None = None,
                 corrupt: tuple[set[int], set[str]] | None = None) -> None:
        self.directory = directory
        self.path = directory / DB_FILE
        self.tenant_id = tenant_id
        self.data_dir = data_dir or directory.parent.parent
        self._on_fault = on_fault or (lambda kind, message: None)
        self._on_write = on_write or (lambda: None)
        self._pool: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._immutable = False
        self.read_only_reason = "the KnowledgeStore is configured read-only" if read_only else ""
        # entries (rids) and artifacts found failing their checksums (rowsums.py); shared with the
        # store's scrub, which finds them in tenants that are not open too
        self.corrupt_rids, self.corrupt_artifacts = corrupt if corrupt is not None else (set(), set())
        self.has_checksums = self.has_text_hash = self.has_spans = True
        try:
            self.writer = (self._open_read_only() if read_only
                           else self._open_writer(dimension, index_config_json))
            self.has_checksums = rowsums.has_columns(self.writer)
            self.has_text_hash = has_text_hash(self.writer)
            self.has_spans = has_spans(self.writer)
        except (sqlite3.Error, OSError) as err:
            raise self.fault(err, "open") from err
        self._adopt(self.writer)

    def _adopt(self, conn: sqlite3.Connection) -> None:
        """Tie a connection to this tenant's record of corrupt rows."""
        conn.text_factory = decode_text
        conn.row_faults = self.rows_failed
        conn.known_corrupt = self.corrupt_rids
        conn.has_checksums = self.has_checksums
        conn.has_text_hash = self.has_text_hash
        conn.has_spans = self.has_spans

    def rows_failed(self, rids: Iterable[int], artifacts: Iterable[str] = ()) -> None:
        """Entries (rids) or artifacts found failing their checksums: left out of answers from now
        on, and reported to the store's health as "corrupt_rows"."""
        new_rids = set(rids) - self.corrupt_rids
        new_artifacts = set(artifacts) - self.corrupt_artifacts
        if not new_rids and not new_artifacts:
            return
        self.corrupt_rids.update(new_rids)
        self.corrupt_artifacts.update(new_artifacts)
        self._on_fault(faults.CORRUPT_ROWS, self.corrupt_rows_message())

    def corrupt_rows_message(self) -> str:
        rids, arts = sorted(self.corrupt_rids), sorted(self.corrupt_artifacts)
        parts = []
        if rids:
            parts.append(f"{len(rids)} entries (rid {', '.join(map(str, rids[:10]))}{', …' if len(rids) > 10 else ''})")
        if arts:
            parts.append(f"{len(arts)} artifacts ({', '.join(arts[:5])}{', …' if len(arts) > 5 else ''})")
        return (f"tenant '{self.tenant_id}': {' and '.join(parts)} of {self.path} fail their checksums: left out of "
                "answers; re-ingest those documents or restore a backup")

    def forget_corrupt_rows(self) -> None:
        """After a pass found no corrupt row (they were replaced or deleted since)."""
        self.corrupt_rids.clear()
        self.corrupt_artifacts.clear()

    def _open_writer(self, dimension: int, index_config_json: str) -> sqlite3.Connection:
        """The writer connection (schema created if need be); a read-only one, with
        `read_only_reason` set, when the file system refuses writes to an existing database."""
        exists = self.path.is_file()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            reason = _unwritable(self.directory, self.path)
            if reason:
                raise PermissionError(errno.EACCES, reason)
            conn = _connect(self.path, writer=True)
            try:
                self._init_schema(conn, dimension, index_config_json)
            except BaseException:
                conn.close()
                raise
            return conn
        except (sqlite3.Error, OSError) as err:
            kind = faults.classify(err, self.data_dir)
            cannot_open = isinstance(err, sqlite3.Error) and faults.primary_code(err) == faults.SQLITE_CANTOPEN
            if not exists or not (kind == faults.READ_ONLY or cannot_open):
                raise
            self.read_only_reason = f"{self.directory} refuses writes ({err})"
            log.warning("tenant %s: serving %s read-only: %s", self.tenant_id, self.path, self.read_only_reason)
            return self._open_read_only()

    def _open_read_only(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise FailedPrecondition(f"tenant '{self.tenant_id}' has no database at {self.path} and it cannot be "
                                     f"created: {self.read_only_reason}")
        try:
            conn = _connect_read_only(self.path, immutable=False)
        except sqlite3.Error as err:
            if faults.primary_code(err) not in (faults.SQLITE_CANTOPEN, faults.SQLITE_READONLY):
                raise
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.is_file() and wal.stat().st_size > 0:
                raise Unavailable(f"tenant '{self.tenant_id}' cannot be read from the read-only {self.directory}: "
                                  f"its write-ahead log {wal} holds commits that only a writable open can "
                                  "apply; make the directory writable once, then restart") from err
            conn = _connect_read_only(self.path, immutable=True)
            self._immutable = True
        self._on_fault(faults.READ_ONLY, f"tenant '{self.tenant_id}' is served read-only: {self.read_only_reason}")
        return conn

    def fault(self, err: BaseException, action: str) -> NucleusError:
        """`err` as a typed error (faults.py); its kind is reported to the store's health."""
        if isinstance(err, NucleusError):
            return err
        error, kind = faults.translate(err, tenant_id=self.tenant_id, path=self.path, data_dir=self.data_dir,
                                       action=action)
        if kind in (faults.FULL, faults.READ_ONLY, faults.CORRUPT):
            self._on_fault(kind, str(error))        # the store's health logs it
        else:
            log.warning("%s", error)
        return error

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        """Storage errors raised inside the block leave as typed errors (see `fault`)."""
        try:
            yield
        except (sqlite3.Error, OSError) as err:
            raise self.fault(err, action) from err

    def _init_schema(self, conn: sqlite3.Connection, dimension: int, index_config_json: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            defaults = {"schema_version": str(SCHEMA_VERSION), "tenant_id": self.tenant_id,
                        "dimension": str(dimension), "index_config": index_config_json,
                        "database_id": uuid.uuid4().hex}
            conn.executemany("INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?)", defaults.items())
            _migrate(conn)
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    @contextmanager
    def read(self, action: str = "search") -> Iterator[sqlite3.Connection]:
        """A reader connection inside one read transaction (a consistent snapshot)."""
        with self.guard(action):
            with self._pool_lock:
                conn = self._pool.pop() if self._pool else None
            if conn is None:
                conn = (_connect_read_only(self.path, immutable=self._immutable) if self.read_only_reason
                        else _connect(self.path, writer=False))
                self._adopt(conn)
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

    @contextmanager
    def write(self, action: str = "write") -> Iterator[sqlite3.Connection]:
        """The writer connection inside BEGIN IMMEDIATE … the caller COMMITs (so it can do so
        under its own lock); rolled back if the block raises or leaves without committing.
        FailedPrecondition at once when the tenant is read-only; `on_write` after a commit."""
        if self.read_only_reason:
            raise FailedPrecondition(f"tenant '{self.tenant_id}' is read-only, the {action} was refused: "
                                     f"{self.read_only_reason}; searches are still served")
        conn = self.writer
        with self.guard(action):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                committed = not conn.in_transaction
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        if committed:
            self._on_write()

    def close(self) -> None:
        with self._pool_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
            self._pool.clear()
        self.writer.close()


# -- meta ------------------------------------------------------------------------------------

def _migrate(conn: sqlite3.Connection) -> None:
    """Run the `_MIGRATIONS` steps a database made by an older version needs (inside the
    schema transaction, so a failed step leaves it as it was)."""
    stored = int(get_meta(conn, "schema_version") or SCHEMA_VERSION)
    for version in sorted(v for v in _MIGRATIONS if stored < v <= SCHEMA_VERSION):
        _MIGRATIONS[version](conn)
        log.info("migrated %s to schema version %d", get_meta(conn, "tenant_id"), version)
    if stored < SCHEMA_VERSION:
        set_meta(conn, "schema_version", str(SCHEMA_VERSION))


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
