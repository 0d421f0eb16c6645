"""Ranking profiles and feedback votes: what a tenant stores for the ranker besides documents.

Profiles are versioned: every store of (persona, name) appends the next version, and reads
see the latest unless a version is asked for. Each scope (the tenant, "", or one persona)
has at most one default profile: those rules are the front's (profiles.py), applied to the
rows read here. Feedback: `votes` holds each user's one current vote per artifact (primary
key (artifact, user): a second vote replaces the first), `feedback` every vote ever cast
(with its comment), and the helpful/unhelpful counters on the artifact row (what the ranker
reads with the candidates) count the current votes.
"""
from __future__ import annotations

import sqlite3

from ranking.profile import RankingProfile
from services.knowledge_store import profiles
from services.knowledge_store.profiles import PROFILE_FIELDS

# -- ranking profiles ------------------------------------------------------------------------
# The rows as profiles.py lays them out; the version and default rules are profiles.py's.

def profile_rows(conn: sqlite3.Connection) -> list[tuple]:
    """Every stored profile row of the tenant (every version); a table not migrated yet (served
    read-only) reads the re-rank fields as their defaults."""
    columns = profiles.select_columns(r[1] for r in conn.execute("PRAGMA table_info(profiles)"))
    return conn.execute(f"SELECT {columns} FROM profiles ORDER BY seq").fetchall()


def add_rerank_columns(conn: sqlite3.Connection) -> None:
    """Schema 3 -> 4: a profile's re-rank fields, with the defaults every older profile keeps
    (no re-ranker: re-ranking stays off)."""
    _add_columns(conn, ("reranker", "rerank_top_n", "rerank_weight"))


def add_model_columns(conn: sqlite3.Connection) -> None:
    """Schema 4 -> 5: a profile's learned-ranking fields, with the defaults every older profile
    keeps (no model, no feedback expansion); the `ranking_models` table is made by the schema."""
    _add_columns(conn, ("model_sha256", "feature_version", "feedback_expansion"))


def add_fold_column(conn: sqlite3.Connection) -> None:
    """Schema 7 -> 8: a profile's `fold_duplicates`, off for every older profile."""
    _add_columns(conn, ("fold_duplicates",))


def _add_columns(conn: sqlite3.Connection, names: tuple[str, ...]) -> None:
    have = {r[1] for r in conn.execute("PRAGMA table_info(profiles)")}
    for name in names:
        if name not in have:
            conn.execute(f"ALTER TABLE profiles ADD COLUMN {name} {profiles.ADDED_TYPES[name]} NOT NULL "
                         f"DEFAULT {profiles.sql_literal(profiles.ADDED_FIELDS[name])}")


def insert_profile(conn: sqlite3.Connection, p: RankingProfile, updated_unix: int, *, tuned: bool = False) -> int:
    """Store `p` as the next version of (persona, name); returns that version. Not `tuned` (put_ranking_profile):
    the version keeps the model fields of the one before (profiles.keep_model)."""
    if not tuned:
        p = profiles.keep_model(profile_rows(conn), p)
    version = profiles.next_version(conn.execute("SELECT persona_id, name, version FROM profiles WHERE "
                                                 "persona_id = ? AND name = ?", (p.persona_id, p.name)),
                                    p.persona_id, p.name)
    values = [getattr(p, f) for f in PROFILE_FIELDS]
    conn.execute(
        f"INSERT INTO profiles(persona_id, name, version, {', '.join(PROFILE_FIELDS)}, is_default, updated_unix) "
        f"VALUES (?, ?, ?, {', '.join('?' * len(PROFILE_FIELDS))}, ?, ?)",
        (p.persona_id, p.name, version, *values, int(p.is_default), updated_unix))
    return version


def get_profile(conn: sqlite3.Connection, tenant_id: str, persona_id: str, name: str,
                version: int) -> RankingProfile | None:
    """`name` "" = the scope's default; a persona scope falls back to the tenant scope."""
    return profiles.get_profile(profile_rows(conn), tenant_id, persona_id, name, version)


