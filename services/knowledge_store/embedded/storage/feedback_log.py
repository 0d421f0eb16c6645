"""The search log, the votes that named a search, and votes on federated sources (SQL).

The rules (bounds, who may vote under a search id) are the front's: ../../search_log.py.
Tables (db.py): `searches` (rowid order = write order), `search_votes`, `source_votes`.
"""
from __future__ import annotations

import json
import sqlite3

from shared.records import SearchLogItem, SearchLogRecord, SourceVotes


def insert_search(conn: sqlite3.Connection, r: SearchLogRecord, *, keep: int, oldest_unix: int,
                  prune: bool) -> None:
    """Log `r`; with `prune`, forget searches beyond the newest `keep` or older than
    `oldest_unix`, and the votes that named them."""
    items = json.dumps([[i.entry_id, i.artifact_id, i.rank] for i in r.items], ensure_ascii=False)
    conn.execute("INSERT OR REPLACE INTO searches(search_id, user_id, created_unix, query_sha256, items) "
                 "VALUES (?, ?, ?, ?, ?)", (r.search_id, r.user_id, r.created_unix, r.query_sha256, items))
    if prune:
        conn.execute("DELETE FROM searches WHERE created_unix < ? OR rowid <= "
                     "(SELECT max(rowid) FROM searches) - ?", (oldest_unix, keep))
        conn.execute("DELETE FROM search_votes WHERE search_id NOT IN (SELECT search_id FROM searches)")


def get_search(conn: sqlite3.Connection, tenant_id: str, search_id: str) -> SearchLogRecord | None:
    row = conn.execute("SELECT user_id, created_unix, query_sha256, items FROM searches WHERE search_id = ?",
                       (search_id,)).fetchone()
    if row is None:
        return None
    items = tuple(SearchLogItem(str(e), str(a), int(k)) for e, a, k in json.loads(row[3]))
    return SearchLogRecord(tenant_id, search_id, row[0], int(row[1]), row[2], items)


def note_search_vote(conn: sqlite3.Connection, search_id: str, target_id: str, user_id: str, helpful: bool,
                     now: int) -> None:
    """Keep the vote with its search (the label of a ranked result, for learning later)."""
    conn.execute("INSERT OR REPLACE INTO search_votes(search_id, target_id, user_id, helpful, created_unix) "
                 "VALUES (?, ?, ?, ?, ?)", (search_id, target_id, user_id, int(helpful), now))


def record_source_vote(conn: sqlite3.Connection, source_id: str, target_id: str, user_id: str, helpful: bool,
                       now: int) -> SourceVotes:
    """`user_id`'s one current vote on `source_id` (a second replaces the first); its new counts."""
    conn.execute("INSERT INTO source_votes(source_id, user_id, helpful, target_id, updated_unix) "
                 "VALUES (?, ?, ?, ?, ?) ON CONFLICT(source_id, user_id) DO UPDATE SET "
                 "helpful = excluded.helpful, target_id = excluded.target_id, updated_unix = excluded.updated_unix",
                 (source_id, user_id, int(helpful), target_id, now))
    return source_counts(conn, source_id)


def source_counts(conn: sqlite3.Connection, source_id: str) -> SourceVotes:
    good, bad = conn.execute("SELECT coalesce(sum(helpful), 0), coalesce(sum(1 - helpful), 0) FROM source_votes "
                             "WHERE source_id = ?", (source_id,)).fetchone()
    return SourceVotes(source_id, int(good), int(bad))


def all_source_votes(conn: sqlite3.Connection) -> list[SourceVotes]:
    rows = conn.execute("SELECT source_id, sum(helpful), sum(1 - helpful) FROM source_votes "
                        "GROUP BY source_id ORDER BY source_id").fetchall()
    return [SourceVotes(s, int(g), int(b)) for s, g, b in rows]
