"""Ranking profiles and feedback votes: what a tenant stores for the ranker besides documents.

Profiles are versioned: every store of (persona, name) appends the next version, and reads
see the latest unless a version is asked for. Each scope (the tenant, "", or one persona)
has at most one default profile. Feedback: `votes` holds each user's one current vote per
artifact (primary key (artifact, user): a second vote replaces the first), `feedback` every
vote ever cast (with its comment), and the helpful/unhelpful counters on the artifact row (what
the ranker reads with the candidates) count the current votes.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ranking.profile import RankingProfile

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