def list_profiles(conn: sqlite3.Connection, tenant_id: str, persona_id: str) -> list[RankingProfile]:
    """Latest version of every profile (of one persona when `persona_id` is set)."""
    return profiles.list_profiles(profile_rows(conn), tenant_id, persona_id)


def put_model(conn: sqlite3.Connection, sha256: str, feature_version: int, raw: bytes, now: int) -> bool:
    """Store a checked model once by its hash; True when it was not stored before."""
    cur = conn.execute("INSERT OR IGNORE INTO ranking_models(sha256, feature_version, model, created_unix) "
                       "VALUES (?, ?, ?, ?)", (sha256, feature_version, bytes(raw), now))
    return cur.rowcount == 1


def get_model(conn: sqlite3.Connection, sha256: str) -> bytes | None:
    try:
        row = conn.execute("SELECT model FROM ranking_models WHERE sha256 = ?", (sha256,)).fetchone()
    except sqlite3.OperationalError:          # a database served read-only, not migrated: no models
        return None
    return bytes(row[0]) if row else None


# -- feedback --------------------------------------------------------------------------------

def artifact_of_entry(conn: sqlite3.Connection, entry_id: str) -> str | None:
    row = conn.execute("SELECT artifact_id FROM entries WHERE entry_id = ?", (entry_id,)).fetchone()
    return row[0] if row else None


def artifact_exists(conn: sqlite3.Connection, artifact_id: str) -> bool:
    return conn.execute("SELECT 1 FROM artifacts WHERE artifact_id = ?", (artifact_id,)).fetchone() is not None


def record_feedback(conn: sqlite3.Connection, *, target: str, target_id: str, artifact_id: str, helpful: bool,
                    user_id: str, comment: str, now: int) -> tuple[int, int, float]:
    """Persist `user_id`'s vote on the artifact, replacing their earlier one (the counters move
    from the old answer to the new one, never grow twice), and log it. Returns the new
    counters and the artifact's prior."""
    prev = conn.execute("SELECT helpful FROM votes WHERE artifact_id = ? AND user_id = ?",
                        (artifact_id, user_id)).fetchone()
    if prev is not None:
        _count(conn, artifact_id, bool(prev[0]), -1)
    conn.execute("INSERT INTO votes(artifact_id, user_id, helpful, target, target_id, updated_unix) "
                 "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(artifact_id, user_id) DO UPDATE SET "
                 "helpful = excluded.helpful, target = excluded.target, target_id = excluded.target_id, "
                 "updated_unix = excluded.updated_unix",
                 (artifact_id, user_id, int(helpful), target, target_id, now))
    _count(conn, artifact_id, helpful, +1)
    conn.execute("UPDATE feedback SET counted = 0 WHERE artifact_id = ? AND user_id = ? AND counted = 1",
                 (artifact_id, user_id))
    conn.execute("INSERT INTO feedback(created_unix, target, target_id, artifact_id, helpful, user_id, comment, "
                 "counted) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
                 (now, target, target_id, artifact_id, int(helpful), user_id, comment))
    return conn.execute("SELECT feedback_helpful, feedback_unhelpful, reputation_prior FROM artifacts "
                        "WHERE artifact_id = ?", (artifact_id,)).fetchone()


def _count(conn: sqlite3.Connection, artifact_id: str, helpful: bool, delta: int) -> None:
    column = "feedback_helpful" if helpful else "feedback_unhelpful"
    conn.execute(f"UPDATE artifacts SET {column} = max(0, {column} + ?) WHERE artifact_id = ?", (delta, artifact_id))


def keep_one_vote_per_user(conn: sqlite3.Connection) -> None:
    """Schema 1 -> 2: fill `votes` with each named user's counted vote from the feedback log (the
    latest one per artifact); the artifact counters stay as they were (earlier anonymous votes
    keep counting, new votes need a user)."""
    conn.execute("""INSERT OR REPLACE INTO votes(artifact_id, user_id, helpful, target, target_id, updated_unix)
                    SELECT artifact_id, user_id, helpful, target, target_id, created_unix FROM feedback
                    WHERE counted = 1 AND user_id <> '' ORDER BY id""")

