"""The system of record: one SQLite database per tenant, `<data_dir>/tenants/<tenant>/store.sqlite`.

Tables (schema version 1):

    meta            key → value (tenant_id, dimension, index config, schema version)
    artifacts       one row per artifact; owners/tags/visibility_groups as JSON arrays;
                    feedback counters
    entries         one row per chunk; `rid` INTEGER PRIMARY KEY AUTOINCREMENT is the FAISS
                    id and is never reused, `entry_id` = "<artifact_id>#<chunk_index>"
    entry_vectors   rid → float32 vector blob (kept apart so scans of entries stay small)
    entries_fts     FTS5 (title, body) of *analysed* terms, rowid = rid
    profiles        ranking profiles, one row per (persona, name, version)
    feedback        every vote ever cast (the artifact counters are derived from them)

Durability: WAL journal with `synchronous=FULL`, so every COMMIT fsyncs the WAL before it
returns: an acknowledged ingest survives `kill -9` *and* power loss. (NORMAL would survive
a process crash but may lose the last commits on power loss, which breaks
"acknowledged = durable".) Records, keyword rows and vectors of one request change in one
transaction, so a crash leaves either all or none of them.

Concurrency: one writer connection per tenant (the core serialises writers), readers take
a connection from a small pool and read inside one transaction (a consistent snapshot).

Tenant directories: the tenant id itself for lower-case ids; an upper-case letter X is
written "+x" (so "Acme" lives in "+acme"), which keeps tenants that differ only in case apart
on case-insensitive file systems. '+' is not a tenant-id character, so the mapping is
reversible.
"""
from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ranking.profile import RankingProfile
from shared.records import ArtifactMeta, ArtifactSummary, Entry, SearchFilters, SourceStats

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


# -- writes ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EntryRow:
    """One chunk ready to be written (everything but the row id)."""
    chunk_index: int
    text: str
    headline: str
    content_summary: str
    timestamp_unix: int
    richness: float
    fts_title: str            # analysed terms, space separated
    fts_body: str


def _json_list(values: Iterable[str]) -> str:
    return json.dumps(list(values), ensure_ascii=False)


def _rids_of_artifacts(conn: sqlite3.Connection, artifact_ids: Sequence[str]) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT rid FROM entries WHERE artifact_id IN (SELECT value FROM json_each(?))",
        (_json_list(artifact_ids),))]


def _delete_rids(conn: sqlite3.Connection, rids: list[int]) -> None:
    if not rids:
        return
    ids = json.dumps(rids)
    conn.execute("DELETE FROM entries_fts WHERE rowid IN (SELECT value FROM json_each(?))", (ids,))
    conn.execute("DELETE FROM entry_vectors WHERE rid IN (SELECT value FROM json_each(?))", (ids,))
    conn.execute("DELETE FROM entries WHERE rid IN (SELECT value FROM json_each(?))", (ids,))


