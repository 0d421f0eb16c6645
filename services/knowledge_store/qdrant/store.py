"""QdrantKnowledgeStore: the KnowledgeStore facade (backend.StoreBackend) on a Qdrant cluster.

The same validation, chunking, analysis, richness and embedding as the embedded store (the
Ingester's preparation steps and validation.py); only storage and search differ. Nothing lives
in the process: artifacts, entries, term statistics, profiles and feedback are Qdrant points
(layout.py), so several replicas serve the same tenants and any of them can be killed.

Writes (Qdrant has no multi-point transaction):

    ingest   1. the new version's chunk points, `current: false` (ids from tenant, artifact,
                chunk, version: a retried ingest writes the same points)
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

Eventually consistent: term statistics (df, N, total length) are read-modify-write deltas; two
replicas writing the same tenant at the same instant can lose one delta (scores drift slightly
until `check_tenant(repair=True)` recounts them). Profile versions are "max + 1": two replicas
storing the same profile at the same instant may both write version n+1 (the last wins). Writes
of one artifact must come from one writer at a time (last writer wins).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from qdrant_client import models as qm

from ranking.profile import RankingProfile
from services.knowledge_store import personas, validation
from services.knowledge_store.analysis import analyse, query_terms, words
from services.knowledge_store.health import StoreHealth
from services.knowledge_store.ingest import Ingester
from services.knowledge_store.models import Embedder, StoreStatus, TenantCheck
from services.knowledge_store.qdrant import bm25, layout
from services.knowledge_store.qdrant import filters as qf
from services.knowledge_store.qdrant.connection import Connection
from services.knowledge_store.personas import Persona
from services.knowledge_store.richness import richness as text_richness
from services.knowledge_store.keyword_index import B, K1
from services.knowledge_store.search import PHRASE_EXACT_MAX, _keyword_phrases, _KeywordQuery
from services.knowledge_store.storage import ranking_inputs as profile_rows
from shared.bounds import INT32_MAX, check_int
from shared.errors import InvalidArgument, NotFound, Unavailable, Unimplemented
from shared.records import (
    ARTIFACT_FIELDS,
    ArtifactSummary,
    CandidateColumns,
    DocumentIn,
    Entry,
    FeedbackAck,
    Hit,
    IngestReport,
    IngestResult,
    KeywordScores,
    KeywordStats,
    ScoreCompletion,
    SearchFilters,
    SourceStats,
    TenantStats,
)
from shared.settings import KnowledgeStoreSettings

log = logging.getLogger(__name__)

BACKEND = "qdrant"
UPSERT_BATCH = 256
SCROLL_PAGE = 1024
DEFAULT_BM25_WEIGHTS = (1.0, 1.0)
_ENTRY_PAYLOAD = ["tenant_id", "artifact_id", "entry_id", "persona_id", "chunk_index", "text", "headline",
                  "content_summary", "timestamp_unix", "richness", "time", "row_id", *ARTIFACT_FIELDS]
_COLUMN_PAYLOAD = ["artifact_id", "entry_id", "time", "richness", "reputation_prior", "row_id"]
_LIST_FIELDS = ("owners", "tags", "visibility_groups")


class QdrantKnowledgeStore:
    """The KnowledgeStore on Qdrant (module docstring); every method is tenant-scoped."""

    backend = BACKEND

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder, *,
                 bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS) -> None:
        self._settings = settings
        self._weights = (float(bm25_weights[0]), float(bm25_weights[1]))
        self._ingester = Ingester(settings, embedder, bm25_weights, None)   # preparation only
        self._q = Connection(settings)
        self._names = layout.Collections(settings.qdrant_collection_prefix)
        self._big_tenants = tuple(t.strip() for t in settings.qdrant_shard_key_tenants.split(",") if t.strip())
        self._ready = False
        self.health = StoreHealth(Path(settings.qdrant_path or settings.data_dir))

    # -- plumbing ----------------------------------------------------------------------------

    def plan(self) -> list[layout.Call]:
        s = self._settings
        return layout.collection_plan(self._names, s.dimension, cluster=self._q.cluster, shards=s.qdrant_shards,
                                      replication_factor=s.qdrant_replication_factor,
                                      write_consistency=s.qdrant_write_consistency,
                                      shard_key_tenants=self._big_tenants)

    async def _call(self, method: str, **kwargs: Any) -> Any:
        try:
            out = await self._q.call(method, **kwargs)
        except Unavailable as err:
            self.health.report("*", "unavailable", str(err))
            raise
        if self.health.degraded:
            self.health.clear("*", "unavailable")
        return out

    async def _ensure(self) -> None:
        """Create the collections that do not exist yet, then finish interrupted writes."""
        if self._ready:
            return
        existing = {c.name for c in (await self._call("get_collections")).collections}
        created: set[str] = set()
        for call in self.plan():
            name = call.kwargs["collection_name"]
            if name in existing and name not in created:
                continue
            if call.method == "create_collection":
                created.add(name)
            if call.method == "create_shard_key" and not self._q.cluster:
                continue
            await self._call(call.method, **call.kwargs)
        self._ready = True
        await self.recover()

    def _shard(self, tenant_id: str) -> str | None:
        """The shard key selector of a chunk request (None in local mode: no shards)."""
        if not self._q.cluster:
            return None
        return tenant_id if tenant_id in self._big_tenants else layout.DEFAULT_SHARD_KEY

    def _chunk_args(self, tenant_id: str) -> dict[str, Any]:
        key = self._shard(tenant_id)
        return {"collection_name": self._names.chunks, **({"shard_key_selector": key} if key else {})}

    async def _scroll(self, collection_args: dict[str, Any], flt: qm.Filter, *, payload: Any = True,
                      vectors: Any = False, limit: int | None = None) -> list[qm.Record]:
        out: list[qm.Record] = []
        offset = None
        while True:
            page = SCROLL_PAGE if limit is None else min(SCROLL_PAGE, limit - len(out))
            points, offset = await self._call("scroll", **collection_args, scroll_filter=flt, limit=page,
                                              offset=offset, with_payload=payload, with_vectors=vectors)
            out += points
            if offset is None or (limit is not None and len(out) >= limit):
                return out

    async def _tenant_exists(self, tenant_id: str) -> bool:
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.tenant_point(tenant_id)], with_payload=False)
        return bool(got)

    async def _require_tenant(self, tenant_id: str) -> None:
        if not await self._tenant_exists(tenant_id):
            raise NotFound(f"tenant '{tenant_id}' has no knowledge store: nothing has been ingested for it")

    # -- tenants -----------------------------------------------------------------------------

    def list_tenants(self) -> list[str]:
        """Every tenant with data (synchronous, as the embedded store's)."""
        def read(client) -> list[str]:
            points, _ = client.scroll(self._names.term_stats, scroll_filter=qm.Filter(must=[
                qm.FieldCondition(key="kind", match=qm.MatchValue(value="tenant"))]), limit=100_000,
                with_payload=["tenant_id"])
            return sorted(p.payload["tenant_id"] for p in points)
        try:
            return self._q._sync(read, "list tenants")
        except ValueError:          # local mode: the collection does not exist yet
            return []

    # -- term statistics ---------------------------------------------------------------------

    async def _tenant_stats(self, tenant_id: str) -> tuple[int, float]:
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.tenant_point(tenant_id)], with_payload=True)
        if not got:
            return 0, 0.0
        return int(got[0].payload.get("entries", 0)), float(got[0].payload.get("total_len", 0.0))

    async def _buckets(self, tenant_id: str, buckets: Sequence[int]) -> dict[int, dict[str, int]]:
        """The tenant's df buckets (term index -> df, keys as strings), by bucket number."""
        out: dict[int, dict[str, int]] = {}
        unique = sorted(set(buckets))
        for start in range(0, len(unique), SCROLL_PAGE):
            got = await self._call("retrieve", collection_name=self._names.term_stats, with_payload=["bucket", "df"],
                                   ids=[layout.term_bucket_point(tenant_id, b) for b in unique[start:start + SCROLL_PAGE]])
            for p in got:
                out[int(p.payload["bucket"])] = dict(p.payload["df"])
        return out

    async def _dfs(self, tenant_id: str, indices: Sequence[int]) -> dict[int, int]:
        """Document frequencies of these term indices in the tenant (absent: 0)."""
        buckets = await self._buckets(tenant_id, [layout.term_bucket(i) for i in indices])
        out: dict[int, int] = {}
        for i in dict.fromkeys(indices):
            df = buckets.get(layout.term_bucket(i), {}).get(str(i), 0)
            if df:
                out[i] = int(df)
        return out

    async def _put_buckets(self, tenant_id: str, buckets: dict[int, dict[str, int]]) -> None:
        points = [qm.PointStruct(id=layout.term_bucket_point(tenant_id, b), vector={},
                                 payload={"tenant_id": tenant_id, "kind": "terms", "bucket": b, "df": df})
                  for b, df in buckets.items()]
        for start in range(0, len(points), UPSERT_BATCH):
            await self._call("upsert", collection_name=self._names.term_stats,
                             points=points[start:start + UPSERT_BATCH], wait=True)

    async def _apply_stats(self, tenant_id: str, df_delta: dict[int, int], entries_delta: int,
                           len_delta: float) -> None:
        """Add a write's deltas to the tenant's statistics (read-modify-write of the df buckets
        it touches and of the tenant point: see the module docstring on concurrency)."""
        changed = {i: d for i, d in df_delta.items() if d}
        buckets = await self._buckets(tenant_id, [layout.term_bucket(i) for i in changed])
        for i, d in changed.items():
            bucket = buckets.setdefault(layout.term_bucket(i), {})
            df = int(bucket.get(str(i), 0)) + d
            if df > 0:
                bucket[str(i)] = df
            else:
                bucket.pop(str(i), None)
        await self._put_buckets(tenant_id, buckets)
        n, total = await self._tenant_stats(tenant_id)
        await self._put_tenant(tenant_id, max(0, n + entries_delta), max(0.0, total + len_delta))

    async def _put_tenant(self, tenant_id: str, entries: int, total_len: float) -> None:
        await self._call("upsert", collection_name=self._names.term_stats, wait=True, points=[qm.PointStruct(
            id=layout.tenant_point(tenant_id), vector={},
            payload={"tenant_id": tenant_id, "kind": "tenant", "entries": entries, "total_len": total_len})])

    async def recount(self, tenant_id: str) -> None:
        """Recount the tenant's term statistics from its current chunk points (exact)."""
        points = await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id), payload=["dl"],
                                    vectors=[layout.SPARSE])
        df: dict[int, int] = {}
        total = 0.0
        for p in points:
            total += float(p.payload.get("dl", 0))
            for i in _sparse(p).indices:
                df[i] = df.get(i, 0) + 1
        buckets: dict[int, dict[str, int]] = {b: {} for b in range(layout.TERM_BUCKETS)}
        for i, n in df.items():
            buckets[layout.term_bucket(i)][str(i)] = n
        await self._put_buckets(tenant_id, buckets)
        await self._put_tenant(tenant_id, len(points), total)

    async def resaturate(self, tenant_id: str, *, tolerance: float = 0.0) -> int:
        """Rewrite the sparse vectors of the tenant's entries whose avgdl snapshot differs from
        the tenant's current average length by more than `tolerance` (relative), so BM25
        equals the embedded store's exactly (bm25.py). The raw tf is recovered from the stored
        saturated value and the snapshot. Returns the entries rewritten."""
        validation.tenant_id(tenant_id)
        await self._ensure()
        n, total = await self._tenant_stats(tenant_id)
        if not n:
            return 0
        avgdl = total / n
        points = await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id), payload=["dl", "avgdl"],
                                    vectors=[layout.SPARSE])
        updates, changed = [], []
        for p in points:
            old = float(p.payload.get("avgdl") or avgdl)
            if abs(old - avgdl) <= tolerance * avgdl:
                continue
            vector = _sparse(p)
            tf = bm25.unsaturate(vector, int(p.payload.get("dl", 0)), old)
            updates.append(qm.PointVectors(id=p.id, vector={layout.SPARSE: bm25.saturated(
                tf, int(p.payload.get("dl", 0)), avgdl)}))
            changed.append(p.id)
        for start in range(0, len(updates), UPSERT_BATCH):
            await self._call("update_vectors", **self._chunk_args(tenant_id), points=updates[start:start + UPSERT_BATCH],
                             wait=True)
        for start in range(0, len(changed), SCROLL_PAGE):
            await self._call("set_payload", **self._chunk_args(tenant_id), payload={"avgdl": avgdl},
                             points=changed[start:start + SCROLL_PAGE], wait=True)
        return len(updates)

    # -- ingest and delete -------------------------------------------------------------------

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None, *,
                     commit_valid: bool = False) -> IngestReport:
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        docs = list(documents)
        ing = self._ingester
        rejected = ing._check_documents(docs, commit_valid)
        prepared, _, unchunked = await asyncio.to_thread(ing._prepare_all, docs, {r.index for r in rejected},
                                                         commit_valid)
        rejected = tuple(sorted(rejected + unchunked, key=lambda r: r.index))
        if not prepared:
            return IngestReport(results=(), total_entries=0, embed_seconds=0.0, commit_seconds=0.0,
                                rejected=rejected)
        texts = [t for p in prepared for t in p.embed_texts]
        started = time.perf_counter()
        vectors = await ing._embed(texts, progress)
        embed_seconds = time.perf_counter() - started
        started = time.perf_counter()
        await self._ensure()
        results = await self._write(tenant_id, persona_id, prepared, vectors)
        return IngestReport(results=tuple(results), total_entries=len(texts), embed_seconds=embed_seconds,
                            commit_seconds=time.perf_counter() - started, rejected=rejected)

    async def _records(self, tenant_id: str, artifact_ids: Sequence[str]) -> dict[str, dict]:
        got = await self._call("retrieve", collection_name=self._names.artifacts,
                               ids=[layout.artifact_point(tenant_id, a) for a in artifact_ids], with_payload=True)
        return {p.payload["artifact_id"]: p.payload for p in got}

    async def _current_chunks(self, tenant_id: str, artifact_ids: Sequence[str]) -> list[qm.Record]:
        if not artifact_ids:
            return []
        return await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id, None, qm.FieldCondition(
            key="artifact_id", match=qm.MatchAny(any=list(artifact_ids)))), payload=["artifact_id", "dl", "version"],
            vectors=[layout.SPARSE])

    async def _write(self, tenant_id: str, persona_id: str, prepared: list, vectors: np.ndarray) -> list[IngestResult]:
        await self._ensure()
        now = int(time.time())
        artifact_ids = [p.meta.artifact_id for p in prepared]
        records = await self._records(tenant_id, artifact_ids)
        old_chunks = await self._current_chunks(tenant_id, artifact_ids)
        n, total = await self._tenant_stats(tenant_id)
        counted = [(bm25.term_counts(r.fts_title, r.fts_body, self._weights)) for p in prepared for r in p.rows]
        batch_len = sum(dl for _, dl in counted)
        avgdl = (total + batch_len) / (n + len(counted)) if n + len(counted) else 1.0   # snapshot, bm25.py
        versions = {p.meta.artifact_id: _version(persona_id, p) for p in prepared}
        same = {a for a, v in versions.items() if records.get(a, {}).get("version") == v
                and not records[a].get("pending")}
        points: list[qm.PointStruct] = []
        df_delta: dict[int, int] = {}
        entries_delta, len_delta = 0, 0.0
        offset = 0
        for p in prepared:
            a = p.meta.artifact_id
            version = versions[a]
            meta = _meta_payload(p.meta)
            for row, (tf, dl) in zip(p.rows, counted[offset:offset + len(p.rows)]):
                vector = vectors[offset]
                offset += 1
                pid = layout.chunk_id(tenant_id, a, row.chunk_index, version)
                points.append(qm.PointStruct(id=pid, vector={
                    layout.DENSE: vector.tolist(), layout.SPARSE: bm25.saturated(tf, dl, avgdl)}, payload={
                    "tenant_id": tenant_id, "artifact_id": a, "version": version, "current": a in same,
                    "entry_id": f"{a}#{row.chunk_index}", "persona_id": persona_id, "chunk_index": row.chunk_index,
                    "text": row.text, "headline": row.headline, "content_summary": row.content_summary,
                    "timestamp_unix": row.timestamp_unix, "richness": row.richness, "indexed_unix": now,
                    "time": row.timestamp_unix or p.meta.modified_unix or p.meta.created_unix,
                    "row_id": layout.row_id(pid), "dl": dl, "avgdl": avgdl, **meta}))
                if a not in same:
                    for i in tf:
                        df_delta[i] = df_delta.get(i, 0) + 1
                    entries_delta += 1
                    len_delta += dl
        for chunk in old_chunks:
            if chunk.payload["artifact_id"] in same:
                continue
            for i in _sparse(chunk).indices:
                df_delta[i] = df_delta.get(i, 0) - 1
            entries_delta -= 1
            len_delta -= float(chunk.payload.get("dl", 0))
        # 1. the new versions' points, invisible until flipped
        for start in range(0, len(points), UPSERT_BATCH):
            await self._call("upsert", **self._chunk_args(tenant_id), points=points[start:start + UPSERT_BATCH],
                             wait=True)
        # 2. the records: the commit point
        results: list[IngestResult] = []
        record_points = []
        for p in prepared:
            a = p.meta.artifact_id
            old = records.get(a, {})
            record_points.append(qm.PointStruct(id=layout.artifact_point(tenant_id, a), vector={}, payload={
                "tenant_id": tenant_id, **_meta_payload(p.meta), "persona_id": persona_id, "indexed_unix": now,
                "version": versions[a], "entries": len(p.rows), "pending": a not in same,
                "feedback_helpful": old.get("feedback_helpful", 0),
                "feedback_unhelpful": old.get("feedback_unhelpful", 0)}))
            results.append(IngestResult(a, len(p.rows), int(old.get("entries", 0)), p.index))
        await self._call("upsert", collection_name=self._names.artifacts, points=record_points, wait=True)
        changed = [a for a in artifact_ids if a not in same]
        old_ids = [c.id for c in old_chunks if c.payload["artifact_id"] not in same]
        new_ids = [pt.id for pt in points if pt.payload["artifact_id"] not in same]
        await self._flip_ids(tenant_id, old_ids, new_ids)
        await self._apply_stats(tenant_id, df_delta, entries_delta, len_delta)
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
        for a, version in artifacts:
            mine = [qf.tenant(tenant_id), qm.FieldCondition(key="artifact_id", match=qm.MatchValue(value=a))]
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
        await self._call("batch_update_points", collection_name=self._names.artifacts, wait=True,
                         update_operations=[qm.SetPayloadOperation(set_payload=qm.SetPayload(
                             payload={"pending": False}, points=[layout.artifact_point(tenant_id, a)]))
                             for a, _ in artifacts])

    async def _delete_other_versions(self, tenant_id: str, artifacts: list[tuple[str, str]]) -> None:
        key = self._shard(tenant_id)
        ops = [qm.DeleteOperation(delete=qm.FilterSelector(filter=qm.Filter(
            must=[qf.tenant(tenant_id), qm.FieldCondition(key="artifact_id", match=qm.MatchValue(value=a))],
            must_not=[qm.FieldCondition(key="version", match=qm.MatchValue(value=v))]), shard_key=key))
            for a, v in artifacts]
        await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                         wait=True)

    async def recover(self) -> int:
        """Finish every write a killed replica left pending (module docstring); the tenants
        touched get their statistics recounted. Returns the artifacts finished."""
        pending = await self._scroll({"collection_name": self._names.artifacts}, qm.Filter(must=[
            qm.FieldCondition(key="pending", match=qm.MatchValue(value=True))]),
            payload=["tenant_id", "artifact_id", "version"])
        by_tenant: dict[str, list[tuple[str, str]]] = {}
        for p in pending:
            by_tenant.setdefault(p.payload["tenant_id"], []).append((p.payload["artifact_id"], p.payload["version"]))
        for tenant_id, artifacts in by_tenant.items():
            log.warning("finishing %d interrupted artifact writes of tenant %s", len(artifacts), tenant_id)
            await self._flip(tenant_id, artifacts)
            await self._finish(tenant_id, artifacts)
            await self.recount(tenant_id)
        return len(pending)

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        validation.tenant_id(tenant_id)
        unique = validation.artifact_ids(artifact_ids)
        await self._ensure()
        await self._require_tenant(tenant_id)
        records = await self._records(tenant_id, unique)
        chunks = await self._current_chunks(tenant_id, unique)
        df_delta: dict[int, int] = {}
        for chunk in chunks:
            for i in _sparse(chunk).indices:
                df_delta[i] = df_delta.get(i, 0) - 1
        mine = [qf.tenant(tenant_id), qm.FieldCondition(key="artifact_id", match=qm.MatchAny(any=unique))]
        key = self._shard(tenant_id)
        await self._call("set_payload", **self._chunk_args(tenant_id), payload={"current": False},
                         points=qm.Filter(must=mine), wait=True)
        await self._call("delete", collection_name=self._names.artifacts, wait=True,
                         points_selector=qm.PointIdsList(points=[layout.artifact_point(tenant_id, a) for a in unique]))
        await self._call("delete", collection_name=self._names.chunks, wait=True,
                         points_selector=qm.FilterSelector(filter=qm.Filter(must=mine), shard_key=key))
        for collection in (self._names.votes, self._names.feedback):
            await self._call("delete", collection_name=collection, wait=True,
                             points_selector=qm.FilterSelector(filter=qm.Filter(must=mine)))
        await self._apply_stats(tenant_id, df_delta, -len(chunks),
                                -sum(float(c.payload.get("dl", 0)) for c in chunks))
        return len(records), len(chunks)

    # -- searches ----------------------------------------------------------------------------

    async def _feedback(self, tenant_id: str, artifact_ids: set[str]) -> dict[str, tuple[int, int]]:
        if not artifact_ids:
            return {}
        got = await self._call("retrieve", collection_name=self._names.artifacts,
                               ids=[layout.artifact_point(tenant_id, a) for a in artifact_ids],
                               with_payload=["artifact_id", "feedback_helpful", "feedback_unhelpful"])
        return {p.payload["artifact_id"]: (int(p.payload.get("feedback_helpful", 0)),
                                           int(p.payload.get("feedback_unhelpful", 0))) for p in got}

    async def _hits(self, tenant_id: str, scored: list[tuple[qm.ScoredPoint | qm.Record, float]]) -> list[Hit]:
        counts = await self._feedback(tenant_id, {p.payload["artifact_id"] for p, _ in scored})
        hits = []
        for point, score in scored:
            entry, art = _record(point.payload, tenant_id, counts)
            hits.append(Hit(entry=entry, artifact=art, score=float(score), rank=len(hits) + 1))
        return hits

    async def _columns(self, tenant_id: str, scored: list[tuple[Any, float]], top_hits: int) -> CandidateColumns:
        counts = await self._feedback(tenant_id, {p.payload["artifact_id"] for p, _ in scored})
        rows = []
        for point, _ in scored:
            pl = point.payload
            good, bad = counts.get(pl["artifact_id"], (0, 0))
            rows.append((pl["entry_id"], pl["artifact_id"], int(pl.get("time", 0)), float(pl["richness"]),
                         float(pl.get("reputation_prior", 0.0)), good, bad))
        head = scored[:top_hits]
        hits = tuple(await self._hits(tenant_id, head)) if top_hits and head else ()
        return CandidateColumns.from_rows(rows, [s for _, s in scored], hits,
                                          [int(p.payload["row_id"]) for p, _ in scored])

    async def _vector_points(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters,
                             payload: list[str]) -> list[list[tuple[qm.ScoredPoint, float]]]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        queries = validation.query_vectors(query_vectors, self._settings.dimension)
        await self._ensure()
        await self._require_tenant(tenant_id)
        flt = qf.scope(tenant_id, filters)
        key = self._shard(tenant_id)
        requests = [qm.QueryRequest(query=q.tolist(), using=layout.DENSE, filter=flt, limit=top_k,
                                    with_payload=payload, **({"shard_key": key} if key else {}))
                    for q in queries]
        answers = await self._call("query_batch_points", collection_name=self._names.chunks, requests=requests)
        return [_ordered([(p, p.score) for p in a.points]) for a in answers]

    async def search_by_vector(self, tenant_id: str, query_vectors: np.ndarray, top_k: int,
                               filters: SearchFilters) -> list[list[Hit]]:
        per_query = await self._vector_points(tenant_id, query_vectors, top_k, filters, _ENTRY_PAYLOAD)
        return [await self._hits(tenant_id, scored) for scored in per_query]

    async def candidates_by_vector(self, tenant_id: str, query_vectors: np.ndarray, top_k: int,
                                   filters: SearchFilters, *, top_hits: int = 0) -> list[CandidateColumns]:
        validation.top_hits(top_hits)
        payload = _ENTRY_PAYLOAD if top_hits else _COLUMN_PAYLOAD
        per_query = await self._vector_points(tenant_id, query_vectors, top_k, filters, payload)
        return [await self._columns(tenant_id, scored, top_hits) for scored in per_query]

    async def candidates_by_vector_with_completion(
            self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
            keywords: str, extra_keywords: Sequence[str] = (), complete_rows: Sequence[int] = (),
    ) -> tuple[list[CandidateColumns], ScoreCompletion]:
        phrases = _keyword_phrases(keywords, extra_keywords)
        rows = np.unique(np.asarray(list(complete_rows), np.int64))
        if len(rows) > self._settings.max_top_k:
            raise InvalidArgument("complete_row_ids", f"{len(rows)} rows, at most {self._settings.max_top_k} "
                                                      "accepted")
        queries = validation.query_vectors(query_vectors, self._settings.dimension)
        columns = await self.candidates_by_vector(tenant_id, queries, top_k, filters)
        wanted = np.unique(np.concatenate([c.row_ids for c in columns] + [rows])).astype(np.int64)
        query = _KeywordQuery.of(phrases)
        terms = query.terms
        n, _ = await self._tenant_stats(tenant_id)
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in terms]) if terms else {}
        sparse_q = bm25.query_vector(terms, dfs, n)
        phrases_held = await self._phrase_holders(tenant_id, query) if terms else []
        points = []
        if len(wanted):
            points = await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id, filters, qm.FieldCondition(
                key="row_id", match=qm.MatchAny(any=[int(r) for r in wanted]))), payload=["row_id", "dl"],
                vectors=[layout.DENSE, layout.SPARSE])
        by_row = {int(p.payload["row_id"]): p for p in points}
        dense = np.full(len(wanted), np.nan, np.float32)
        scores = np.full(len(wanted), np.nan, np.float32)
        present = [j for j, r in enumerate(wanted.tolist()) if r in by_row]
        if present:                                 # one matrix product, not one per row
            held = [by_row[int(wanted[j])] for j in present]
            stored = np.asarray([p.vector[layout.DENSE] for p in held], np.float32)
            dense[present] = (stored @ queries.T).max(axis=1)
            if terms:
                scores[present] = [bm25.dot(sparse_q, _sparse(p)) + _phrase_score(p, phrases_held) for p in held]
        stats = (KeywordStats(tuple(terms), tuple(dfs.get(layout.term_index(t), 0) for t in terms), n) if terms
                 else KeywordStats(entries=n))
        return columns, ScoreCompletion(row_ids=wanted, dense=dense, bm25=scores, keyword_stats=stats)

    async def _keyword_points(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                              filters: SearchFilters, payload: list[str]
                              ) -> tuple[list[tuple[Any, float]], list[str]]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        phrases = _keyword_phrases(keywords, extra_keywords)
        await self._ensure()
        await self._require_tenant(tenant_id)
        flt = qf.scope(tenant_id, filters)
        if not any(p.strip() for p in phrases):
            return await self._listing(tenant_id, flt, top_k, payload), []
        keyword_query = _KeywordQuery.of(phrases)
        terms = keyword_query.terms
        if not terms:
            return [], terms
        n, _ = await self._tenant_stats(tenant_id)
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in terms])
        query = bm25.query_vector(terms, dfs, n)
        if query is None:
            return [], terms
        held = await self._phrase_holders(tenant_id, keyword_query)
        held_rows = {r for rows in held for r in rows}
        holders = sorted(held_rows)
        answer = await self._call("query_points", **self._chunk_args(tenant_id), query=query, using=layout.SPARSE,
                                  query_filter=flt, limit=top_k + len(holders),
                                  with_payload=list(dict.fromkeys([*payload, "row_id"])))
        scored = [(p, p.score) for p in answer.points if int(p.payload["row_id"]) not in held_rows]
        if holders:
            # An entry holding a quoted phrase is scored here whether or not the sparse query
            # ranked it (the phrase may be all that brings it into the top k), as the embedded
            # index adds a phrase's postings to the terms' (keyword_index.py).
            points = await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id, filters, qm.FieldCondition(
                key="row_id", match=qm.MatchAny(any=holders))),
                payload=list(dict.fromkeys([*payload, "row_id", "dl"])), vectors=[layout.SPARSE])
            scored += [(p, bm25.dot(query, _sparse(p)) + _phrase_score(p, held)) for p in points]
        return _ordered([(p, s) for p, s in scored if s > 0])[:top_k], terms

    async def _phrase_holders(self, tenant_id: str, query: _KeywordQuery) -> list[_PhraseHolders]:
        """Per quoted phrase of the keyword query, the tenant's current entries holding it, as
        the embedded search finds them (search.py `_KeywordQuery.phrase_rids`): those whose text
        has its words in a row (candidates from a full-text match of its words, then checked on
        the text); if none has, those whose analysed title or body has its terms in a row
        (candidates from a sparse query of its terms, at most PHRASE_EXACT_MAX). More than
        PHRASE_EXACT_MAX text-match candidates are kept unchecked, as the embedded search keeps
        its FTS5 answer. Each with its row id -> document length, and the phrase's idf."""
        if not query.phrases:
            return []
        n, total = await self._tenant_stats(tenant_id)
        avgdl = total / n if n and total > 0 else 1.0
        args = self._chunk_args(tenant_id)
        out = []
        for run, text in query.phrases:
            found = await self._scroll(args, qf.scope(tenant_id, None, qm.FieldCondition(
                key="text", match=qm.MatchText(text=text))), payload=["row_id", "dl", "text"],
                limit=PHRASE_EXACT_MAX + 1)
            if len(found) > PHRASE_EXACT_MAX:
                rows = await self._scroll(args, qf.scope(tenant_id, None, qm.FieldCondition(
                    key="text", match=qm.MatchText(text=text))), payload=["row_id", "dl"])
            else:
                rows = [p for p in found if f" {text} " in " " + " ".join(words(p.payload.get("text", ""))) + " "]
            if not rows:
                rows = await self._analysed_run(tenant_id, run)
            held = {int(p.payload["row_id"]): int(p.payload.get("dl", 0)) for p in rows}
            if held and n:
                out.append(_PhraseHolders(held, bm25.idf(n, len(held)), avgdl))
        return out

    async def _analysed_run(self, tenant_id: str, run: tuple[str, ...]) -> list[Any]:
        """The current entries whose analysed title or body holds `run` in a row, among the
        PHRASE_EXACT_MAX best of a sparse query of its terms."""
        indices = sorted({layout.term_index(t) for t in run})
        query = qm.SparseVector(indices=indices, values=[1.0] * len(indices))
        answer = await self._call("query_points", **self._chunk_args(tenant_id), query=query, using=layout.SPARSE,
                                  query_filter=qf.scope(tenant_id), limit=PHRASE_EXACT_MAX,
                                  with_payload=["row_id", "dl", "text", "title", "headline"])
        out = []
        for p in answer.points:
            pl = p.payload
            fields = [analyse(pl.get("text", "")), analyse(pl.get("title") or ""), analyse(pl.get("headline") or "")]
            if any(_has_run(f, run) for f in fields):
                out.append(p)
        return out

    async def _listing(self, tenant_id: str, flt: qm.Filter, k: int, payload: list[str]) -> list[tuple[Any, float]]:
        """Newest first (then most recently indexed, then artifact id and chunk order), score 0:
        the k newest by `time` from Qdrant's ordered scroll, then every point tied with the last
        of them, sorted here exactly as the embedded listing sorts."""
        fields = list(dict.fromkeys([*payload, "time", "indexed_unix", "artifact_id", "chunk_index"]))
        first, _ = await self._call("scroll", **self._chunk_args(tenant_id), scroll_filter=flt, limit=k,
                                    order_by=qm.OrderBy(key="time", direction=qm.Direction.DESC),
                                    with_payload=fields)
        if not first:
            return []
        cut = min(int(p.payload.get("time", 0)) for p in first)
        more = await self._scroll(self._chunk_args(tenant_id), qm.Filter(must=[flt, qm.FieldCondition(
            key="time", range=qm.Range(gte=cut))]), payload=fields)
        more.sort(key=lambda p: (-int(p.payload.get("time", 0)), -int(p.payload.get("indexed_unix", 0)),
                                 p.payload["artifact_id"], int(p.payload["chunk_index"])))
        return [(p, 0.0) for p in more[:k]]

    async def search_by_filters(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                                filters: SearchFilters) -> tuple[list[Hit], list[str]]:
        scored, terms = await self._keyword_points(tenant_id, keywords, extra_keywords, top_k, filters,
                                                   _ENTRY_PAYLOAD)
        return await self._hits(tenant_id, scored), terms

    async def candidates_by_filters(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                                    filters: SearchFilters, *,
                                    top_hits: int = 0) -> tuple[CandidateColumns, list[str]]:
        validation.top_hits(top_hits)
        payload = _ENTRY_PAYLOAD if top_hits else _COLUMN_PAYLOAD
        scored, terms = await self._keyword_points(tenant_id, keywords, extra_keywords, top_k, filters, payload)
        return await self._columns(tenant_id, scored, top_hits), terms

    async def score_keywords(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str]]) -> KeywordScores:
        """BM25 of the keyword phrases for (title, text) pairs the store does not hold, with the
        tenant's term statistics and current average length, and their richness."""
        validation.tenant_id(tenant_id)
        phrases = _keyword_phrases(keywords, extra_keywords)
        validation.external_texts(texts, self._settings.max_top_k)
        await self._ensure()
        await self._require_tenant(tenant_id)
        terms = query_terms(phrases)
        n, total = await self._tenant_stats(tenant_id)
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in terms])
        avgdl = total / n if n and total > 0 else 1.0
        query = bm25.query_vector(terms, dfs, n)
        scores = np.asarray([bm25.score_text(query, " ".join(analyse(title)), " ".join(analyse(text)), self._weights,
                                             avgdl) if n else 0.0 for title, text in texts], np.float32)
        richness = np.asarray([text_richness(text) for _, text in texts], np.float32)
        return KeywordScores(bm25=scores, richness=richness, keyword_stats=KeywordStats(
            tuple(terms), tuple(dfs.get(layout.term_index(t), 0) for t in terms), n))

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str]) -> list[Hit]:
        validation.tenant_id(tenant_id)
        ids = list(entry_ids)
        if len(ids) > self._settings.max_top_k:
            raise InvalidArgument("entry_ids", f"{len(ids)} ids, at most {self._settings.max_top_k} accepted")
        for i, entry_id in enumerate(ids):
            validation.entry_id(entry_id, f"entry_ids[{i}]")
        unique = list(dict.fromkeys(ids))
        await self._ensure()
        await self._require_tenant(tenant_id)
        if not unique:
            return []
        points = await self._scroll(self._chunk_args(tenant_id), qf.scope(tenant_id, None, qm.FieldCondition(
            key="entry_id", match=qm.MatchAny(any=unique))), payload=_ENTRY_PAYLOAD)
        found = {p.payload["entry_id"]: p for p in points}
        return await self._hits(tenant_id, [(found[e], 0.0) for e in unique if e in found])

    # -- stats, index configuration, consistency, health -------------------------------------

    async def stats(self, tenant_id: str) -> TenantStats:
        validation.tenant_id(tenant_id)
        await self._ensure()
        await self._require_tenant(tenant_id)
        entries = (await self._call("count", **self._chunk_args(tenant_id), count_filter=qf.scope(tenant_id),
                                    exact=True)).count
        records = await self._scroll({"collection_name": self._names.artifacts}, qm.Filter(must=[qf.tenant(tenant_id)]),
                                     payload=["source_id", "source_type", "entries", "indexed_unix",
                                              "visibility_groups", "tags"])
        sources: dict[tuple[str, str], list[dict]] = {}
        for r in records:
            sources.setdefault((r.payload.get("source_id", ""), r.payload.get("source_type", "")), []).append(r.payload)
        out = tuple(SourceStats(
            source_id=sid, source_type=stype, artifacts=len(rs), entries=sum(int(r.get("entries", 0)) for r in rs),
            last_indexed_unix=max(int(r.get("indexed_unix", 0)) for r in rs),
            visibility_groups=tuple(sorted({g for r in rs for g in r.get("visibility_groups", [])})),
            tags=tuple(sorted({t for r in rs for t in r.get("tags", [])})))
            for (sid, stype), rs in sorted(sources.items()))
        return TenantStats(tenant_id=tenant_id, artifacts=len(records), entries=entries, vectors=entries,
                           keyword_docs=entries, sources=out,
                           last_indexed_unix=max((int(r.payload.get("indexed_unix", 0)) for r in records), default=0),
                           index_kind=BACKEND, dimension=self._settings.dimension)

    async def verify_integrity(self, tenant_id: str) -> dict[str, int]:
        s = await self.stats(tenant_id)
        return {"records": s.entries, "vectors": s.vectors, "keyword_docs": s.keyword_docs}

    async def configure_index(self, tenant_id: str, kind: str, **_: int) -> tuple[str, int]:
        raise Unimplemented("ConfigureTenantIndex is not served by the qdrant backend: Qdrant chooses and "
                            "builds its own HNSW index (set it on the collection); index kinds are the embedded "
                            "backend's")

    async def check_tenant(self, tenant_id: str, *, repair: bool = True) -> TenantCheck:
        raise Unimplemented("CheckTenant is not served by the qdrant backend: it checks the embedded backend's "
                            "SQLite, FAISS and keyword rows; Qdrant keeps one copy of each point (use "
                            "`nucleus migrate --verify` to compare a tenant with the embedded store)")

    async def settle_repairs(self, timeout_s: float = 30.0) -> None:
        return None

    def status(self) -> StoreStatus:
        base = self.health.status(0)
        return StoreStatus(state=base.state, data_dir=f"qdrant:{self._q.where}", read_only=False,
                           free_bytes=base.free_bytes if not self._q.cluster else -1,
                           total_bytes=base.total_bytes if not self._q.cluster else -1, problems=base.problems,
                           repaired_rows=0, open_tenants=0)

    # -- ranking profiles --------------------------------------------------------------------

    async def _profile_rows(self, tenant_id: str, persona_id: str | None = None) -> list[tuple]:
        must = [qf.tenant(tenant_id)]
        if persona_id is not None:
            must.append(qm.FieldCondition(key="persona_id", match=qm.MatchValue(value=persona_id)))
        points = await self._scroll({"collection_name": self._names.profiles}, qm.Filter(must=must))
        return [tuple(p.payload["row"]) for p in points]

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        validation.profile(profile)
        await self._ensure()
        tenant_id = profile.tenant_id
        rows = await self._profile_rows(tenant_id, profile.persona_id)
        version = 1 + max((r[2] for r in rows if r[1] == profile.name), default=0)
        values = [getattr(profile, f) for f in profile_rows._PROFILE_FIELDS]
        row = (profile.persona_id, profile.name, version, *values, int(profile.is_default), int(time.time()),
               time.time_ns())
        await self._call("upsert", collection_name=self._names.profiles, wait=True, points=[qm.PointStruct(
            id=layout.profile_point(tenant_id, profile.persona_id, profile.name, version), vector={},
            payload={"tenant_id": tenant_id, "persona_id": profile.persona_id, "name": profile.name,
                     "version": version, "row": list(row)})])
        if not await self._tenant_exists(tenant_id):
            await self._put_tenant(tenant_id, 0, 0.0)
        stored = await self.get_profile(tenant_id, profile.persona_id, profile.name, version)
        assert stored is not None
        return stored

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile | None:
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        check_int("version", version, 0, INT32_MAX)
        await self._ensure()
        rows = await self._profile_rows(tenant_id)
        return _profiles_db(rows, lambda conn: profile_rows.get_profile(conn, tenant_id, persona_id, name or "",
                                                                        version))

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        validation.tenant_id(tenant_id)
        validation.persona_id(persona_id)
        await self._ensure()
        rows = await self._profile_rows(tenant_id)
        return _profiles_db(rows, lambda conn: profile_rows.list_profiles(conn, tenant_id, persona_id))

    # -- personas ----------------------------------------------------------------------------

    async def put_persona(self, persona: Persona) -> Persona:
        """Store a persona agent's settings (replacing earlier ones); returns them as stored."""
        persona = replace(personas.check(persona), updated_unix=int(time.time()))
        await self._ensure()
        await self._call("upsert", collection_name=self._names.personas, wait=True, points=[qm.PointStruct(
            id=layout.persona_point(persona.tenant_id, persona.persona_id), vector={},
            payload={"tenant_id": persona.tenant_id, "persona_id": persona.persona_id, "json": persona.to_json()})])
        if not await self._tenant_exists(persona.tenant_id):
            await self._put_tenant(persona.tenant_id, 0, 0.0)
        return persona

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        validation.tenant_id(tenant_id)
        if not persona_id:
            raise InvalidArgument("persona_id", "is required")
        validation.persona_id(persona_id)
        await self._ensure()
        got = await self._call("retrieve", collection_name=self._names.personas,
                               ids=[layout.persona_point(tenant_id, persona_id)], with_payload=True)
        if not got:
            raise NotFound(f"persona '{persona_id}' does not exist for tenant '{tenant_id}'")
        return Persona.from_json(tenant_id, got[0].payload["json"])

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        validation.tenant_id(tenant_id)
        await self._ensure()
        points = await self._scroll({"collection_name": self._names.personas}, qm.Filter(must=[qf.tenant(tenant_id)]))
        return sorted((Persona.from_json(tenant_id, p.payload["json"]) for p in points), key=lambda p: p.persona_id)

    # -- topics ------------------------------------------------------------------------------

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, **params) -> dict:
        raise Unimplemented("GetTopics is not served by the qdrant backend yet: topics are clustered from the "
                            "embedded backend's in-memory vectors (topics.py)")

    # -- feedback ----------------------------------------------------------------------------

    async def record_feedback(self, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                              helpful: bool, user_id: str, *, comment: str = "") -> FeedbackAck:
        validation.tenant_id(tenant_id)
        validation.feedback(target, target_id, user_id, comment)
        await self._ensure()
        await self._require_tenant(tenant_id)
        artifact_id = target_id if target == "artifact" else target_id.rsplit("#", 1)[0]
        record = (await self._records(tenant_id, [artifact_id])).get(artifact_id)
        if record is not None and target == "entry":
            found = await self._call("count", **self._chunk_args(tenant_id), exact=True, count_filter=qf.scope(
                tenant_id, None, qm.FieldCondition(key="entry_id", match=qm.MatchValue(value=target_id))))
            record = record if found.count else None
        if record is None:
            raise NotFound(f"{target} '{target_id}' not found in tenant '{tenant_id}'")
        now = int(time.time())
        vote = {"tenant_id": tenant_id, "artifact_id": artifact_id, "user_id": user_id, "helpful": bool(helpful),
                "target": target, "target_id": target_id, "updated_unix": now}
        await self._call("upsert", collection_name=self._names.votes, wait=True, points=[qm.PointStruct(
            id=layout.vote_point(tenant_id, artifact_id, user_id), vector={}, payload=vote)])
        await self._call("upsert", collection_name=self._names.feedback, wait=True, points=[qm.PointStruct(
            id=layout.point_id("feedback", tenant_id, artifact_id, user_id, time.time_ns()), vector={},
            payload={**vote, "comment": comment, "created_unix": now})])
        counts = []
        for value in (True, False):
            counts.append((await self._call("count", collection_name=self._names.votes, exact=True,
                                            count_filter=qm.Filter(must=[
                                                qf.tenant(tenant_id),
                                                qm.FieldCondition(key="artifact_id", match=qm.MatchValue(value=artifact_id)),
                                                qm.FieldCondition(key="helpful", match=qm.MatchValue(value=value))]))).count)
        await self._call("set_payload", collection_name=self._names.artifacts, wait=True,
                         payload={"feedback_helpful": counts[0], "feedback_unhelpful": counts[1]},
                         points=[layout.artifact_point(tenant_id, artifact_id)])
        return FeedbackAck(artifact_id, counts[0], counts[1], float(record.get("reputation_prior", 0.0)))

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._q.close()


