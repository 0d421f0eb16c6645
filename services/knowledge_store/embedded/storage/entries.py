"""Artifacts and their entries (records, vectors, keyword rows): writes, loads and reads.

Writes replace or delete whole artifacts, touching `artifacts`, `entries`, `entry_vectors`
and `entries_fts` in the caller's transaction, and return the row ids they removed and added
so the core can mirror the change in its in-memory indexes. Loads (`load_vectors`,
`keyword_rows`) are what those indexes are rebuilt from. Reads turn row ids into hits
(`Entry` + `ArtifactSummary`) or into ranking-signal rows, and count what a tenant holds.
"""
from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded.storage import rowsums
from services.knowledge_store.embedded.storage.db import json_list
from services.knowledge_store.embedded.storage.filter_sql import EFFECTIVE_TIME
from services.knowledge_store.models import StoredFields
from services.knowledge_store.preparation import EntryRow
from shared.records import ArtifactMeta, ArtifactSummary, Entry, SourceStats
from shared.text_hash import text_hash


# -- writes ----------------------------------------------------------------------------------

def _rids_of_artifacts(conn: sqlite3.Connection, artifact_ids: Sequence[str]) -> list[int]:
    return [r[0] for r in conn.execute(
        "SELECT rid FROM entries WHERE artifact_id IN (SELECT value FROM json_each(?))",
        (json_list(artifact_ids),))]


def _delete_rids(conn: sqlite3.Connection, rids: list[int]) -> None:
    if not rids:
        return
    ids = json.dumps(rids)
    conn.execute("DELETE FROM entries_fts WHERE rowid IN (SELECT value FROM json_each(?))", (ids,))
    conn.execute("DELETE FROM entry_vectors WHERE rid IN (SELECT value FROM json_each(?))", (ids,))
    conn.execute("DELETE FROM entries WHERE rid IN (SELECT value FROM json_each(?))", (ids,))


KEY_KEEP_S = 86_400            # how long an ingest's idempotency key is remembered


def remembered(conn: sqlite3.Connection, key: str) -> list[tuple[str, int, int, int]] | None:
    """The results (artifact id, written, replaced, index) of the ingest committed with `key`."""
    row = conn.execute("SELECT results FROM ingest_keys WHERE key = ?", (key,)).fetchone()
    return None if row is None else [tuple(r) for r in json.loads(row[0])]


def remember(conn: sqlite3.Connection, key: str, results: Iterable[tuple[str, int, int, int]], now: int) -> None:
    """Record `key` with its ingest's results in the ingest's transaction; forget day-old keys."""
    conn.execute("DELETE FROM ingest_keys WHERE created_unix < ?", (now - KEY_KEEP_S,))
    conn.execute("INSERT INTO ingest_keys (key, results, created_unix) VALUES (?, ?, ?)",
                 (key, json.dumps([list(r) for r in results]), now))


def replace_artifact(conn: sqlite3.Connection, meta: ArtifactMeta, persona_id: str, indexed_unix: int,
                     rows: Sequence[EntryRow], vectors: NDArray[np.float32],
                     title_vector: NDArray[np.float32] | None = None) -> tuple[list[int], list[int]]:
    """Upsert one artifact and replace all its entries and its title vector (None: it has
    none, an empty title). Returns (removed rids, new rids).

    Feedback counters of an existing artifact are kept (they are about the artifact).
    """
    old = _rids_of_artifacts(conn, [meta.artifact_id])
    _delete_rids(conn, old)
    conn.execute("DELETE FROM title_vectors WHERE artifact_id = ?", (meta.artifact_id,))
    if title_vector is not None:
        conn.execute("INSERT INTO title_vectors(artifact_id, vector) VALUES (?, ?)",
                     (meta.artifact_id, np.ascontiguousarray(title_vector, dtype=np.float32).tobytes()))
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
         json_list(meta.owners), json_list(meta.tags), float(meta.reputation_prior),
         json_list(meta.visibility_groups), persona_id, indexed_unix))
    rowsums.set_artifact_sum(conn, meta.artifact_id)
    new: list[int] = []
    blobs = [np.ascontiguousarray(v, dtype=np.float32).tobytes() for v in vectors]
    for row, blob in zip(rows, blobs, strict=True):
        fields = (f"{meta.artifact_id}#{row.chunk_index}", meta.artifact_id, persona_id, row.chunk_index,
                  row.timestamp_unix, row.richness, row.headline, row.content_summary, row.text)
        (rid,) = conn.execute(
            """INSERT INTO entries(entry_id, artifact_id, persona_id, chunk_index, timestamp_unix,
                   richness, headline, content_summary, text, checksum, text_hash, span_start, span_end)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING rid""",
            (*fields, rowsums.entry_sum(*fields, blob), row.text_hash or text_hash(row.text),
             *((row.span_start, row.span_end) if row.span_end else (None, None)))).fetchone()
        new.append(rid)
    conn.executemany("INSERT INTO entry_vectors(rid, vector) VALUES (?, ?)", zip(new, blobs))
    conn.executemany("INSERT INTO entries_fts(rowid, title, body) VALUES (?, ?, ?)",
                     ((rid, row.fts_title, row.fts_body) for rid, row in zip(new, rows)))
    return old, new


