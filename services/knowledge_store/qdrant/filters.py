"""Search filters as a Qdrant filter: the same conditions embedded/storage/filter_sql.py puts in SQL.

Every chunk point carries what the conditions read: `time` (the entry's timestamp, else the
artifact's modified, else created time; 0 = unknown), source type and id, artifact id, tags,
owners, the entry's persona, visibility groups and `public` (no groups). `Tenant.scope` adds what
every search has: the tenant's serving generation and the artifact's current version.
"""
from __future__ import annotations

from dataclasses import dataclass

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


#: The payload field holding the tenant generation a point belongs to (absent: generation 0, the
#: points written before generations existed and every tenant never imported into on Qdrant).
GEN = "tenant_gen"


@dataclass(frozen=True, slots=True)
class Tenant:
    """One generation of a tenant's points: every filter, point id and write of the tenant is built
    from it (no tenant condition exists without its generation). An import writes a new generation
    and switches the tenant over to it in one write (archive.py)."""
    id: str
    gen: int

    @property
    def key(self) -> str:
        """The tenant part of its point ids (layout.py): the tenant id; after an import, with the
        generation (a control character separates them: neither id may hold one)."""
        return self.id if not self.gen else f"{self.id}\x1fg{self.gen}"

    def conditions(self) -> list[qm.Condition]:
        gen = qm.IsEmptyCondition(is_empty=qm.PayloadField(key=GEN)) if not self.gen else _eq(GEN, self.gen)
        return [_eq("tenant_id", self.id), gen]

    def all(self, *extra: qm.Condition) -> qm.Filter:
        """Every point of this generation of the tenant (and `extra`)."""
        return qm.Filter(must=[*self.conditions(), *extra])

    def scope(self, f: SearchFilters | None = None, *extra: qm.Condition) -> qm.Filter:
        """The tenant's current entries that `f` allows (and `extra`)."""
        must: list[qm.Condition] = [*self.conditions(), _eq("current", True), *extra]
        if f is not None:
            must += conditions(f)
        return qm.Filter(must=must)