# -- helpers ---------------------------------------------------------------------------------

def _sparse(point: Any) -> qm.SparseVector:
    vector = point.vector or {}
    got = vector.get(layout.SPARSE) if isinstance(vector, dict) else None
    return got if got is not None else qm.SparseVector(indices=[], values=[])


class _PhraseHolders(dict):
    """The entries holding one quoted phrase (row id -> document length), with its idf and the
    tenant's average length: the phrase counts as one more BM25 term with tf 1 in each."""

    def __init__(self, held: dict[int, int], idf: float, avgdl: float) -> None:
        super().__init__(held)
        self.idf, self.avgdl = idf, avgdl


def _phrase_score(point: Any, held: Sequence[_PhraseHolders]) -> float:
    """The quoted phrases' BM25 contribution to one entry (keyword_index.py: tf 1, the phrase's
    idf, the entry's length against the tenant's current average)."""
    row = int(point.payload["row_id"])
    total = 0.0
    for rows in held:
        if row in rows:
            norm = K1 * (1.0 - B + B * (rows[row] / rows.avgdl))
            total += rows.idf * (K1 + 1.0) / (1.0 + norm)
    return total


def _has_run(terms: list[str], run: tuple[str, ...]) -> bool:
    k = len(run)
    return any(tuple(terms[i:i + k]) == run for i in range(len(terms) - k + 1))


