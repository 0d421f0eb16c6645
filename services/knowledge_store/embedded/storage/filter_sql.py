"""Search filters as SQL: the condition a `SearchFilters` value puts on entries and artifacts.

`filter_clause` is the one translation (over `e` = entries and `a` = artifacts); the searches
use it through `allowed_rids` (the row ids a filter allows, cached per tenant by
allowed_cache.py) and `listing` (a metadata-only listing, newest first). `all_rids` and
`entry_count` describe the unfiltered set. No condition reads the clock: date bounds are
absolute unix times, so a result only changes when the tenant's rows do.
"""
from __future__ import annotations

import sqlite3

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded.storage.db import json_list
from shared.records import SearchFilters


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
            params.append(json_list(values))
    if f.exclude_source_ids:
        parts.append("a.source_id NOT IN (SELECT value FROM json_each(?))")
        params.append(json_list(f.exclude_source_ids))
    for column, values in (("a.tags", f.tags), ("a.owners", f.owners)):
        if values:
            parts.append(_any_of(column))
            params.append(json_list(values))
    if f.persona_id:
        parts.append("e.persona_id = ?")
        params.append(f.persona_id)
    if f.enforce_visibility:
        parts.append(f"(a.visibility_groups = '[]' OR {_any_of('a.visibility_groups')})")
        params.append(json_list(f.visibility_groups))
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


def listing(conn: sqlite3.Connection, f: SearchFilters, k: int) -> list[int]:
    """Entries matching `f`, newest first (then most recently indexed, then document order)."""
    where, params = filter_clause(f)
    sql = (f"SELECT e.rid FROM entries e JOIN artifacts a ON a.artifact_id = e.artifact_id WHERE {where} "
           f"ORDER BY {EFFECTIVE_TIME} DESC, a.indexed_unix DESC, e.artifact_id, e.chunk_index LIMIT ?")
    return [r[0] for r in conn.execute(sql, (*params, k))]