def delete_artifacts(conn: sqlite3.Connection, artifact_ids: Sequence[str]) -> tuple[int, list[int]]:
    """Delete artifacts, their entries, vectors, keyword rows, feedback and votes.
    Returns (artifacts deleted, removed rids)."""
    rids = _rids_of_artifacts(conn, artifact_ids)
    _delete_rids(conn, rids)
    ids = json_list(artifact_ids)
    conn.execute("DELETE FROM feedback WHERE artifact_id IN (SELECT value FROM json_each(?))", (ids,))
    conn.execute("DELETE FROM votes WHERE artifact_id IN (SELECT value FROM json_each(?))", (ids,))
    conn.execute("DELETE FROM title_vectors WHERE artifact_id IN (SELECT value FROM json_each(?))", (ids,))
    cur = conn.execute("DELETE FROM artifacts WHERE artifact_id IN (SELECT value FROM json_each(?))", (ids,))
    return cur.rowcount, rids


def load_vectors(conn: sqlite3.Connection, dimension: int) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """Every well-formed (rid, vector) of the tenant, in rid order. A blob of the wrong size is
    left out (the consistency check counts it as malformed and re-embeds its entry)."""
    ids: list[int] = []
    blobs: list[bytes] = []
    size = dimension * 4
    for rid, blob in conn.execute("SELECT rid, vector FROM entry_vectors ORDER BY rid"):
        if isinstance(blob, bytes) and len(blob) == size:
            ids.append(rid)
            blobs.append(blob)
    vectors = np.frombuffer(b"".join(blobs), dtype=np.float32)
    return np.asarray(ids, dtype=np.int64), vectors.reshape(len(ids), dimension).copy()


def vectors_by_entry_id(conn: sqlite3.Connection, entry_ids: Sequence[str],
                        dimension: int) -> dict[str, NDArray[np.float32]]:
    """The stored vectors of these entries (the system of record); a blob of the wrong size is
    left out."""
    rows = conn.execute("SELECT e.entry_id, v.vector FROM entries e JOIN entry_vectors v ON v.rid = e.rid "
                        "WHERE e.entry_id IN (SELECT value FROM json_each(?))", (json_list(entry_ids),))
    return {eid: np.frombuffer(blob, dtype=np.float32).copy() for eid, blob in rows
            if isinstance(blob, bytes) and len(blob) == dimension * 4}