def _ordered(scored: list[tuple[Any, float]]) -> list[tuple[Any, float]]:
    """Best first; equal scores in row-id order (deterministic across replicas and runs)."""
    return sorted(scored, key=lambda x: (-x[1], int(x[0].payload.get("row_id", 0)) if x[0].payload else 0))


def _meta_payload(meta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ARTIFACT_FIELDS:
        value = getattr(meta, name)
        out[name] = list(value) if isinstance(value, tuple) else value
    out["public"] = not meta.visibility_groups
    return out


def _version(persona_id: str, prepared) -> str:
    """The version of an artifact's content: a hash of everything its points hold, so the same
    document ingested again (a retry) maps to the same points."""
    h = hashlib.sha256(json.dumps([persona_id, _meta_payload(prepared.meta)], sort_keys=True).encode())
    for row in prepared.rows:
        h.update(json.dumps([row.chunk_index, row.text, row.headline, row.timestamp_unix, row.fts_title]).encode())
    return h.hexdigest()[:20]


def _record(pl: dict, tenant_id: str, counts: dict[str, tuple[int, int]]) -> tuple[Entry, ArtifactSummary]:
    good, bad = counts.get(pl["artifact_id"], (0, 0))
    meta = {name: (tuple(pl.get(name, ())) if name in _LIST_FIELDS else pl.get(name)) for name in ARTIFACT_FIELDS}
    meta["reputation_prior"] = float(meta["reputation_prior"] or 0.0)
    art = ArtifactSummary(**meta, feedback_helpful=good, feedback_unhelpful=bad)
    entry = Entry(id=pl["entry_id"], tenant_id=tenant_id, persona_id=pl.get("persona_id", ""),
                  artifact_id=pl["artifact_id"], chunk_index=int(pl["chunk_index"]), text=pl["text"],
                  headline=pl["headline"], content_summary=pl["content_summary"],
                  timestamp_unix=int(pl["timestamp_unix"]), richness=float(pl["richness"]))
    return entry, art


def _profiles_db(rows: list[tuple], read: Callable[[Any], Any]) -> Any:
    """Run one of storage.ranking_inputs' profile reads over `rows` (the tenant's stored profile
    rows): the version and default rules stay in one place for both backends."""
    conn = sqlite3.connect(":memory:")
    try:
        cols = ", ".join(profile_rows._PROFILE_FIELDS)
        conn.execute(f"CREATE TABLE profiles(persona_id TEXT, name TEXT, version INTEGER, {cols}, is_default INTEGER, "
                     f"updated_unix INTEGER, seq INTEGER)")
        width = 6 + len(profile_rows._PROFILE_FIELDS)
        conn.executemany(f"INSERT INTO profiles VALUES ({', '.join('?' * width)})", rows)
        return read(conn)
    finally:
        conn.close()
