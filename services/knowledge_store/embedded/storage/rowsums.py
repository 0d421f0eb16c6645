"""Row checksums: every entry and artifact row carries a checksum of what it holds, so a byte the
disk changed is found on read and by the scrub (../scrub.py), not served.

    entries.checksum     CRC-32 of the entry's fields (ids, persona, chunk index, time,
                         richness, headline, summary, text) and its vector blob
    artifacts.checksum   CRC-32 of the artifact's metadata (title, source, file, times,
                         owners, tags, reputation prior, visibility groups, persona, indexed
                         time); the feedback counters are left out (votes change them)

A missing vector row is not checked here (the consistency check finds and repairs it, and the
repair gives the entry its checksum again). Both columns came with schema version 3
(`add_columns`, a migration run on open): rows written before have NULL there and are
"unverified" until `backfill` (run by the scrub through the tenant's writer) gives them one.
Writes compute the checksum in Python (`entry_sum`, `artifact_sum`) and store it in the row's
own transaction.

A row whose checksum does not match is *corrupt*: reads leave it out of their answers and tell
the connection's `row_faults` (db.py: the tenant's set of corrupt rids, reported to the
store's health); `scan` walks a tenant's entries by rid for the scrub.
"""
from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

UNVERIFIED = None


def _digest(parts: Sequence[object], blob: bytes = b"") -> int:
    """CRC-32 of the fields (str as is, float by repr, others by str; joined by U+001F; text a
    disk changed into invalid UTF-8 encodes differently rather than failing) and of `blob`: cheap
    enough to check every hit a search returns (a few microseconds per row), and what the saved
    index files use too."""
    crc = zlib.crc32("\x1f".join([p if isinstance(p, str) else repr(p) if isinstance(p, float) else str(p)
                                  for p in parts]).encode("utf-8", "surrogatepass"))
    return zlib.crc32(blob, crc) if blob else crc


def entry_sum(entry_id: str, artifact_id: str, persona_id: str, chunk_index: int, timestamp_unix: int,
              richness: float, headline: str, content_summary: str, text: str, vector: bytes | None) -> int:
    """The checksum of one entry row and its vector blob."""
    return _digest((entry_id, artifact_id, persona_id, int(chunk_index), int(timestamp_unix), float(richness),
                    headline, content_summary, text), vector if isinstance(vector, bytes) else b"")


ARTIFACT_FIELDS = ("artifact_id", "title", "source_type", "source_id", "source_uri", "file_name", "file_type",
                   "created_unix", "modified_unix", "owners", "tags", "reputation_prior", "visibility_groups",
                   "persona_id", "indexed_unix")


def artifact_sum(values: Sequence[object]) -> int:
    """The checksum of an artifact row's ARTIFACT_FIELDS values, in that order (as stored)."""
    return _digest([float(v) if i == 11 else v for i, v in enumerate(values)])


# -- schema 3 --------------------------------------------------------------------------------

def add_columns(conn: sqlite3.Connection) -> None:
    """Schema 2 -> 3: the checksum columns, NULL (unverified) until `backfill` fills them."""
    for table in ("entries", "artifacts"):
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if "checksum" not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN checksum INTEGER")


def has_columns(conn: sqlite3.Connection) -> bool:
    return "checksum" in {r[1] for r in conn.execute("PRAGMA table_info(entries)")}


# -- writes ----------------------------------------------------------------------------------

_ENTRY_SQL = ("SELECT e.rid, e.entry_id, e.artifact_id, e.persona_id, e.chunk_index, e.timestamp_unix, e.richness, "
              "e.headline, e.content_summary, e.text, v.vector, e.checksum FROM entries e "
              "LEFT JOIN entry_vectors v ON v.rid = e.rid")
_ARTIFACT_SQL = f"SELECT {', '.join(ARTIFACT_FIELDS)}, checksum FROM artifacts"


def _entry_row_sum(row: Sequence) -> int:
    return entry_sum(*row[1:11])


def refresh_entries(conn: sqlite3.Connection, rids: Iterable[int]) -> int:
    """Recompute the checksums of these entries from what they hold now (after a repair wrote
    their vectors: the stored text is the truth the vector was derived from)."""
    ids = json.dumps(sorted({int(r) for r in rids}))
    rows = conn.execute(f"{_ENTRY_SQL} WHERE e.rid IN (SELECT value FROM json_each(?))", (ids,)).fetchall()
    conn.executemany("UPDATE entries SET checksum = ? WHERE rid = ?", ((_entry_row_sum(r), r[0]) for r in rows))
    return len(rows)