def replace_artifact(conn: sqlite3.Connection, meta: ArtifactMeta, persona_id: str, indexed_unix: int,
                     rows: Sequence[EntryRow], vectors: NDArray[np.float32]) -> tuple[list[int], list[int]]:
    """Upsert one artifact and replace all its entries. Returns (removed rids, new rids).

    Feedback counters of an existing artifact are kept (they are about the artifact).
    """
    old = _rids_of_artifacts(conn, [meta.artifact_id])
    _delete_rids(conn, old)
    conn.execute(
        """INSERT INTO artifacts(artifact_id, title, source_type, source_id, source_uri, file_name,
               file_type, created_unix, modified_unix, owners, tags, reputation_prior,
               visibility_groups, persona_id, indexed_unix)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT(artifact_id) DO UPDATE SET
               title = excluded.title, source_type = excluded.source_type,
               source_id = excluded.source_id, source_uri = excluded.source_uri,
               file_name = excluded.file_name, file_type = excluded.file_type,
               created_unix = excluded.created_unix, modified_unix = excluded.modified_unix,
               owners = excluded.owners, tags = excluded.tags,
               reputation_prior = excluded.reputation_prior,
               visibility_groups = excluded.visibility_groups,
               persona_id = excluded.persona_id, indexed_unix = excluded.indexed_unix""",
        (meta.artifact_id, meta.title, meta.source_type, meta.source_id, meta.source_uri,
         meta.file_name, meta.file_type, meta.created_unix, meta.modified_unix,
         _json_list(meta.owners), _json_list(meta.tags), float(meta.reputation_prior),
         _json_list(meta.visibility_groups), persona_id, indexed_unix))
    new: list[int] = []
    for row, vector in zip(rows, vectors, strict=True):
        (rid,) = conn.execute(
            """INSERT INTO entries(entry_id, artifact_id, persona_id, chunk_index, timestamp_unix,
                   richness, headline, content_summary, text)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING rid""",
            (f"{meta.artifact_id}#{row.chunk_index}", meta.artifact_id, persona_id, row.chunk_index,
             row.timestamp_unix, row.richness, row.headline, row.content_summary, row.text)).fetchone()
        new.append(rid)
    conn.executemany("INSERT INTO entry_vectors(rid, vector) VALUES (?, ?)",
                     ((rid, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for rid, v in zip(new, vectors)))
    conn.executemany("INSERT INTO entries_fts(rowid, title, body) VALUES (?, ?, ?)",
                     ((rid, row.fts_title, row.fts_body) for rid, row in zip(new, rows)))
    return old, new


def delete_artifacts(conn: sqlite3.Connection, artifact_ids: Sequence[str]) -> tuple[int, list[int]]:
    """Delete artifacts, their entries, vectors, keyword rows and feedback.
    Returns (artifacts deleted, removed rids)."""
    rids = _rids_of_artifacts(conn, artifact_ids)
    _delete_rids(conn, rids)
    ids = _json_list(artifact_ids)
    conn.execute("DELETE FROM feedback WHERE artifact_id IN (SELECT value FROM json_each(?))", (ids,))
    cur = conn.execute("DELETE FROM artifacts WHERE artifact_id IN (SELECT value FROM json_each(?))", (ids,))
    return cur.rowcount, rids


def load_vectors(conn: sqlite3.Connection, dimension: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Every (rid, vector) of the tenant, in rid order."""
    ids: list[int] = []
    blobs: list[bytes] = []
    for rid, blob in conn.execute("SELECT rid, vector FROM entry_vectors ORDER BY rid"):
        ids.append(rid)
        blobs.append(blob)
    vectors = np.frombuffer(b"".join(blobs), dtype=np.float32)
    if vectors.size != len(ids) * dimension:
        raise ValueError(f"stored vectors do not all have {dimension} dimensions")
    return np.asarray(ids, dtype=np.int64), vectors.reshape(len(ids), dimension).copy()


def keyword_rows(conn: sqlite3.Connection) -> Iterator[tuple[int, str, str]]:
    """Every (rid, analysed title terms, analysed body terms) of entries_fts, in rid order."""
    yield from conn.execute("SELECT rowid, title, body FROM entries_fts ORDER BY rowid")


# -- filters ---------------------------------------------------------------------------------

# The date an entry is filtered (and ranked) by: its own timestamp, else the artifact's.
EFFECTIVE_TIME = ("(CASE WHEN e.timestamp_unix > 0 THEN e.timestamp_unix "
                  "WHEN a.modified_unix > 0 THEN a.modified_unix ELSE a.created_unix END)")


def _any_of(column_json: str) -> str:
    return f"EXISTS (SELECT 1 FROM json_each({column_json}) j WHERE j.value IN (SELECT value FROM json_each(?)))"


def filter_clause(f: SearchFilters) -> tuple[str, list[object]]:
    """SQL condition over `e` (entries) and `a` (artifacts) for `f`, with its parameters."""
    parts: list[str] = []
    params: list[object] = []
    if f.date_from_unix or f.date_to_unix:
        parts.append(f"{EFFECTIVE_TIME} > 0")
    if f.date_from_unix:
        parts.append(f"{EFFECTIVE_TIME} >= ?")
        params.append(f.date_from_unix)
    if f.date_to_unix:
        parts.append(f"{EFFECTIVE_TIME} <= ?")
        params.append(f.date_to_unix)
    for column, values in (("a.source_type", f.source_types), ("a.source_id", f.source_ids),
                           ("e.artifact_id", f.artifact_ids)):
        if values:
            parts.append(f"{column} IN (SELECT value FROM json_each(?))")
            params.append(_json_list(values))
    for column, values in (("a.tags", f.tags), ("a.owners", f.owners)):
        if values:
            parts.append(_any_of(column))
            params.append(_json_list(values))
    if f.persona_id:
        parts.append("e.persona_id = ?")
        params.append(f.persona_id)
    if f.enforce_visibility:
        parts.append(f"(a.visibility_groups = '[]' OR {_any_of('a.visibility_groups')})")
        params.append(_json_list(f.visibility_groups))
    return (" AND ".join(parts) or "1"), params


def allowed_rids(conn: sqlite3.Connection, f: SearchFilters) -> NDArray[np.int64]:
    where, params = filter_clause(f)
    cur = conn.execute(
        f"SELECT e.rid FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id WHERE {where}", params)
    return np.fromiter((r[0] for r in cur), dtype=np.int64)


def all_rids(conn: sqlite3.Connection) -> NDArray[np.int64]:
    return np.fromiter((r[0] for r in conn.execute("SELECT rid FROM entries")), dtype=np.int64)


def entry_count(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT count(*) FROM entries").fetchone()[0]


# -- searches --------------------------------------------------------------------------------

def keyword_search(conn: sqlite3.Connection, match: str, f: SearchFilters, k: int,
                   weights: tuple[float, float]) -> list[tuple[int, float]]:
    """(rid, BM25) best first; BM25 is FTS5's bm25() negated so that higher is better.

    Not on the search path any more (the core searches keyword_index.KeywordIndex, built from
    these FTS5 rows); kept as an SQL-only reference / diagnostic over the durable keyword store.

    FTS5's bm25 (k1 = 1.2, b = 0.75): term frequency = Σ over columns of weight × count,
    document length = tokens of all columns, avgdl over all rows, idf = ln((N − n + ½)/(n + ½))
    floored at 1e-6 (so a term in more than half of the tenant's entries barely counts).
    """
    rank = f"bm25(entries_fts, {float(weights[0])!r}, {float(weights[1])!r})"
    if f.is_empty:
        sql = (f"SELECT rowid, -{rank} AS score FROM entries_fts WHERE entries_fts MATCH ? "
               f"ORDER BY score DESC, rowid LIMIT ?")
        return conn.execute(sql, (match, k)).fetchall()
    where, params = filter_clause(f)
    sql = (f"SELECT entries_fts.rowid, -{rank} AS score FROM entries_fts "
           f"JOIN entries e ON e.rid = entries_fts.rowid JOIN artifacts a ON a.artifact_id = e.artifact_id "
           f"WHERE entries_fts MATCH ? AND {where} ORDER BY score DESC, entries_fts.rowid LIMIT ?")
    return conn.execute(sql, (match, *params, k)).fetchall()


def listing(conn: sqlite3.Connection, f: SearchFilters, k: int) -> list[int]:
    """Entries matching `f`, newest first (then most recently indexed, then document order)."""
    where, params = filter_clause(f)
    sql = (f"SELECT e.rid FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id WHERE {where} "
           f"ORDER BY {EFFECTIVE_TIME} DESC, a.indexed_unix DESC, e.artifact_id, e.chunk_index LIMIT ?")
    return [r[0] for r in conn.execute(sql, (*params, k))]


_HIT_COLUMNS = """e.rid, e.entry_id, e.persona_id, e.artifact_id, e.chunk_index, e.text, e.headline,
    e.content_summary, e.timestamp_unix, e.richness,
    a.title, a.source_type, a.source_id, a.source_uri, a.file_name, a.file_type, a.created_unix,
    a.modified_unix, a.owners, a.tags, a.reputation_prior, a.visibility_groups,
    a.feedback_helpful, a.feedback_unhelpful"""


@functools.lru_cache(maxsize=8192)
def _json_tuple(text: str) -> tuple[str, ...]:
    """A stored JSON list as a tuple; cached, since a handful of owner/tag/group lists repeat
    across every hit of every search (decoding them was the largest cost of building hits)."""
    return tuple(json.loads(text))


def _artifact_summary(row: Sequence) -> ArtifactSummary:
    return ArtifactSummary(
        artifact_id=row[3], title=row[10], source_type=row[11], source_id=row[12], source_uri=row[13],
        file_name=row[14], file_type=row[15], created_unix=row[16], modified_unix=row[17],
        owners=_json_tuple(row[18]), tags=_json_tuple(row[19]),
        reputation_prior=row[20], visibility_groups=_json_tuple(row[21]),
        feedback_helpful=row[22], feedback_unhelpful=row[23])


def _rows_to_records(rows: Iterable[Sequence], tenant_id: str) -> dict[int, tuple[Entry, ArtifactSummary]]:
    out: dict[int, tuple[Entry, ArtifactSummary]] = {}
    artifacts: dict[str, ArtifactSummary] = {}
    for row in rows:
        summary = artifacts.get(row[3])
        if summary is None:
            summary = artifacts[row[3]] = _artifact_summary(row)
        entry = Entry(id=row[1], tenant_id=tenant_id, persona_id=row[2], artifact_id=row[3],
                      chunk_index=row[4], text=row[5], headline=row[6], content_summary=row[7],
                      timestamp_unix=row[8], richness=row[9])
        out[row[0]] = (entry, summary)
    return out


def records_by_rid(conn: sqlite3.Connection, rids: Iterable[int],
                   tenant_id: str) -> dict[int, tuple[Entry, ArtifactSummary]]:
    ids = json.dumps(sorted({int(r) for r in rids}))
    rows = conn.execute(
        f"SELECT {_HIT_COLUMNS} FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id "
        f"WHERE e.rid IN (SELECT value FROM json_each(?))", (ids,))
    return _rows_to_records(rows, tenant_id)


_CANDIDATE_COLUMNS = (f"e.rid, e.entry_id, e.artifact_id, {EFFECTIVE_TIME}, e.richness, a.reputation_prior, "
                      "a.feedback_helpful, a.feedback_unhelpful")


def candidate_rows(conn: sqlite3.Connection, rids: Iterable[int]) -> dict[int, tuple]:
    """rid → (entry_id, artifact_id, effective time, richness, reputation prior, helpful,
    unhelpful): the ranking signals only, no text (see `CandidateColumns`)."""
    ids = json.dumps(sorted({int(r) for r in rids}))
    rows = conn.execute(
        f"SELECT {_CANDIDATE_COLUMNS} FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id "
        f"WHERE e.rid IN (SELECT value FROM json_each(?))", (ids,))
    return {row[0]: row[1:] for row in rows}


def records_by_entry_id(conn: sqlite3.Connection, entry_ids: Sequence[str],
                        tenant_id: str) -> dict[str, tuple[Entry, ArtifactSummary]]:
    rows = conn.execute(
        f"SELECT {_HIT_COLUMNS} FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id "
        f"WHERE e.entry_id IN (SELECT value FROM json_each(?))", (_json_list(entry_ids),))
    return {entry.id: (entry, art) for entry, art in _rows_to_records(rows, tenant_id).values()}


# -- counts and stats ------------------------------------------------------------------------

def counts(conn: sqlite3.Connection) -> dict[str, int]:
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "artifacts": one("SELECT count(*) FROM artifacts"),
        "records": one("SELECT count(*) FROM entries"),
        "stored_vectors": one("SELECT count(*) FROM entry_vectors"),
        "keyword_docs": one("SELECT count(*) FROM entries_fts"),
        "last_indexed_unix": one("SELECT coalesce(max(indexed_unix), 0) FROM artifacts"),
    }


def source_stats(conn: sqlite3.Connection) -> list[SourceStats]:
    rows = conn.execute(
        """SELECT a.source_id, a.source_type, count(*), coalesce(sum(n.entries), 0), max(a.indexed_unix),
                  json_group_array(json(a.visibility_groups)), json_group_array(json(a.tags))
           FROM artifacts a
           LEFT JOIN (SELECT artifact_id, count(*) AS entries FROM entries GROUP BY artifact_id) n
             ON n.artifact_id = a.artifact_id
           GROUP BY a.source_id, a.source_type ORDER BY a.source_id, a.source_type""")
    out = []
    for source_id, source_type, n_art, n_ent, last, groups, tags in rows:
        out.append(SourceStats(
            source_id=source_id, source_type=source_type, artifacts=n_art, entries=n_ent,
            last_indexed_unix=last or 0,
            visibility_groups=tuple(sorted({g for lst in json.loads(groups) for g in lst})),
            tags=tuple(sorted({t for lst in json.loads(tags) for t in lst}))))
    return out


# -- ranking profiles ------------------------------------------------------------------------

_PROFILE_FIELDS = ("relevancy_weight", "recency_weight", "richness_weight", "reputation_weight",
                   "fusion_method", "dense_weight", "recency_mode", "recency_half_life_days",
                   "reputation_prior_strength")
_PROFILE_COLUMNS = "persona_id, name, version, " + ", ".join(_PROFILE_FIELDS) + ", is_default, updated_unix, seq"


def insert_profile(conn: sqlite3.Connection, p: RankingProfile, updated_unix: int) -> int:
    """Store `p` as the next version of (persona, name); returns that version."""
    (latest,) = conn.execute("SELECT coalesce(max(version), 0) FROM profiles WHERE persona_id = ? AND name = ?",
                             (p.persona_id, p.name)).fetchone()
    version = latest + 1
    values = [getattr(p, f) for f in _PROFILE_FIELDS]
    conn.execute(
        f"INSERT INTO profiles(persona_id, name, version, {', '.join(_PROFILE_FIELDS)}, is_default, updated_unix) "
        f"VALUES (?, ?, ?, {', '.join('?' * len(_PROFILE_FIELDS))}, ?, ?)",
        (p.persona_id, p.name, version, *values, int(p.is_default), updated_unix))
    return version


def _profile(row: Sequence, tenant_id: str, default_keys: set[tuple[str, str]]) -> RankingProfile:
    persona_id, name, version = row[0], row[1], row[2]
    fields = dict(zip(_PROFILE_FIELDS, row[3:3 + len(_PROFILE_FIELDS)]))
    stored_default = bool(row[3 + len(_PROFILE_FIELDS)])
    return RankingProfile(tenant_id=tenant_id, persona_id=persona_id, name=name, version=version,
                          updated_unix=row[4 + len(_PROFILE_FIELDS)],
                          is_default=stored_default and (persona_id, name) in default_keys, **fields)


def _latest_profiles(conn: sqlite3.Connection, persona_id: str | None) -> list[Sequence]:
    where = "" if persona_id is None else "WHERE p.persona_id = ?"
    params = () if persona_id is None else (persona_id,)
    return conn.execute(
        f"""SELECT {_PROFILE_COLUMNS} FROM profiles p
            JOIN (SELECT persona_id AS pid, name AS pname, max(version) AS v FROM profiles GROUP BY persona_id, name) m
              ON m.pid = p.persona_id AND m.pname = p.name AND m.v = p.version
            {where} ORDER BY p.persona_id, p.name""", params).fetchall()


def _default_key(latest: list[Sequence]) -> tuple[str, str] | None:
    """(persona, name) of the default among one scope's latest profiles: the most recently
    stored one flagged `is_default`, else the one named "default"."""
    flagged = [r for r in latest if r[3 + len(_PROFILE_FIELDS)]]
    if flagged:
        best = max(flagged, key=lambda r: r[-1])
        return best[0], best[1]
    for r in latest:
        if r[1] == "default":
            return r[0], r[1]
    return None


def _default_keys(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    by_scope: dict[str, list[Sequence]] = {}
    for row in _latest_profiles(conn, None):
        by_scope.setdefault(row[0], []).append(row)
    return {key for rows in by_scope.values() if (key := _default_key(rows)) is not None}


def get_profile(conn: sqlite3.Connection, tenant_id: str, persona_id: str, name: str,
                version: int) -> RankingProfile | None:
    """`name` "" = the scope's default; a persona scope falls back to the tenant scope."""
    defaults = _default_keys(conn)
    scopes = [persona_id, ""] if persona_id else [""]
    for scope in scopes:
        wanted = name
        if not wanted:
            key = _default_key(_latest_profiles(conn, scope))
            if key is None:
                continue
            wanted = key[1]
        if version:
            row = conn.execute(f"SELECT {_PROFILE_COLUMNS} FROM profiles WHERE persona_id = ? AND name = ? "
                               f"AND version = ?", (scope, wanted, version)).fetchone()
        else:
            row = conn.execute(f"SELECT {_PROFILE_COLUMNS} FROM profiles WHERE persona_id = ? AND name = ? "
                               f"ORDER BY version DESC LIMIT 1", (scope, wanted)).fetchone()
        if row is not None:
            return _profile(row, tenant_id, defaults)
    return None


def list_profiles(conn: sqlite3.Connection, tenant_id: str, persona_id: str) -> list[RankingProfile]:
    """Latest version of every profile (of one persona when `persona_id` is set)."""
    defaults = _default_keys(conn)
    rows = _latest_profiles(conn, persona_id or None)
    return [_profile(r, tenant_id, defaults) for r in rows]


# -- feedback --------------------------------------------------------------------------------

def artifact_of_entry(conn: sqlite3.Connection, entry_id: str) -> str | None:
    row = conn.execute("SELECT artifact_id FROM entries WHERE entry_id = ?", (entry_id,)).fetchone()
    return row[0] if row else None


def artifact_exists(conn: sqlite3.Connection, artifact_id: str) -> bool:
    return conn.execute("SELECT 1 FROM artifacts WHERE artifact_id = ?", (artifact_id,)).fetchone() is not None


def record_feedback(conn: sqlite3.Connection, *, target: str, target_id: str, artifact_id: str, helpful: bool,
                    user_id: str, comment: str, now: int) -> tuple[int, int, float]:
    """Persist one vote and update the artifact's counters. A named user has one vote per
    artifact (the latest counts); anonymous votes always count. Returns the new counters
    and the artifact's prior."""
    if user_id:
        prev = conn.execute("SELECT id, helpful FROM feedback WHERE artifact_id = ? AND user_id = ? AND counted = 1 "
                            "ORDER BY id DESC LIMIT 1", (artifact_id, user_id)).fetchone()
        if prev is not None:
            conn.execute("UPDATE feedback SET counted = 0 WHERE id = ?", (prev[0],))
            column = "feedback_helpful" if prev[1] else "feedback_unhelpful"
            conn.execute(f"UPDATE artifacts SET {column} = {column} - 1 WHERE artifact_id = ?", (artifact_id,))
    conn.execute("INSERT INTO feedback(created_unix, target, target_id, artifact_id, helpful, user_id, comment, "
                 "counted) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
                 (now, target, target_id, artifact_id, int(helpful), user_id, comment))
    column = "feedback_helpful" if helpful else "feedback_unhelpful"
    conn.execute(f"UPDATE artifacts SET {column} = {column} + 1 WHERE artifact_id = ?", (artifact_id,))
    return conn.execute("SELECT feedback_helpful, feedback_unhelpful, reputation_prior FROM artifacts "
                        "WHERE artifact_id = ?", (artifact_id,)).fetchone()
