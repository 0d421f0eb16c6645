"""The qdrant backend's primitives of the tenant archive (../archive.py).

    listing    (artifact id, its current entry ids) after an artifact id, in id order (the
               tenant's records are scrolled and sorted: Qdrant has no range on keywords)
    put        prepared artifacts with their stored vectors through the ingest's own write path
               (writes.py `_write`: points, commit record, flip), then their feedback counters
    stage      an import writes a new generation of the tenant (layout.py, filters.Tenant): a
               view of the store pinned to it (`store` of the stage) writes every point there,
               unseen by readers, who read the generation the tenant's generation record names.
               The record first claims the new generation (`staged`); on commit one upsert of
               the record switches it (`serving` = new, `retired` = old), this process forgets
               its cached generation at once (other replicas within GENERATION_TTL_S), and after
               SWITCH_GRACE_S the old generation's points are deleted. A failure deletes the new
               generation's points; a kill -9 leaves them invisible, named by `staged` (or the
               old ones by `retired`), deleted by the next import of the tenant and when a
               local-mode store opens (`drop_unserved`). A tenant holding data (documents,
               profiles or personas) is replaced only with `replace`. Writes to the tenant while
               it is imported go to the generation served, and are gone with it at the switch.
               One import of a tenant at a time: a second one deletes the first one's generation
    user data  the per-user votes, the search log and the votes on federated sources (the
               `votes`, `searches` and `source_votes` collections) as archive records in key
               order (searches by time, then id: as the embedded backend), and written back
               as the same points their writes make, in the import's generation. The vote log
               (`feedback` collection) holds both the votes on documents and, in each point's
               `search_id`, the search a vote named: the search votes are derived from it as the
               embedded store keeps them (the latest per search, target and user, of a search
               still logged), the log's records from its document votes (../archive_file.py
               `vote_log`). Written back: each vote of the log a point with its search id; a
               search vote no vote of the log carries (a vote on a federated source, or on a
               document deleted since) a point of target "search" of its own. So a source
               vote's log point comes back without its `source_id` (its current vote is a
               `source_vote` record)
    fingerprint  the tenant's embedding model fingerprint (../fingerprints.py): a point of its
               own in the term statistics collection, per generation (the tenant point is
               rewritten whole by every write)
"""
from __future__ import annotations

import asyncio
import copy
import logging
import time
import uuid
from collections.abc import Sequence

import numpy as np
from qdrant_client import models as qm

from services.knowledge_store.archive_file import vote_log
from services.knowledge_store.qdrant import layout
from services.knowledge_store.qdrant.base import GENERATION_TTL_S, UPSERT_BATCH, QdrantBase
from services.knowledge_store.qdrant.filters import Tenant
from shared.errors import FailedPrecondition

log = logging.getLogger(__name__)
# a vote of the log as a point's payload holds it (store.py `record_feedback`), search id last
_LOG_FIELDS = ("artifact_id", "target", "target_id", "user_id", "helpful", "comment", "created_unix", "search_id")
_VOTE_KEY = ("search_id", "target_id", "user_id", "helpful", "created_unix")       # a search vote
#: After a switch, how long the replaced generation stays: requests already reading it finish, and
#: (on a cluster) other replicas, which read the generation at most GENERATION_TTL_S old, move over.
SWITCH_GRACE_S = GENERATION_TTL_S + 2.0
LOCAL_SWITCH_GRACE_S = 0.2      # local mode: one process, whose own reads move over at the switch


