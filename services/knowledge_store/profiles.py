"""Ranking profiles' version and default rules on plain rows, the same for every backend.

A stored profile is one row per (persona, name, version):

    (persona_id, name, version, *PROFILE_FIELDS, is_default, updated_unix, seq)

`seq` orders the stores (the later store is the larger). A row stored before the re-rank or
the learned-ranking fields existed (`ADDED_FIELDS`: a qdrant point written then, or a SQLite
table not yet migrated) reads with their defaults: `upgrade_row`, `select_columns`. Every
store of (persona, name) appends the next version (`next_version`); reads see the latest
unless a version is asked for. A store through put_ranking_profile keeps the model fields of
the version before (`keep_model`). Each scope (the tenant, "", or one persona) has at most
one default: among the scope's latest profiles the most recently stored one flagged
`is_default`, else the one named "default". A persona without its own profile of a name falls back to the tenant's.

Each backend keeps the rows its own way (the embedded backend in SQLite,
embedded/storage/ranking_inputs.py; the qdrant backend as points, qdrant/store.py) and
answers reads with `get_profile` / `list_profiles` over the tenant's rows.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ranking.profile import DEFAULT_RERANK_TOP_N, DEFAULT_RERANK_WEIGHT, MODEL_FIELDS, RankingProfile

#: Fields added to the stored row since its first layout, in order, with the value an older row reads as.
ADDED_FIELDS = {"reranker": "", "rerank_top_n": DEFAULT_RERANK_TOP_N, "rerank_weight": DEFAULT_RERANK_WEIGHT,
                "model_sha256": "", "feature_version": 0, "feedback_expansion": "", "fold_duplicates": False}
#: SQLite column types of `ADDED_FIELDS` (the embedded backend's migrations add them).
ADDED_TYPES = {"reranker": "TEXT", "rerank_top_n": "INTEGER", "rerank_weight": "REAL",
               "model_sha256": "TEXT", "feature_version": "INTEGER", "feedback_expansion": "TEXT",
               "fold_duplicates": "INTEGER"}
PROFILE_FIELDS = ("relevancy_weight", "recency_weight", "richness_weight", "reputation_weight",
                  "fusion_method", "dense_weight", "recency_mode", "recency_half_life_days",
                  "reputation_prior_strength", *ADDED_FIELDS)
_DEFAULT = 3 + len(PROFILE_FIELDS)           # index of is_default in a row; updated_unix and seq follow
_ROW_LENGTH = _DEFAULT + 3

Row = Sequence


def row_of(p: RankingProfile, version: int, updated_unix: int, seq: int) -> tuple:
    """`p` stored as `version` (a row as the module docstring lays it out)."""
    return (p.persona_id, p.name, version, *(getattr(p, f) for f in PROFILE_FIELDS), int(p.is_default),
            updated_unix, seq)


def upgrade_row(row: Row) -> tuple:
    """`row` in today's layout: a row stored before the last fields of `ADDED_FIELDS` existed
    gets their defaults (re-ranking off, no model), inserted where they now stand."""
    missing = _ROW_LENGTH - len(row)
    if missing <= 0:
        return tuple(row)
    if missing > len(ADDED_FIELDS):
        raise ValueError(f"a stored profile row of {len(row)} values; expected {_ROW_LENGTH}")
    cut = _DEFAULT - missing
    return (*row[:cut], *list(ADDED_FIELDS.values())[-missing:], *row[cut:])


def select_columns(have: Iterable[str]) -> str:
    """The SQL select list of a profile row from a table with columns `have`: a field the table
    does not have yet (a database served read-only, not migrated) is read as its default."""
    have = set(have)
    fields = (f if f in have or f not in ADDED_FIELDS else sql_literal(ADDED_FIELDS[f]) for f in PROFILE_FIELDS)
    return ", ".join(["persona_id", "name", "version", *fields, "is_default", "updated_unix", "seq"])


def sql_literal(value: object) -> str:
    """A default of `ADDED_FIELDS` as an SQL literal."""
    return f"'{value}'" if isinstance(value, str) else repr(int(value) if isinstance(value, bool) else value)


def next_version(rows: Iterable[Row], persona_id: str, name: str) -> int:
    """The version the next store of (persona, name) gets: one past the latest."""
    return 1 + max((r[2] for r in rows if r[0] == persona_id and r[1] == name), default=0)


def latest(rows: Iterable[Row], persona_id: str | None = None) -> list[Row]:
    """The latest version of every (persona, name) (of one persona when given), by persona and name."""
    best: dict[tuple[str, str], Row] = {}
    for r in rows:
        if persona_id is not None and r[0] != persona_id:
            continue
        key = (r[0], r[1])
        if key not in best or r[2] > best[key][2]:
            best[key] = r
    return [best[k] for k in sorted(best)]


def default_key(scope_latest: Sequence[Row]) -> tuple[str, str] | None:
    """(persona, name) of the default among one scope's latest profiles (ordered by name): the
    most recently stored one flagged `is_default`, else the one named "default"."""
    flagged = [r for r in scope_latest if r[_DEFAULT]]
    if flagged:
        best = max(flagged, key=lambda r: r[-1])
        return best[0], best[1]
    for r in scope_latest:
        if r[1] == "default":
            return r[0], r[1]
    return None


def default_keys(rows: Sequence[Row]) -> set[tuple[str, str]]:
    """The default (persona, name) of every scope."""
    by_scope: dict[str, list[Row]] = {}
    for row in latest(rows):
        by_scope.setdefault(row[0], []).append(row)
    return {key for scoped in by_scope.values() if (key := default_key(scoped)) is not None}


def profile_of(row: Row, tenant_id: str, defaults: set[tuple[str, str]]) -> RankingProfile:
    """The profile a row holds; `is_default` only if it is its scope's default now."""
    persona_id, name, version = row[0], row[1], row[2]
    fields = dict(zip(PROFILE_FIELDS, row[3:_DEFAULT]))
    fields["fold_duplicates"] = bool(fields["fold_duplicates"])     # SQLite holds it as 0/1
    return RankingProfile(tenant_id=tenant_id, persona_id=persona_id, name=name, version=version,
                          updated_unix=row[_DEFAULT + 1],
                          is_default=bool(row[_DEFAULT]) and (persona_id, name) in defaults, **fields)