def set_artifact_sum(conn: sqlite3.Connection, artifact_id: str) -> None:
    row = conn.execute(f"{_ARTIFACT_SQL} WHERE artifact_id = ?", (artifact_id,)).fetchone()
    if row is not None:
        conn.execute("UPDATE artifacts SET checksum = ? WHERE artifact_id = ?", (artifact_sum(row[:-1]), artifact_id))


def backfill(conn: sqlite3.Connection, limit: int) -> int:
    """Give up to `limit` unverified entries (and all unverified artifacts, when the entries are
    done) their checksums, in the caller's write transaction. Returns rows filled."""
    rows = conn.execute(f"{_ENTRY_SQL} WHERE e.checksum IS NULL ORDER BY e.rid LIMIT ?", (limit,)).fetchall()
    conn.executemany("UPDATE entries SET checksum = ? WHERE rid = ?", ((_entry_row_sum(r), r[0]) for r in rows))
    filled = len(rows)
    if filled < limit:
        arts = conn.execute(f"{_ARTIFACT_SQL} WHERE checksum IS NULL LIMIT ?", (limit - filled,)).fetchall()
        conn.executemany("UPDATE artifacts SET checksum = ? WHERE artifact_id = ?",
                         ((artifact_sum(a[:-1]), a[0]) for a in arts))
        filled += len(arts)
    return filled


def unverified(conn: sqlite3.Connection) -> int:
    """Rows without a checksum yet (entries and artifacts)."""
    if not has_columns(conn):
        return conn.execute("SELECT (SELECT count(*) FROM entries) + (SELECT count(*) FROM artifacts)").fetchone()[0]
    return conn.execute("SELECT (SELECT count(*) FROM entries WHERE checksum IS NULL) + "
                        "(SELECT count(*) FROM artifacts WHERE checksum IS NULL)").fetchone()[0]


# -- checks ----------------------------------------------------------------------------------

def entry_ok(row: Sequence, checksum: int | None) -> bool:
    """Whether an entry (the `entry_sum` arguments, in order) matches its stored checksum;
    an unverified row (NULL) passes, and so does an entry whose vector row is missing (a
    missing derived row is the consistency check's to find and repair, consistency.py)."""
    return checksum is None or row[9] is None or entry_sum(*row) == checksum


def artifact_ok(values: Sequence[object], checksum: int | None) -> bool:
    return checksum is None or artifact_sum(values) == checksum


@dataclass
class Scanned:
    """What one step of a scan found."""
    last_rid: int = 0                # the walk continues after this rid
    rows: int = 0
    bytes: int = 0                   # text + vector bytes read (what the scrub's rate counts)
    corrupt: list[int] = field(default_factory=list)
    corrupt_artifacts: list[str] = field(default_factory=list)
    unverified: int = 0
    done: bool = False


def scan(conn: sqlite3.Connection, after_rid: int, limit: int) -> Scanned:
    """Check the next `limit` entries after `after_rid` (and, with them, their artifacts'
    rows) against their checksums."""
    out = Scanned(last_rid=after_rid)
    rows = conn.execute(f"{_ENTRY_SQL} WHERE e.rid > ? ORDER BY e.rid LIMIT ?", (after_rid, limit)).fetchall()
    artifacts: set[str] = set()
    for row in rows:
        out.rows += 1
        out.last_rid = row[0]
        out.bytes += len(row[9] or "") + len(row[10] or b"")
        artifacts.add(row[2])
        if row[11] is None:
            out.unverified += 1
        elif not _safe_entry_ok(row):
            out.corrupt.append(row[0])
    if artifacts:
        for a in conn.execute(f"{_ARTIFACT_SQL} WHERE artifact_id IN (SELECT value FROM json_each(?))",
                              (json.dumps(sorted(artifacts)),)):
            if a[-1] is not None and not _safe(lambda: artifact_ok(a[:-1], a[-1])):
                out.corrupt_artifacts.append(a[0])
    out.done = len(rows) < limit
    return out


def _safe(check) -> bool:
    try:
        return check()
    except (TypeError, ValueError, UnicodeError):      # a value of the wrong type is corruption too
        return False


def _safe_entry_ok(row: Sequence) -> bool:
    return _safe(lambda: entry_ok(row[1:11], row[11]))