class Archiving(QdrantBase):
    """Mixed into QdrantKnowledgeStore (store.py)."""

    async def archive_listing(self, tenant_id: str, after: str, limit: int) -> list[tuple[str, list[str]]]:
        await self._ensure()
        records = await self._scroll({"collection_name": self._names.artifacts},
                                     await self._all(tenant_id), payload=["artifact_id"])
        ids = sorted(a for a in (r.payload["artifact_id"] for r in records) if a > after)[:limit]
        if not ids:
            return []
        out: dict[str, list[tuple[int, str]]] = {a: [] for a in ids}
        for p in await self._scroll(self._chunk_args(tenant_id), await self._scope(tenant_id, None, qm.FieldCondition(
                key="artifact_id", match=qm.MatchAny(any=ids))), payload=["artifact_id", "entry_id", "chunk_index"]):
            out[p.payload["artifact_id"]].append((p.payload["chunk_index"], p.payload["entry_id"]))
        return [(a, [e for _, e in sorted(entries)]) for a, entries in out.items()]

    async def put_archived(self, tenant_id: str, items: Sequence[tuple]) -> None:
        await self._ensure()
        by_persona: dict[str, list[tuple]] = {}
        for item in items:
            by_persona.setdefault(item[0], []).append(item)
        for persona, group in by_persona.items():
            await self._write(tenant_id, persona, [p for _, p, _, _, _ in group],
                              np.concatenate([v for _, _, v, _, _ in group]), [t for _, _, _, t, _ in group])
        t = await self._tenant(tenant_id)
        for _, p, _, _, (helpful, unhelpful) in items:
            if helpful or unhelpful:
                await self._call("set_payload", collection_name=self._names.artifacts, wait=True,
                                 payload={"feedback_helpful": helpful, "feedback_unhelpful": unhelpful},
                                 points=[layout.artifact_point(t.key, p.meta.artifact_id)])

    async def user_data(self, tenant_id: str, kind: str) -> list[dict]:
        await self._ensure()
        if kind in ("feedback", "search_vote"):
            return await self._vote_log(tenant_id, kind)
        collection, fields, key, _ = self._user_kind(kind)
        points = await self._scroll({"collection_name": collection}, await self._all(tenant_id))
        out = [{"kind": kind, **{f: p.payload.get(f) for f in fields}} for p in points]
        for r in out:
            if "helpful" in r:
                r["helpful"] = bool(r["helpful"])
        # searches by time (their write order), then id; votes by key
        return sorted(out, key=lambda r: (r.get("created_unix", 0), *(r[k] for k in key)))

    async def _vote_log(self, tenant_id: str, kind: str) -> list[dict]:
        """The vote log's records or the search votes (module docstring)."""
        flt = await self._all(tenant_id)
        logged = {p.payload["search_id"] for p in await self._scroll({"collection_name": self._names.searches}, flt,
                                                                     payload=["search_id"])}
        points = [p.payload for p in await self._scroll({"collection_name": self._names.feedback}, flt)]
        latest: dict[tuple, dict] = {}
        for p in points:
            if p.get("search_id") in logged:
                v = {"kind": "search_vote", "search_id": p["search_id"], "target_id": p["target_id"],
                     "user_id": p["user_id"], "helpful": bool(p["helpful"]), "created_unix": p["created_unix"]}
                k = (v["search_id"], v["target_id"], v["user_id"])
                if k not in latest or (v["created_unix"], v["helpful"]) > (latest[k]["created_unix"],
                                                                            latest[k]["helpful"]):
                    latest[k] = v
        if kind == "search_vote":
            return [latest[k] for k in sorted(latest)]
        fields = _LOG_FIELDS[:-1]
        return vote_log(({f: p[f] for f in fields} for p in points if p.get("target") in ("entry", "artifact")),
                        latest.values())

    async def put_user_data(self, tenant_id: str, kind: str, records: Sequence[dict]) -> None:
        await self._ensure()
        if kind in ("feedback", "search_vote"):
            await self._put_vote_log(tenant_id, kind, records)
            return
        collection, fields, key, point = self._user_kind(kind)
        t = await self._tenant(tenant_id)
        await self._call("upsert", collection_name=collection, wait=True, points=[qm.PointStruct(
            id=point(t.key, *(r[k] for k in key)), vector={},
            payload={"tenant_id": tenant_id, **{f: r[f] for f in fields}}) for r in records])

    async def _put_vote_log(self, tenant_id: str, kind: str, records: Sequence[dict]) -> None:
        t = await self._tenant(tenant_id)
        if kind == "search_vote":               # those a vote of the log carries are there already
            carried = await self._scroll({"collection_name": self._names.feedback}, await self._all(
                tenant_id, qm.FieldCondition(key="search_id", match=qm.MatchAny(any=sorted(
                    {r["search_id"] for r in records})))), payload=list(_LOG_FIELDS))
            have = {tuple(p.payload.get(f) for f in _VOTE_KEY) for p in carried}
            records = [{**r, "artifact_id": None, "target": "search", "comment": ""} for r in records
                       if tuple(r[f] for f in _VOTE_KEY) not in have]
        for start in range(0, len(records), UPSERT_BATCH):
            await self._call("upsert", collection_name=self._names.feedback, wait=True, points=[qm.PointStruct(
                id=layout.point_id("feedback", t.key, r["artifact_id"] or r["target_id"], r["user_id"],
                                   uuid.uuid4().hex), vector={},
                payload={"tenant_id": tenant_id, **{f: r[f] for f in _LOG_FIELDS if r[f] is not None},
                         "updated_unix": r["created_unix"]}) for r in records[start:start + UPSERT_BATCH]])

    def _user_kind(self, kind: str) -> tuple:
        """(collection, payload fields, key fields, point id of the key) of a user data kind."""
        return {"vote": (self._names.votes, ("artifact_id", "user_id", "helpful", "target", "target_id",
                                             "updated_unix"), ("artifact_id", "user_id"), layout.vote_point),
                "search": (self._names.searches, ("search_id", "user_id", "created_unix", "query_sha256", "items"),
                           ("search_id",), layout.search_point),
                "source_vote": (self._names.source_votes, ("source_id", "user_id", "helpful", "target_id",
                                                           "updated_unix"), ("source_id", "user_id"),
                                layout.source_vote_point)}[kind]

    async def import_stage(self, tenant_id: str, replace: bool) -> _Stage:
        """A view of this store pinned to a new generation of the tenant (module docstring)."""
        await self._ensure()
        record = await self._generation_record(tenant_id)
        serving = int(record.get("serving") or 0)
        if not replace:
            mine = Tenant(tenant_id, serving).all()
            for collection in (self._names.artifacts, self._names.profiles, self._names.personas):
                got, _ = await self._call("scroll", collection_name=collection, limit=1, with_payload=False,
                                          scroll_filter=mine)
                if got:
                    raise FailedPrecondition(f"tenant '{tenant_id}' already holds data: import it with --replace to "
                                             "replace it (its documents, profiles and personas), or import "
                                             "--as-tenant another tenant")
        await self._drop_leftovers(tenant_id, record)
        staged = serving + 1
        await self._put_generation(tenant_id, serving, staged=staged)      # claimed: found again after a kill
        view = copy.copy(self)
        view._pinned = {tenant_id: staged}
        return _Stage(self, view, tenant_id, serving, staged)

    async def _generation_record(self, tenant_id: str) -> dict:
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.generation_point(tenant_id)], with_payload=True)
        return dict(got[0].payload) if got else {}

    async def _put_generation(self, tenant_id: str, serving: int, *, staged: int | None = None,
                              retired: int | None = None) -> None:
        """The tenant's generation record: one upsert (no `tenant_id`: no tenant filter matches it)."""
        await self._call("upsert", collection_name=self._names.term_stats, wait=True, points=[qm.PointStruct(
            id=layout.generation_point(tenant_id), vector={}, payload={
                "kind": "generation", "tenant": tenant_id, "serving": serving, "staged": staged,
                "retired": retired})])

    async def _drop(self, tenant_id: str, gen: int) -> None:
        """Every point of one generation of the tenant deleted."""
        mine = Tenant(tenant_id, gen).all()
        await self._call("delete", collection_name=self._names.chunks, wait=True, points_selector=qm.FilterSelector(
            filter=mine, shard_key=self._shard(tenant_id)))
        for collection in self._names.payload_only():
            await self._call("delete", collection_name=collection, wait=True,
                             points_selector=qm.FilterSelector(filter=mine))

    async def _drop_leftovers(self, tenant_id: str, record: dict) -> int:
        """The generations a killed import left (`staged`: written part-way; `retired`: replaced,
        not yet deleted) deleted; the record then names the generation served only."""
        serving = int(record.get("serving") or 0)
        gone = {int(g) for g in (record.get("staged"), record.get("retired")) if g is not None} - {serving}
        for gen in sorted(gone):
            log.info("tenant %s: generation %d deleted (replaced, or written part-way)", tenant_id, gen)
            await self._drop(tenant_id, gen)
        if gone:
            await self._put_generation(tenant_id, serving)
        return len(gone)

    async def drop_unserved(self, tenant_id: str | None = None) -> int:
        """The leftovers of killed imports deleted (of every tenant: None); run when a local-mode
        store opens (no import of another process can be running) and by every import."""
        if tenant_id is not None:
            return await self._drop_leftovers(tenant_id, await self._generation_record(tenant_id))
        records = await self._scroll({"collection_name": self._names.term_stats}, qm.Filter(must=[
            qm.FieldCondition(key="kind", match=qm.MatchValue(value="generation"))]))
        return sum([await self._drop_leftovers(r.payload["tenant"], r.payload) for r in records])

    async def tenant_fingerprint(self, tenant_id: str) -> str:
        await self._ensure()
        t = await self._tenant(tenant_id)
        got = await self._call("retrieve", collection_name=self._names.term_stats,
                               ids=[layout.point_id("fingerprint", t.key)], with_payload=["fingerprint"])
        return str(got[0].payload.get("fingerprint", "")) if got else ""

    async def set_tenant_fingerprint(self, tenant_id: str, fingerprint: str) -> None:
        await self._ensure()
        t = await self._tenant(tenant_id)
        await self._call("upsert", collection_name=self._names.term_stats, wait=True, points=[qm.PointStruct(
            id=layout.point_id("fingerprint", t.key), vector={},
            payload={"tenant_id": tenant_id, "kind": "fingerprint", "fingerprint": fingerprint})])