def get_profile(rows: Sequence[Row], tenant_id: str, persona_id: str, name: str,
                version: int) -> RankingProfile | None:
    """A profile of the tenant's `rows` (latest version unless `version`); `name` "" = the
    scope's default; a persona scope falls back to the tenant scope."""
    defaults = default_keys(rows)
    for scope in ([persona_id, ""] if persona_id else [""]):
        wanted = name
        if not wanted:
            key = default_key(latest(rows, scope))
            if key is None:
                continue
            wanted = key[1]
        mine = [r for r in rows if r[0] == scope and r[1] == wanted and (not version or r[2] == version)]
        if mine:
            return profile_of(max(mine, key=lambda r: r[2]), tenant_id, defaults)
    return None


def list_profiles(rows: Sequence[Row], tenant_id: str, persona_id: str) -> list[RankingProfile]:
    """Latest version of every profile (of one persona when `persona_id` is set)."""
    defaults = default_keys(rows)
    return [profile_of(r, tenant_id, defaults) for r in latest(rows, persona_id or None)]


def keep_model(rows: Iterable[Row], p: RankingProfile) -> RankingProfile:
    """`p` (put_ranking_profile's, which names no model) with the model fields of the latest
    stored version of its (persona, name): editing a tuned profile's weights keeps its model."""
    mine = [r for r in rows if r[0] == p.persona_id and r[1] == p.name]
    if not mine:
        return p
    last = dict(zip(PROFILE_FIELDS, max(mine, key=lambda r: r[2])[3:_DEFAULT]))
    return replace(p, **{f: last[f] for f in MODEL_FIELDS})
