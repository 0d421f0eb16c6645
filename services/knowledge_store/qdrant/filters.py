"""Search filters as a Qdrant filter: the same conditions embedded/storage/filter_sql.py puts in SQL.

Every chunk point carries what the conditions read: `time` (the entry's timestamp, else the
artifact's modified, else created time; 0 = unknown), source type and id, artifact id, tags,
owners, the entry's persona, visibility groups and `public` (no groups). `scope` adds what every
search has: the tenant and the artifact's current version.
"""
from __future__ import annotations

from qdrant_client import models as qm

from shared.records import SearchFilters


def _eq(key: str, value: object) -> qm.FieldCondition:
    return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))


def _any(key: str, values: tuple[str, ...]) -> qm.FieldCondition:
    return qm.FieldCondition(key=key, match=qm.MatchAny(any=list(values)))


def conditions(f: SearchFilters) -> list[qm.Condition]:
    """The conditions of `f` (all must hold), in filter_sql.filter_clause's order."""
    out: list[qm.Condition] = []
    if f.date_from_unix or f.date_to_unix:
        out.append(qm.FieldCondition(key="time", range=qm.Range(
            gt=0, gte=f.date_from_unix or None, lte=f.date_to_unix or None)))
    for key, values in (("source_type", f.source_types), ("source_id", f.source_ids),
                        ("artifact_id", f.artifact_ids), ("tags", f.tags), ("owners", f.owners)):
        if values:
            out.append(_any(key, values))          # an array field matches when ANY value does
    if f.exclude_source_ids:
        out.append(qm.Filter(must_not=[_any("source_id", f.exclude_source_ids)]))
    if f.persona_id:
        out.append(_eq("persona_id", f.persona_id))
    if f.enforce_visibility:
        visible: list[qm.Condition] = [_eq("public", True)]
        if f.visibility_groups:
            visible.append(_any("visibility_groups", f.visibility_groups))
        out.append(qm.Filter(should=visible))
    return out


def tenant(tenant_id: str) -> qm.FieldCondition:
    return _eq("tenant_id", tenant_id)


def scope(tenant_id: str, f: SearchFilters | None = None, *extra: qm.Condition) -> qm.Filter:
    """The tenant's current entries that `f` allows (and `extra`)."""
    must: list[qm.Condition] = [tenant(tenant_id), _eq("current", True), *extra]
    if f is not None:
        must += conditions(f)
    return qm.Filter(must=must)