class _Stage:
    """An import's generation: written through `store` (pinned to it), then switched in."""

    def __init__(self, owner: Archiving, view: Archiving, tenant_id: str, serving: int, staged: int) -> None:
        self.store, self._owner, self._tenant_id = view, owner, tenant_id
        self._serving, self._staged = serving, staged
        self._switched = False

    async def commit(self) -> None:
        await self.store.resaturate(self._tenant_id)       # the sparse vectors with the final average length
        owner, tenant_id = self._owner, self._tenant_id
        await owner._put_generation(tenant_id, self._staged, retired=self._serving)     # the switch: one write
        owner._serving[tenant_id] = (time.monotonic() + GENERATION_TTL_S, self._staged)   # read here from now on
        self._switched = True
        try:
            await asyncio.sleep(SWITCH_GRACE_S if owner._q.cluster else LOCAL_SWITCH_GRACE_S)
            await owner._drop_leftovers(tenant_id, await owner._generation_record(tenant_id))
        except Exception as err:      # switched already: the next import (or open) deletes the old one
            log.warning("tenant %s: imported, but its generation %d is not deleted yet: %s", tenant_id,
                        self._serving, err)

    async def abort(self) -> None:
        """The new generation's points deleted; the tenant is as it was."""
        if self._switched:                     # the import stands
            return
        try:
            await self._owner._drop_leftovers(self._tenant_id,
                                              await self._owner._generation_record(self._tenant_id))
        except Exception as err:      # the failure that aborted the import is the one to answer
            log.warning("tenant %s: the import's generation %d is left for its next import: %s", self._tenant_id,
                        self._staged, err)
