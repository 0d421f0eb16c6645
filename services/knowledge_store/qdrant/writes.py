"""Ingest and delete on Qdrant: where a write commits.

The documents are prepared as for every backend (preparation.py: validate, extract, chunk,
analyse, embed); then written as points (layout.py).

Writes (Qdrant has no multi-point transaction):

    ingest   1. the new version's chunk points, `current: false` (ids from tenant, artifact,
                chunk, version: a retried ingest writes the same points), then each one's
                `vector_sha`, the hash of its vector as read back (consistency.py)
             2. the artifact's record: version = new, `pending: true`      <- the commit point
             3. one batch per artifact: old version `current: false`, then new `current: true`
             4. term statistics updated (document frequencies, entries, total length)
             5. the old version's points deleted; the record's `pending` cleared
    delete   entries hidden (`current: false`), record deleted, points, votes deleted, stats

Readers filter on `current: true`: they see the old version, then (for the instant between the
two payload sets of step 3) neither, then the new one; never both. A replica killed after step 2
leaves a pending record whose version is fully written: the next replica to open finishes it
(`recover`, steps 3-5) and recounts that tenant's statistics; killed before, it leaves invisible
points of an unacknowledged version, deleted by the next write of that artifact.

Writes of one artifact must come from one writer at a time (last writer wins); the term
statistics' deltas are eventually consistent (statistics.py).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from opentelemetry import trace
from qdrant_client import models as qm

from services.knowledge_store import validation
from services.knowledge_store.preparation import (PreparedDocument, embed_texts, offered_attributes, open_batch,
                                                   prepare_batch, rejected_attributes)
from services.knowledge_store.qdrant import bm25, layout
from services.knowledge_store.qdrant.base import UPSERT_BATCH, sparse_of
from services.knowledge_store.qdrant.consistency import Checks
from services.knowledge_store.qdrant.filters import GEN
from shared.records import ARTIFACT_FIELDS, DocumentIn, IngestReport, IngestResult
from shared.text_hash import text_hash

log = logging.getLogger(__name__)
KEYS_KEPT = 8                  # idempotency keys an artifact's record remembers
tracer = trace.get_tracer(__name__)


class Writes(Checks):
    """Ingest, delete, and the recovery of interrupted writes (module docstring)."""

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None, *,
                     commit_valid: bool = False, key: str = "") -> IngestReport:
        docs, rejected = open_batch(self._settings, tenant_id, persona_id, documents, commit_valid, key)
        with tracer.start_as_current_span("knowledge_store.ingest") as span:      # as the embedded backend's
            span.set_attributes(offered_attributes(docs))
            batch = await asyncio.to_thread(prepare_batch, self._settings, docs, rejected, commit_valid)
            prepared, rejected = batch.documents, batch.rejected
            span.set_attributes(rejected_attributes(rejected))
            if not prepared:
                return batch.nothing_written()
            texts = batch.texts
            span.set_attribute("nucleus.entries", len(texts))
            started = time.perf_counter()
            vectors, title_vectors = batch.split_vectors(            # the chunks, then the titles: one pass
                await embed_texts(self._embedder, self._settings, batch.embed_inputs(), batch.entry_progress(progress)))
            embed_seconds = time.perf_counter() - started
            started = time.perf_counter()
            await self._ensure()
            results = await self._write(tenant_id, persona_id, prepared, vectors, title_vectors, key)
            return IngestReport(results=tuple(results), total_entries=len(texts), embed_seconds=embed_seconds,
                                commit_seconds=time.perf_counter() - started, rejected=rejected)

    async def _write(self, tenant_id: str, persona_id: str, prepared: list[PreparedDocument],
                     vectors: np.ndarray, title_vectors: Sequence[np.ndarray | None] | None = None,
                     key: str = "") -> list[IngestResult]:
        """Where an ingest commits: the steps of the module docstring. `title_vectors`: each
        document's (None: an empty title; the whole list None: not embedded, the backfill's).
        `key`: the request's idempotency key, kept in its records (the last `KEYS_KEPT`): a
        retry of a committed request is answered its results and writes nothing."""
        await self._ensure()
        now = int(time.time())
        artifact_ids = [p.meta.artifact_id for p in prepared]
        records = await self._records(tenant_id, artifact_ids)
        done = [r["ingest_keys"][key] for r in records.values() if key and key in (r.get("ingest_keys") or {})]
        if done:
            return [IngestResult(*d) for d in done]
        old_chunks = await self._current_chunks(tenant_id, artifact_ids)
        n, total = await self._tenant_stats(tenant_id)
        counted = [(bm25.term_counts(r.fts_title, r.fts_body, self._weights)) for p in prepared for r in p.rows]
        batch_len = sum(dl for _, dl in counted)
        avgdl = (total + batch_len) / (n + len(counted)) if n + len(counted) else 1.0   # snapshot, bm25.py
        versions = {p.meta.artifact_id: _version(persona_id, p) for p in prepared}
        held = Counter(c.payload["artifact_id"] for c in old_chunks)
        shown = {a for a, v in versions.items() if records.get(a, {}).get("version") == v     # points identical to
                 and not records[a].get("pending")}                                          # the committed ones
        same = {a for a, v in versions.items() if records.get(a, {}).get("version") == v      # unchanged and
                and not records[a].get("pending") and held[a] == records[a].get("entries")}   # whole (check)
        t = await self._tenant(tenant_id)
        points: list[qm.PointStruct] = []
        df_delta: dict[int, int] = {}
        entries_delta, len_delta, title_delta = 0, 0.0, 0.0
        offset = 0
        for p in prepared:
            a = p.meta.artifact_id
            version = versions[a]
            meta = _meta_payload(p.meta)
            for row, (tf, dl) in zip(p.rows, counted[offset:offset + len(p.rows)]):
                vector = vectors[offset]
                offset += 1
                pid = layout.chunk_id(t.key, a, row.chunk_index, version)
                points.append(qm.PointStruct(id=pid, vector={
                    layout.DENSE: vector.tolist(), layout.SPARSE: bm25.saturated(tf, dl, avgdl)}, payload={
                    "tenant_id": tenant_id, "artifact_id": a, "version": version, "current": a in shown,
                    "entry_id": f"{a}#{row.chunk_index}", "persona_id": persona_id, "chunk_index": row.chunk_index,
                    "text": row.text, "text_hash": row.text_hash or text_hash(row.text), "headline": row.headline,
                    "content_summary": row.content_summary,
                    **({"span": [row.span_start, row.span_end]} if row.span_end else {}),
                    "timestamp_unix": row.timestamp_unix, "richness": row.richness, "indexed_unix": now,
                    "time": row.timestamp_unix or p.meta.modified_unix or p.meta.created_unix,
                    "row_id": layout.row_id(pid), "dl": dl, "tl": len(row.fts_title.split()), "avgdl": avgdl,
                    "vector_sha": layout.vector_hash(layout.cosine_stored(vector)),
                    **meta}))
                if a not in same:
                    for i in tf:
                        df_delta[i] = df_delta.get(i, 0) + 1
                    entries_delta += 1
                    len_delta += dl
                    title_delta += len(row.fts_title.split())
        for chunk in old_chunks:
            if chunk.payload["artifact_id"] in same:
                continue
            for i in sparse_of(chunk).indices:
                df_delta[i] = df_delta.get(i, 0) - 1
            entries_delta -= 1
            len_delta -= float(chunk.payload.get("dl", 0))
            title_delta -= float(chunk.payload.get("tl", 0))
        # 1. the new versions' points, invisible until flipped
        for start in range(0, len(points), UPSERT_BATCH):
            await self._call("upsert", **self._chunk_args(tenant_id), points=points[start:start + UPSERT_BATCH],
                             wait=True)
        # 1b. each point's hash of its vector as Qdrant holds it (the check's, consistency.py)
        await self._hash_vectors(tenant_id, [pt.id for pt in points],
                                 {pt.id: pt.payload["vector_sha"] for pt in points})
        # 2. the records: the commit point
        results: list[IngestResult] = []
        record_points = []
        for k, p in enumerate(prepared):
            a = p.meta.artifact_id
            old = records.get(a, {})
            title_vector = title_vectors[k] if title_vectors is not None else None
            keys = list((old.get("ingest_keys") or {}).items())[1 - KEYS_KEPT:]      # a later write keeps them
            keys += [(key, [a, len(p.rows), int(old.get("entries", 0)), p.index])] if key else []
            record_points.append(qm.PointStruct(id=layout.artifact_point(t.key, a), vector={}, payload={
                "title_vector": None if title_vector is None else np.asarray(title_vector, np.float32).tolist(),
                "tenant_id": tenant_id, **_meta_payload(p.meta), "persona_id": persona_id, "indexed_unix": now,
                "version": versions[a], "entries": len(p.rows), "pending": a not in same,
                "feedback_helpful": old.get("feedback_helpful", 0),
                "feedback_unhelpful": old.get("feedback_unhelpful", 0), "ingest_keys": dict(keys)}))
            results.append(IngestResult(a, len(p.rows), int(old.get("entries", 0)), p.index))
        await self._call("upsert", collection_name=self._names.artifacts, points=record_points, wait=True)
        changed = [a for a in artifact_ids if a not in same]
        new_ids = [pt.id for pt in points if pt.payload["artifact_id"] not in same]
        rewritten = set(new_ids)           # the same version again (a point was lost): its ids are kept
        old_ids = [c.id for c in old_chunks if c.payload["artifact_id"] not in same and c.id not in rewritten]
        await self._flip_ids(tenant_id, old_ids, new_ids)
        await self._apply_stats(tenant_id, df_delta, entries_delta, len_delta, title_delta)
        await self._finish(tenant_id, [(a, versions[a]) for a in changed], old_ids)
        if any(records.get(a, {}).get("pending") for a in artifact_ids):
            await self.recount(tenant_id)        # an interrupted write's statistics are unknown
        return results

    async def _flip_ids(self, tenant_id: str, old_ids: list, new_ids: list) -> None:
        """3. (the write knows both versions' points) old points `current: false`, then the new
        ones `current: true`, in one request: by ids, so it costs what the write touched."""
        if not old_ids and not new_ids:
            return
        key = self._shard(tenant_id)
        ops: list[Any] = []
        if old_ids:
            ops.append(qm.SetPayloadOperation(set_payload=qm.SetPayload(payload={"current": False}, points=old_ids,
                                                                        shard_key=key)))
        if new_ids:
            ops.append(qm.SetPayloadOperation(set_payload=qm.SetPayload(payload={"current": True}, points=new_ids,
                                                                        shard_key=key)))
        await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                         wait=True)

    async def _flip(self, tenant_id: str, artifacts: list[tuple[str, str]]) -> None:
        """3. per artifact: other versions `current: false`, then this version `current: true`."""
        if not artifacts:
            return
        ops: list[Any] = []
        key = self._shard(tenant_id)
        t = await self._tenant(tenant_id)
        for a, version in artifacts:
            mine = [*t.conditions(), qm.FieldCondition(key="artifact_id", match=qm.MatchValue(value=a))]
            same = qm.FieldCondition(key="version", match=qm.MatchValue(value=version))
            ops.append(qm.SetPayloadOperation(set_payload=qm.SetPayload(
                payload={"current": False}, filter=qm.Filter(must=mine, must_not=[same]), shard_key=key)))
            ops.append(qm.SetPayloadOperation(set_payload=qm.SetPayload(
                payload={"current": True}, filter=qm.Filter(must=[*mine, same]), shard_key=key)))
        await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                         wait=True)

    async def _finish(self, tenant_id: str, artifacts: list[tuple[str, str]], old_ids: list | None = None) -> None:
        """5. delete the old version's points (by id when the write knows them; on a cluster,
        and when finishing an interrupted write, every other version's by filter, which also
        removes the invisible points of an attempt killed before its commit point), then clear
        `pending`. (Local mode has no payload index: a filter scans the collection.)"""
        if not artifacts:
            return
        key = self._shard(tenant_id)
        if old_ids:
            await self._call("delete", collection_name=self._names.chunks, wait=True,
                             points_selector=qm.PointIdsList(points=old_ids, shard_key=key))
        if old_ids is None or self._q.cluster:
            await self._delete_other_versions(tenant_id, artifacts)
        t = await self._tenant(tenant_id)
        await self._call("batch_update_points", collection_name=self._names.artifacts, wait=True,
                         update_operations=[qm.SetPayloadOperation(set_payload=qm.SetPayload(
                             payload={"pending": False}, points=[layout.artifact_point(t.key, a)]))
                             for a, _ in artifacts])

    async def _delete_other_versions(self, tenant_id: str, artifacts: list[tuple[str, str]]) -> None:
        key = self._shard(tenant_id)
        t = await self._tenant(tenant_id)
        ops = [qm.DeleteOperation(delete=qm.FilterSelector(filter=qm.Filter(
            must=[*t.conditions(), qm.FieldCondition(key="artifact_id", match=qm.MatchValue(value=a))],
            must_not=[qm.FieldCondition(key="version", match=qm.MatchValue(value=v))]), shard_key=key))
            for a, v in artifacts]
        await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                         wait=True)

    async def recover(self) -> int:
        """Finish every write a killed replica left pending (module docstring); the tenants
        touched get their statistics recounted. Returns the artifacts finished."""
        pending = await self._scroll({"collection_name": self._names.artifacts}, qm.Filter(must=[
            qm.FieldCondition(key="pending", match=qm.MatchValue(value=True))]),
            payload=["tenant_id", "artifact_id", "version", GEN])
        by_tenant: dict[str, list[tuple[str, str]]] = {}
        for p in pending:
            tenant_id = p.payload["tenant_id"]
            if int(p.payload.get(GEN) or 0) != (await self._tenant(tenant_id)).gen:
                continue                    # an unfinished import's: deleted with it (archive.py)
            by_tenant.setdefault(tenant_id, []).append((p.payload["artifact_id"], p.payload["version"]))
        for tenant_id, artifacts in by_tenant.items():
            log.warning("finishing %d interrupted artifact writes of tenant %s", len(artifacts), tenant_id)
            await self._flip(tenant_id, artifacts)
            await self._finish(tenant_id, artifacts)
            await self.recount(tenant_id)
        return sum(len(a) for a in by_tenant.values())

    async def backfill_text_hashes(self) -> int:
        """Give every chunk point stored without a `text_hash` (before it existed) the hash of its
        stored text (shared/text_hash.py); run once by `_ensure`, after `recover`. Derived data:
        `vector_sha` and the consistency check do not read it. Returns the points hashed."""
        missing = qm.Filter(must=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key="text_hash"))])
        done, seen = 0, set()
        while True:         # a page at a time: the points hashed no longer match, so always the first page
            points, _ = await self._call("scroll", collection_name=self._names.chunks, scroll_filter=missing,
                                         limit=256, with_payload=["tenant_id", "text"], with_vectors=False)
            if not points or seen.issuperset(p.id for p in points):     # none left (or none Qdrant sees as set)
                break
            seen.update(p.id for p in points)
            ops = [qm.SetPayloadOperation(set_payload=qm.SetPayload(
                payload={"text_hash": text_hash(p.payload.get("text") or "")}, points=[p.id],
                shard_key=self._shard(p.payload.get("tenant_id", "")))) for p in points]
            await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                             wait=True)
            done += len(points)
        if done:
            log.info("text hashes backfilled for %d chunk points", done)
        return done

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        validation.tenant_id(tenant_id)
        unique = validation.artifact_ids(artifact_ids)
        await self._ensure()
        await self._require_tenant(tenant_id)
        records = await self._records(tenant_id, unique)
        chunks = await self._current_chunks(tenant_id, unique)
        df_delta: dict[int, int] = {}
        for chunk in chunks:
            for i in sparse_of(chunk).indices:
                df_delta[i] = df_delta.get(i, 0) - 1
        t = await self._tenant(tenant_id)
        mine = [*t.conditions(), qm.FieldCondition(key="artifact_id", match=qm.MatchAny(any=unique))]
        key = self._shard(tenant_id)
        await self._call("set_payload", **self._chunk_args(tenant_id), payload={"current": False},
                         points=qm.Filter(must=mine), wait=True)
        await self._call("delete", collection_name=self._names.artifacts, wait=True,
                         points_selector=qm.PointIdsList(points=[layout.artifact_point(t.key, a) for a in unique]))
        await self._call("delete", collection_name=self._names.chunks, wait=True,
                         points_selector=qm.FilterSelector(filter=qm.Filter(must=mine), shard_key=key))
        for collection in (self._names.votes, self._names.feedback):
            await self._call("delete", collection_name=collection, wait=True,
                             points_selector=qm.FilterSelector(filter=qm.Filter(must=mine)))
        await self._apply_stats(tenant_id, df_delta, -len(chunks),
                                -sum(float(c.payload.get("dl", 0)) for c in chunks),
                                -sum(float(c.payload.get("tl", 0)) for c in chunks))
        return len(records), len(chunks)


    async def lacking_title_vectors(self, tenant_id: str, limit: int) -> list[tuple[str, str]]:
        """(artifact id, title) of up to `limit` titled artifacts whose record has no title vector."""
        validation.tenant_id(tenant_id)
        await self._ensure()
        t = await self._tenant(tenant_id)
        got = await self._scroll({"collection_name": self._names.artifacts}, qm.Filter(
            must=[*t.conditions(), qm.IsEmptyCondition(is_empty=qm.PayloadField(key="title_vector"))],
            must_not=[qm.FieldCondition(key="title", match=qm.MatchValue(value=""))]),
            payload=["artifact_id", "title"], limit=max(1, int(limit)) * 2)
        found = sorted((p.payload["artifact_id"], p.payload.get("title", "")) for p in got)
        return [(a, t) for a, t in found if t.strip()][:limit]

    async def put_title_vectors(self, tenant_id: str, rows: Sequence[tuple[str, str, np.ndarray]]) -> int:
        """Set backfilled title vectors on records that still have that title and none yet (a
        re-ingest in between wrote its own). Returns how many were set."""
        validation.tenant_id(tenant_id)
        await self._ensure()
        stored = 0
        t = await self._tenant(tenant_id)
        for artifact_id, title, vector in rows:
            point = layout.artifact_point(t.key, artifact_id)
            still = qm.Filter(must=[qm.HasIdCondition(has_id=[point]),
                                    qm.FieldCondition(key="title", match=qm.MatchValue(value=title)),
                                    qm.IsEmptyCondition(is_empty=qm.PayloadField(key="title_vector"))])
            if not (await self._call("count", collection_name=self._names.artifacts, count_filter=still,
                                     exact=True)).count:
                continue
            await self._call("set_payload", collection_name=self._names.artifacts, wait=True, points=still,
                             payload={"title_vector": np.asarray(vector, np.float32).tolist()})
            stored += 1
        return stored


def _meta_payload(meta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ARTIFACT_FIELDS:
        value = getattr(meta, name)
        out[name] = list(value) if isinstance(value, tuple) else value
    out["public"] = not meta.visibility_groups
    return out


def _version(persona_id: str, prepared: PreparedDocument) -> str:
    """The version of an artifact's content: a hash of everything its points hold, so the same
    document ingested again (a retry) maps to the same points."""
    h = hashlib.sha256(json.dumps([persona_id, _meta_payload(prepared.meta)], sort_keys=True).encode())
    for row in prepared.rows:
        h.update(json.dumps([row.chunk_index, row.text, row.headline, row.timestamp_unix, row.fts_title]).encode())
    return h.hexdigest()[:20]
