"""The keyword statistics of a tenant on Qdrant: what BM25 needs besides the entries' sparse
vectors (bm25.py) — the document frequency of every term (in TERM_BUCKETS buckets of term
index -> df, layout.py) and the tenant's entry count, total length and total title length
(`title_len`, the per-field averages of GetFieldSignals; a tenant point written before it has
none until `recount`, which `field_statistics` runs once then: chunk points written before carry
no `tl`, theirs is derived from the stored entry as ingest derived it).

Eventually consistent: the statistics are read-modify-write deltas (`_apply_stats`); two
replicas writing the same tenant at the same instant can lose one delta, so scores drift
slightly until `recount` (or `check_tenant(repair=True)`) counts them again from the points.
`resaturate` rewrites the sparse vectors whose average-length snapshot went stale.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence

from qdrant_client import models as qm

from services.knowledge_store import validation
from services.knowledge_store.preparation import derived_rows
from services.knowledge_store.qdrant import bm25, layout
from services.knowledge_store.qdrant.base import SCROLL_PAGE, UPSERT_BATCH, QdrantBase, sparse_of


class TermStatistics(QdrantBase):
    """A tenant's term statistics: read, changed by a write's deltas, recounted."""

    async def _tenant_stats(self, tenant_id: str) -> tuple[int, float]:
        n, total, _ = await self._tenant_totals(tenant_id)
        return n, total

    async def _tenant_totals(self, tenant_id: str) -> tuple[int, float, float | None]:
        """(entries, total length, total title length: None on a point written before it)."""
        t = await self._tenant(tenant_id)
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.tenant_point(t.key)], with_payload=True)
        if not got:
            return 0, 0.0, 0.0
        title = got[0].payload.get("title_len")
        return (int(got[0].payload.get("entries", 0)), float(got[0].payload.get("total_len", 0.0)),
                None if title is None else float(title))

    async def field_statistics(self, tenant_id: str, terms: Sequence[str]
                               ) -> tuple[int, list[int], tuple[float, float, float]]:
        """(live entries N, document frequency of each term, mean analysed (title, body, doc)
        length): GetFieldSignals' statistics (a tenant without title totals is recounted first)."""
        validation.tenant_id(tenant_id)
        await self._ensure()
        n, total, title = await self._tenant_totals(tenant_id)
        if title is None:
            await self.recount(tenant_id)
            n, total, title = await self._tenant_totals(tenant_id)
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in terms])
        counts = [dfs.get(layout.term_index(t), 0) for t in terms]
        if not n:
            return 0, counts, (0.0, 0.0, 0.0)
        doc, title_avg = total / n, (title or 0.0) / n
        return n, counts, (title_avg, max(doc - title_avg, 0.0), doc)

    async def _buckets(self, tenant_id: str, buckets: Sequence[int]) -> dict[int, dict[str, int]]:
        """The tenant's df buckets (term index -> df, keys as strings), by bucket number."""
        out: dict[int, dict[str, int]] = {}
        unique = sorted(set(buckets))
        t = await self._tenant(tenant_id)
        for start in range(0, len(unique), SCROLL_PAGE):
            page = unique[start:start + SCROLL_PAGE]
            got = await self._call("retrieve", collection_name=self._names.term_stats, with_payload=["bucket", "df"],
                                   ids=[layout.term_bucket_point(t.key, b) for b in page])
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
        t = await self._tenant(tenant_id)
        points = [qm.PointStruct(id=layout.term_bucket_point(t.key, b), vector={},
                                 payload={"tenant_id": tenant_id, "kind": "terms", "bucket": b, "df": df})
                  for b, df in buckets.items()]
        for start in range(0, len(points), UPSERT_BATCH):
            await self._call("upsert", collection_name=self._names.term_stats,
                             points=points[start:start + UPSERT_BATCH], wait=True)

    async def _apply_stats(self, tenant_id: str, df_delta: dict[int, int], entries_delta: int,
                           len_delta: float, title_delta: float = 0.0) -> None:
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
        n, total, title = await self._tenant_totals(tenant_id)
        await self._put_tenant(tenant_id, max(0, n + entries_delta), max(0.0, total + len_delta),
                               None if title is None else max(0.0, title + title_delta))

    async def _put_tenant(self, tenant_id: str, entries: int, total_len: float,
                          title_len: float | None = 0.0) -> None:
        """The tenant point; `title_len` None: unknown (points from before it), left out. Every
        write of the point gives the tenant a new write generation (topics.py caches by it)."""
        payload = {"tenant_id": tenant_id, "kind": "tenant", "entries": entries, "total_len": total_len,
                   "generation": uuid.uuid4().hex}
        if title_len is not None:
            payload["title_len"] = title_len
        t = await self._tenant(tenant_id)
        await self._call("upsert", collection_name=self._names.term_stats, wait=True, points=[qm.PointStruct(
            id=layout.tenant_point(t.key), vector={}, payload=payload)])

    async def recount(self, tenant_id: str) -> None:
        """Recount the tenant's term statistics from its current chunk points (exact)."""
        t = await self._tenant(tenant_id)
        points = await self._scroll(self._chunk_args(tenant_id), t.scope(), payload=["dl", "tl"],
                                    vectors=[layout.SPARSE])
        df: dict[int, int] = {}
        total = title = 0.0
        for p in points:
            total += float(p.payload.get("dl", 0))
            title += float(p.payload.get("tl", 0))
            for i in sparse_of(p).indices:
                df[i] = df.get(i, 0) + 1
        title += await self._title_lengths([p.id for p in points if "tl" not in p.payload], tenant_id)
        buckets: dict[int, dict[str, int]] = {b: {} for b in range(layout.TERM_BUCKETS)}
        for i, n in df.items():
            buckets[layout.term_bucket(i)][str(i)] = n
        await self._put_buckets(tenant_id, buckets)
        await self._put_tenant(tenant_id, len(points), total, title)

    async def _title_lengths(self, ids: list, tenant_id: str) -> float:
        """Σ analysed title terms of chunk points written before `tl`: derived from the stored
        entry (preparation.derived_rows, as ingest derived them) and set on each point."""
        total = 0.0
        for start in range(0, len(ids), SCROLL_PAGE):
            page = await self._call("retrieve", **self._chunk_args(tenant_id), ids=ids[start:start + SCROLL_PAGE],
                                    with_payload=["title", "headline", "text"])
            ops = []
            for p in page:
                tl = len(derived_rows(p.payload.get("title", ""), p.payload.get("headline", ""),
                                      p.payload.get("text", ""))[0].split())
                total += tl
                ops.append(qm.SetPayloadOperation(set_payload=qm.SetPayload(
                    payload={"tl": tl}, points=[p.id], shard_key=self._shard(tenant_id))))
            if ops:
                await self._call("batch_update_points", collection_name=self._names.chunks, update_operations=ops,
                                 wait=True)
        return total

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
        t = await self._tenant(tenant_id)
        points = await self._scroll(self._chunk_args(tenant_id), t.scope(), payload=["dl", "avgdl"],
                                    vectors=[layout.SPARSE])
        updates, changed = [], []
        for p in points:
            old = float(p.payload.get("avgdl") or avgdl)
            if abs(old - avgdl) <= tolerance * avgdl:
                continue
            vector = sparse_of(p)
            tf = bm25.unsaturate(vector, int(p.payload.get("dl", 0)), old)
            updates.append(qm.PointVectors(id=p.id, vector={layout.SPARSE: bm25.saturated(
                tf, int(p.payload.get("dl", 0)), avgdl)}))
            changed.append(p.id)
        for start in range(0, len(updates), UPSERT_BATCH):
            await self._call("update_vectors", **self._chunk_args(tenant_id),
                             points=updates[start:start + UPSERT_BATCH], wait=True)
        for start in range(0, len(changed), SCROLL_PAGE):
            await self._call("set_payload", **self._chunk_args(tenant_id), payload={"avgdl": avgdl},
                             points=changed[start:start + SCROLL_PAGE], wait=True)
        return len(updates)