def terms_by_entry_id(conn: sqlite3.Connection, entry_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The analysed (title terms, body terms) the keyword index holds for these entries."""
    rows = conn.execute("SELECT e.entry_id, f.title, f.body FROM entries e JOIN entries_fts f ON f.rowid = e.rid "
                        "WHERE e.entry_id IN (SELECT value FROM json_each(?))", (json_list(entry_ids),))
    return {eid: (title or "", body or "") for eid, title, body in rows}


def title_vectors(conn: sqlite3.Connection, artifact_ids: Sequence[str],
                  dimension: int) -> dict[str, NDArray[np.float32]]:
    """The stored unit title vectors of these artifacts (none: an empty title, or stored before
    schema 6 and not yet backfilled); a blob of the wrong size is left out."""
    try:
        rows = conn.execute("SELECT artifact_id, vector FROM title_vectors "
                            "WHERE artifact_id IN (SELECT value FROM json_each(?))", (json_list(artifact_ids),))
    except sqlite3.OperationalError as err:     # an older database served read-only (not migrated)
        if "no such table" in str(err):
            return {}
        raise
    return {a: np.frombuffer(blob, dtype=np.float32).copy() for a, blob in rows
            if isinstance(blob, bytes) and len(blob) == dimension * 4}


def stored_fields(conn: sqlite3.Connection, entry_ids: Sequence[str],
                  title_vectors: Callable[[list[str]], dict[str, NDArray[np.float32]]]) -> dict[str, StoredFields]:
    """GetFieldSignals' read of these entries in one query — artifact, chunk index, visibility
    groups, analysed (title, body) terms — and their artifacts' title vectors from
    `title_vectors(artifact ids)` (the tenant's in-memory matrix, or `title_vectors` above)."""
    rows = conn.execute(
        "SELECT e.entry_id, e.artifact_id, e.chunk_index, a.visibility_groups, f.title, f.body "
        "FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id JOIN entries_fts f ON f.rowid = e.rid "
        "WHERE e.entry_id IN (SELECT value FROM json_each(?))", (json_list(entry_ids),)).fetchall()
    titles = title_vectors(list({row[1] for row in rows})) if rows else {}
    return {eid: StoredFields(aid, int(chunk), _json_tuple(groups), title or "", body or "", titles.get(aid))
            for eid, aid, chunk, groups, title, body in rows}


def lacking_title_vectors(conn: sqlite3.Connection, limit: int) -> list[tuple[str, str]]:
    """(artifact id, title) of up to `limit` artifacts with a title and no title vector."""
    return [(a, t) for a, t in conn.execute(
        "SELECT a.artifact_id, a.title FROM artifacts a WHERE trim(a.title) != '' AND NOT EXISTS "
        "(SELECT 1 FROM title_vectors v WHERE v.artifact_id = a.artifact_id) ORDER BY a.artifact_id LIMIT ?",
        (int(limit),))]


def put_title_vectors(conn: sqlite3.Connection, rows: Sequence[tuple[str, str, NDArray[np.float32]]]) -> int:
    """Store (artifact id, title, unit vector) where the artifact still has that title and no
    title vector (a re-ingest in between wrote its own): the backfill's write. Returns how many."""
    stored = 0
    for artifact_id, title, vector in rows:
        stored += conn.execute(
            "INSERT OR IGNORE INTO title_vectors(artifact_id, vector) SELECT artifact_id, ? FROM artifacts "
            "WHERE artifact_id = ? AND title = ?",
            (np.ascontiguousarray(vector, dtype=np.float32).tobytes(), artifact_id, title)).rowcount
    return stored


def keyword_rows(conn: sqlite3.Connection) -> Iterator[tuple[int, str, str]]:
    """Every (rid, analysed title terms, analysed body terms) of entries_fts, in rid order."""
    yield from conn.execute("SELECT rowid, title, body FROM entries_fts ORDER BY rowid")


# -- reads -----------------------------------------------------------------------------------

_HIT_COLUMNS = """e.rid, e.entry_id, e.persona_id, e.artifact_id, e.chunk_index, e.text, e.headline,
    e.content_summary, e.timestamp_unix, e.richness,
    a.title, a.source_type, a.source_id, a.source_uri, a.file_name, a.file_type, a.created_unix,
    a.modified_unix, a.owners, a.tags, a.reputation_prior, a.visibility_groups,
    a.feedback_helpful, a.feedback_unhelpful,
    a.persona_id, a.indexed_unix, v.vector, {sums}, {text_hash}, {spans}"""
_HIT_FROM = ("FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id "
             "LEFT JOIN entry_vectors v ON v.rid = e.rid")


def _hit_select(conn: sqlite3.Connection) -> str:
    """The hit columns, with both rows' checksums (NULLs for a schema-2 database served read-only)
    and the entry's text hash (NULL before schema 8: computed from the text, `_rows_to_records`)
    and span (NULLs before schema 9: unknown)."""
    sums = "e.checksum, a.checksum" if getattr(conn, "has_checksums", True) else "NULL, NULL"
    hashed = "e.text_hash" if getattr(conn, "has_text_hash", True) else "NULL"
    spans = "e.span_start, e.span_end" if getattr(conn, "has_spans", True) else "NULL, NULL"
    return f"SELECT {_HIT_COLUMNS.format(sums=sums, text_hash=hashed, spans=spans)} {_HIT_FROM}"


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


def _verified(conn: sqlite3.Connection, rows: Iterable[Sequence]) -> list[Sequence]:
    """The rows whose entry and artifact match their checksums (rowsums.py); the others are
    left out and told to the connection's tenant (`row_faults`, db.py)."""
    known = getattr(conn, "known_corrupt", frozenset())
    kept: list[Sequence] = []
    bad_rids: list[int] = []
    bad_artifacts: set[str] = set()
    artifact_ok: dict[str, bool] = {}
    for row in rows:
        if row[0] in known:
            continue
        ok = artifact_ok.get(row[3])
        if ok is None:
            ok = artifact_ok[row[3]] = rowsums._safe(lambda: rowsums.artifact_ok(
                (row[3], *row[10:18], row[18], row[19], row[20], row[21], row[24], row[25]), row[28]))
            if not ok:
                bad_artifacts.add(row[3])
        if not ok:
            continue
        if not rowsums._safe(lambda: rowsums.entry_ok((row[1], row[3], row[2], row[4], row[8], row[9], row[6],
                                                        row[7], row[5], row[26]), row[27])):
            bad_rids.append(row[0])
            continue
        kept.append(row)
    if (bad_rids or bad_artifacts) and getattr(conn, "row_faults", None) is not None:
        conn.row_faults(bad_rids, bad_artifacts)
    return kept


def _rows_to_records(rows: Iterable[Sequence], tenant_id: str) -> dict[int, tuple[Entry, ArtifactSummary]]:
    out: dict[int, tuple[Entry, ArtifactSummary]] = {}
    artifacts: dict[str, ArtifactSummary] = {}
    for row in rows:
        summary = artifacts.get(row[3])
        if summary is None:
            summary = artifacts[row[3]] = _artifact_summary(row)
        entry = Entry(id=row[1], tenant_id=tenant_id, persona_id=row[2], artifact_id=row[3],
                      chunk_index=row[4], text=row[5], headline=row[6], content_summary=row[7],
                      timestamp_unix=row[8], richness=row[9], text_hash=row[29] or text_hash(row[5] or ""),
                      span_start=row[30] or 0, span_end=row[31] or 0)
        out[row[0]] = (entry, summary)
    return out


def records_by_rid(conn: sqlite3.Connection, rids: Iterable[int],
                   tenant_id: str) -> dict[int, tuple[Entry, ArtifactSummary]]:
    ids = json.dumps(sorted({int(r) for r in rids}))
    rows = conn.execute(f"{_hit_select(conn)} WHERE e.rid IN (SELECT value FROM json_each(?))", (ids,))
    return _rows_to_records(_verified(conn, rows), tenant_id)


_CANDIDATE_COLUMNS = (f"e.rid, e.entry_id, e.artifact_id, {EFFECTIVE_TIME}, e.richness, a.reputation_prior, "
                      "a.feedback_helpful, a.feedback_unhelpful")


def candidate_rows(conn: sqlite3.Connection, rids: Iterable[int]) -> dict[int, tuple]:
    """rid → (entry_id, artifact_id, effective time, richness, reputation prior, helpful,
    unhelpful): the ranking signals only, no text (see `CandidateColumns`)."""
    ids = json.dumps(sorted({int(r) for r in rids}))
    rows = conn.execute(
        f"SELECT {_CANDIDATE_COLUMNS} FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id "
        f"WHERE e.rid IN (SELECT value FROM json_each(?))", (ids,))
    known = getattr(conn, "known_corrupt", frozenset())      # rows found corrupt are never candidates
    return {row[0]: row[1:] for row in rows if row[0] not in known}


def records_by_entry_id(conn: sqlite3.Connection, entry_ids: Sequence[str],
                        tenant_id: str) -> dict[str, tuple[Entry, ArtifactSummary]]:
    rows = conn.execute(f"{_hit_select(conn)} WHERE e.entry_id IN (SELECT value FROM json_each(?))",
                        (json_list(entry_ids),))
    return {entry.id: (entry, art) for entry, art in _rows_to_records(_verified(conn, rows), tenant_id).values()}


# -- counts and stats ------------------------------------------------------------------------

def counts(conn: sqlite3.Connection) -> dict[str, int]:
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    return {
        "artifacts": one("SELECT count(*) FROM artifacts"),
        "records": one("SELECT count(*) FROM entries"),
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
