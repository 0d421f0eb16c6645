"""The consistency check of a tenant on Qdrant (gRPC CheckTenant, `nucleus check`), and the repair
of what is derived.

Qdrant keeps one copy of each point, so the check compares what the store wrote in different
collections, and each point with what it wrote into it:

    artifact records vs entry points   each committed record's version and entry count against
                                       the tenant's current points of that version: a point that
                                       is gone held the only copy of its text, so it is reported
                                       with the advice to re-ingest (or re-import) the document —
                                       never invented; points of no record (a delete cut short)
                                       and stale versions left behind are orphans once older than
                                       ORPHAN_GRACE_S (younger ones may be a running write's)
    vectors                            each point's dense vector against `vector_sha`, the hash of
                                       the vector as read back from Qdrant after the upsert (Qdrant
                                       re-normalises cosine vectors, so the hash is of what it
                                       holds); a point without one (written before hashes) is
                                       counted unverified until it is ingested again
    keyword statistics                 the tenant's document frequencies, entry count and total
                                       lengths (statistics.py) against a recount from the points

The repair recomputes what is derived: changed or malformed vectors re-embedded from the stored
text (they wait, `deferred`, while the embedder is unreachable), the statistics recounted,
orphan points deleted. The answer is then a second check's, with what was repaired.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from qdrant_client import models as qm

from services.knowledge_store import validation
from services.knowledge_store.models import TenantCheck
from services.knowledge_store.preparation import derived_rows, embed_texts
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.base import SCROLL_PAGE, sparse_of
from services.knowledge_store.qdrant.statistics import TermStatistics
from shared.errors import NucleusError

log = logging.getLogger(__name__)

MAX_MESSAGES = 20
CHECK_PAYLOAD = ["artifact_id", "version", "current", "chunk_index", "vector_sha", "dl", "tl", "indexed_unix"]
#: A point outside every committed version is an orphan only once it is this old: younger, it may
#: belong to a write between its first step and its commit point on another replica (writes.py).
ORPHAN_GRACE_S = 600


class Found:
    """What one scan of a tenant found (point ids by problem)."""

    def __init__(self) -> None:
        self.entries = self.vectors = self.unverified = 0
        self.lost: dict[str, list[int]] = {}            # artifact -> chunk indices whose points are gone
        self.changed: list[Any] = []
        self.malformed: list[Any] = []
        self.orphans: list[Any] = []
        self.without_record = 0
        self.stats_off: list[str] = []                  # what of the keyword statistics disagrees


class Checks(TermStatistics):
    """The check and repair of a tenant (module docstring); `_hash_vectors` is ingest's too."""

    async def _hash_vectors(self, tenant_id: str, ids: Sequence[Any], written: dict[Any, str] | None = None) -> None:
        """Make each point's `vector_sha` the hash of its dense vector as Qdrant returns it: read
        back, and set where it differs from `written` (the hash the upsert carried, of the vector
        normalised as Qdrant normalises it: usually the same, so nothing more is written)."""
        key = self._shard(tenant_id)
        written = written or {}
        for start in range(0, len(ids), SCROLL_PAGE):
            got = await self._call("retrieve", **self._chunk_args(tenant_id), ids=list(ids[start:start + SCROLL_PAGE]),
                                   with_payload=False, with_vectors=[layout.DENSE])
            ops = []
            for p in got:
                dense = p.vector.get(layout.DENSE) if isinstance(p.vector, dict) else None
                sha = layout.vector_hash(dense) if dense is not None else None
                if sha is not None and sha != written.get(p.id):
                    ops.append(qm.SetPayloadOperation(set_payload=qm.SetPayload(
                        payload={"vector_sha": sha}, points=[p.id], shard_key=key)))
            if ops:
                await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                                 wait=True)

    async def check_tenant(self, tenant_id: str, *, repair: bool = True) -> TenantCheck:
        validation.tenant_id(tenant_id)
        await self._ensure()
        await self._require_tenant(tenant_id)
        found = await self._scan(tenant_id)
        report = _report(tenant_id, found)
        if report.consistent or not repair:
            self._health_of(tenant_id, report)
            return report
        repaired, deferred = await self._repair(tenant_id, found)
        after = replace(_report(tenant_id, await self._scan(tenant_id)), deferred=deferred, **repaired)
        for kind, field in (("vectors", "repaired_vectors"), ("keyword_rows", "repaired_keyword_rows"),
                            ("orphans", "removed_orphans")):
            self.health.count_repair(kind, repaired[field])
        log.warning("tenant %s repaired: %d vectors re-embedded, %d keyword statistics recounted, %d orphan points "
                    "removed; now %s%s", tenant_id, repaired["repaired_vectors"], repaired["repaired_keyword_rows"],
                    repaired["removed_orphans"], "consistent" if after.consistent else "still inconsistent: "
                    + after.summary(), f"; {deferred}" if deferred else "")
        self._health_of(tenant_id, after)
        return after

    def _health_of(self, tenant_id: str, report: TenantCheck) -> None:
        if report.consistent:
            self.health.clear(tenant_id, "inconsistent")
        else:
            self.health.report(tenant_id, "inconsistent", report.summary())

    async def _scan(self, tenant_id: str) -> Found:
        found = Found()
        records = {p.payload["artifact_id"]: p.payload for p in await self._scroll(
            {"collection_name": self._names.artifacts}, await self._all(tenant_id),
            payload=["artifact_id", "version", "entries", "pending"])}
        points = await self._scroll(self._chunk_args(tenant_id), await self._all(tenant_id),
                                    payload=CHECK_PAYLOAD, vectors=True)
        old = time.time() - ORPHAN_GRACE_S
        held: dict[str, set[int]] = {}
        df: dict[int, int] = {}
        total = title = 0.0
        for p in points:
            record = records.get(p.payload["artifact_id"])
            aged = float(p.payload.get("indexed_unix", 0)) < old
            if record is None:
                found.without_record += bool(p.payload.get("current"))
                if aged:
                    found.orphans.append(p.id)
                continue
            if p.payload.get("version") != record.get("version"):
                if aged and not record.get("pending"):      # a pending write's points are recover()'s
                    found.orphans.append(p.id)
                continue
            if not p.payload.get("current"):
                continue
            found.entries += 1
            held.setdefault(p.payload["artifact_id"], set()).add(int(p.payload.get("chunk_index", -1)))
            dense = p.vector.get(layout.DENSE) if isinstance(p.vector, dict) else None
            if dense is None or len(dense) != self._settings.dimension or not np.all(np.isfinite(dense)):
                found.malformed.append(p.id)
            else:
                found.vectors += 1
                sha = p.payload.get("vector_sha")
                if sha is None:
                    found.unverified += 1
                elif sha != layout.vector_hash(dense):
                    found.changed.append(p.id)
            total += float(p.payload.get("dl", 0))
            title += float(p.payload.get("tl", 0))
            for i in sparse_of(p).indices:
                df[i] = df.get(i, 0) + 1
        for artifact_id, record in sorted(records.items()):
            if record.get("pending"):
                continue
            gone = sorted(set(range(int(record.get("entries", 0)))) - held.get(artifact_id, set()))
            if gone:
                found.lost[artifact_id] = gone
        found.stats_off = await self._statistics_off(tenant_id, df, found.entries, total, title)
        return found

    async def _statistics_off(self, tenant_id: str, df: dict[int, int], entries: int, total: float,
                              title: float) -> list[str]:
        stored = await self._buckets(tenant_id, range(layout.TERM_BUCKETS))
        held = {int(i): int(n) for bucket in stored.values() for i, n in bucket.items()}
        off = [f"term {i}: df {held.get(i, 0)}, counted {df.get(i, 0)}"
               for i in sorted(set(held) | set(df)) if held.get(i, 0) != df.get(i, 0)]
        n, stored_total, stored_title = await self._tenant_totals(tenant_id)
        if n != entries:
            off.append(f"entries: {n}, counted {entries}")
        if abs(stored_total - total) > 1e-6 * max(1.0, total):
            off.append(f"total length: {stored_total:g}, counted {total:g}")
        if stored_title is not None and abs(stored_title - title) > 1e-6 * max(1.0, title):
            off.append(f"title length: {stored_title:g}, counted {title:g}")
        return off

    async def _repair(self, tenant_id: str, found: Found) -> tuple[dict[str, int], str]:
        done = {"repaired_vectors": 0, "repaired_keyword_rows": 0, "removed_orphans": 0}
        deferred = ""
        if found.orphans:
            await self._call("delete", collection_name=self._names.chunks, wait=True,
                             points_selector=qm.PointIdsList(points=found.orphans, shard_key=self._shard(tenant_id)))
            done["removed_orphans"] = len(found.orphans)
        redo = [*found.changed, *found.malformed]
        if redo:
            try:
                done["repaired_vectors"] = await self._reembed(tenant_id, redo)
            except NucleusError as err:
                deferred = f"{len(redo)} vectors wait for re-embedding: {err}"
        if found.stats_off or found.orphans:
            await self.recount(tenant_id)
            done["repaired_keyword_rows"] = len(found.stats_off)
        return done, deferred

    async def _reembed(self, tenant_id: str, ids: list[Any]) -> int:
        """Embed these points again from their stored text (as ingest embedded it) and hash them."""
        points = await self._call("retrieve", **self._chunk_args(tenant_id), ids=ids,
                                  with_payload=["title", "headline", "text"])
        texts = [derived_rows(p.payload.get("title", ""), p.payload.get("headline", ""),
                              p.payload.get("text", ""))[2] for p in points]
        vectors = await embed_texts(self._embedder, self._settings, texts)
        await self._call("update_vectors", **self._chunk_args(tenant_id), wait=True, points=[
            qm.PointVectors(id=p.id, vector={layout.DENSE: v.tolist()}) for p, v in zip(points, vectors)])
        await self._hash_vectors(tenant_id, [p.id for p in points])
        return len(points)


def _report(tenant_id: str, found: Found) -> TenantCheck:
    lost = sum(len(c) for c in found.lost.values())
    messages = [f"artifact '{a}': entries {', '.join(map(str, c))} are gone from Qdrant with the only copy of "
                "their text; ingest the document again (re-import it from its source)"
                for a, c in list(found.lost.items())[:MAX_MESSAGES]]
    if found.changed:
        messages.append(f"{len(found.changed)} vectors differ from the hash taken when they were written")
    if found.stats_off:
        messages.append(f"{len(found.stats_off)} keyword statistics disagree with the points (first: "
                        f"{found.stats_off[0]})")
    return TenantCheck(
        tenant_id=tenant_id, entries=found.entries, vectors=found.vectors, keyword_rows=found.entries,
        vectors_indexed=found.entries, keyword_rows_indexed=found.entries, missing_vectors=0,
        malformed_vectors=len(found.malformed), missing_keyword_rows=0, orphan_vectors=len(found.orphans),
        orphan_keyword_rows=0, entries_without_artifact=found.without_record, integrity_errors=tuple(messages),
        unverified_rows=found.unverified, missing_entries=lost, changed_vectors=len(found.changed),
        keyword_stats_off=len(found.stats_off))
