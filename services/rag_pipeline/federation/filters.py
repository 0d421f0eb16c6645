"""A request's filters on remote hits: passed to remotes that take them, then applied again
here to what they return (fail closed).

    f = for_remotes(request.filters)        # the conditions that concern a remote hit
    kept, dropped = apply(f, hits)          # dropped: hits failing a filter or lacking its field

A remote is untrusted about what it applies, so every filter is checked again on the metadata it
returned: a date range needs the hit's date, `source_types` its source type, `tags` / `owners`
its tags / owners (any of); `artifact_ids` match the remote's document id, bare or as
`<source>:<id>`. A hit without a field a filter needs is dropped, and the count is reported per
source. Which local sources a query covers (`source_ids`), the caller's visibility groups and
the persona do not apply to remote hits: the federation plan and the remote decide those.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from services.rag_pipeline.federation.hits import RemoteHit
from shared.records import SearchFilters


def for_remotes(filters: SearchFilters | None) -> SearchFilters | None:
    """The conditions of `filters` that concern a remote hit (None: none)."""
    if filters is None:
        return None
    f = replace(filters, source_ids=(), visibility_groups=(), enforce_visibility=False, persona_id="")
    return None if f.is_empty else f


def keep(f: SearchFilters, hit: RemoteHit) -> bool:
    if f.date_from_unix or f.date_to_unix:
        t = hit.timestamp_unix
        if not t or (f.date_from_unix and t < f.date_from_unix) or (f.date_to_unix and t > f.date_to_unix):
            return False
    if f.source_types and hit.source_type not in f.source_types:
        return False
    if f.tags and not (hit.tags and set(hit.tags) & set(f.tags)):
        return False
    if f.owners and not (hit.owners and set(hit.owners) & set(f.owners)):
        return False
    if f.artifact_ids:
        ids = {hit.artifact_id or hit.id, hit.document_id}
        if not ids & set(f.artifact_ids):
            return False
    return True


def apply(f: SearchFilters | None, hits: list[RemoteHit]) -> tuple[list[RemoteHit], int]:
    """The hits passing every filter of `f`, and how many were dropped."""
    if f is None:
        return hits, 0
    kept = [h for h in hits if keep(f, h)]
    return kept, len(hits) - len(kept)


def _iso(unix: int) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).isoformat().replace("+00:00", "Z")


def seed000_filters(f: SearchFilters | None) -> dict[str, Any] | None:
    """Seed 000's `filters` argument ({date_from, date_to, tags, owners}) for `f`; None: nothing
    it can express."""
    if f is None:
        return None
    out: dict[str, Any] = {}
    if f.date_from_unix:
        out["date_from"] = _iso(f.date_from_unix)
    if f.date_to_unix:
        out["date_to"] = _iso(f.date_to_unix)
    if f.tags:
        out["tags"] = list(f.tags)
    if f.owners:
        out["owners"] = list(f.owners)
    return out or None
