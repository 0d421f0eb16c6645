"""Feedback that can be trusted and learned from: search ids, the votes checked against them,
and votes on federated sources feeding their results' Reputation.

    SearchLog       every answer with results gets a `search_id` (random, 144 bits,
                    `secrets.token_urlsafe`); what it returned (entry and artifact ids, ranks),
                    to whom (the verified user), when and the query's SHA-256 are logged in the
                    KnowledgeStore (durable, bounded, per tenant: services/knowledge_store/
                    search_log.py). The write runs beside the answer, not before it; a vote
                    naming a search still being logged by this replica waits for it.
    Votes           a vote counts only from a verified user (authentication on: the caller's
                    user; an operator names the user; authentication off: the request's
                    user_id, a trusted network); a caller without a user is refused. One vote per
                    user per document (the artifact: votes on its entries count as that one
                    vote), a second replacing only that user's own — so one user moves a
                    document's reputation by at most one vote. A `search_id` makes the store check
                    the vote against the log (same tenant, same user, the item among the results).
    source votes    a vote on a federated result (`<source>:<remote id>`, the source visible to
                    the caller) counts on the source: one current vote per user per source and
                    tenant. The source's helpful / unhelpful users smooth its prior (the sources
                    file's `reputation`) exactly as an artifact's votes smooth its prior
                    (ranking/rank.py `reputation`, the profile's prior strength); `SourceVoteCache`
                    hands the counts to the federated part of each search (federation/unify.py).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from dataclasses import replace
from typing import Any, Callable, Protocol

import numpy as np

from ranking.inputs import DEFAULT_REPUTATION
from ranking.rank import reputation as reputation_factor
from ranking.profile import RankingProfile
from services.rag_pipeline import permissions
from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.models import SearchRequest, SearchResponse
from services.rag_pipeline.ports import KnowledgeSource
from shared.errors import InvalidArgument, NotFound, NucleusError, PermissionDenied
from shared.identity import Principal, acting_for
from shared.records import FeedbackAck, SearchLogItem, SearchLogRecord, SourceVotes


class Pipeline(Protocol):
    """What a vote needs of the RagPipeline (core.py), which delegates its votes here."""
    knowledge: KnowledgeSource
    access: AccessPolicy
    federation: Any
    search_log: SearchLog
    source_votes: SourceVoteCache

    def tenant_for(self, requested: str, principal: Principal | None) -> str: ...

    async def resolve_profile(self, tenant_id: str, persona_id: str, name: str) -> RankingProfile: ...

log = logging.getLogger(__name__)

SOURCE_VOTES_TTL_S = 5.0          # a replica's cache of a tenant's source votes (its own votes clear it)
SEARCH_ID_BYTES = 18              # 144 random bits, 24 URL-safe characters


class SearchLog:
    """Search ids, and the log of what each search returned (module docstring)."""

    def __init__(self, knowledge: KnowledgeSource, clock: Callable[[], float] = time.time) -> None:
        self._ks = knowledge
        self._clock = clock
        self._pending: dict[str, asyncio.Task[None]] = {}

    def record(self, response: SearchResponse, request: SearchRequest, principal: Principal | None,
               tenant_id: str) -> SearchResponse:
        """`response` with a new search id, its log entry being written; unchanged when it has
        no result or its caller has no user (a vote needs one)."""
        if not response.results or (principal is not None and not principal.user_id):
            return response
        sid = secrets.token_urlsafe(SEARCH_ID_BYTES)
        entry = SearchLogRecord(
            tenant_id=tenant_id, search_id=sid, user_id=principal.user_id if principal is not None else "",
            created_unix=int(self._clock()), query_sha256=hashlib.sha256(request.query.encode()).hexdigest(),
            items=tuple(SearchLogItem(r.entry.id, r.artifact.artifact_id, rank)
                        for rank, r in enumerate(response.results, 1)))
        task = asyncio.create_task(self._write(entry, principal))
        self._pending[sid] = task
        task.add_done_callback(lambda _: self._pending.pop(sid, None))
        return replace(response, search_id=sid)

    async def _write(self, entry: SearchLogRecord, principal: Principal | None) -> None:
        with acting_for(principal):
            try:
                await self._ks.record_search(entry)
            except NotFound:
                log.debug("search %s not logged: tenant %s has no store", entry.search_id, entry.tenant_id)
            except NucleusError as err:
                log.warning("search %s not logged: %s", entry.search_id, err)

    async def settled(self, search_id: str) -> None:
        """Wait for this replica's write of `search_id`, if it is still running."""
        task = self._pending.get(search_id)
        if task is not None:
            await asyncio.wait({task}, timeout=10.0)

    async def close(self) -> None:
        if self._pending:
            await asyncio.wait(set(self._pending.values()), timeout=5.0)


class SourceVoteCache:
    """A tenant's source votes for ranking, read from the store at most every SOURCE_VOTES_TTL_S."""

    def __init__(self, knowledge: KnowledgeSource) -> None:
        self._ks = knowledge
        self._cached: dict[str, tuple[float, dict[str, SourceVotes]]] = {}

    async def of(self, tenant_id: str) -> dict[str, SourceVotes]:
        now = time.monotonic()
        hit = self._cached.get(tenant_id)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            votes = {v.source_id: v for v in await self._ks.source_votes(tenant_id)}
        except NucleusError as err:           # ranked on the sources' priors alone, said in the log
            log.warning("source votes of tenant %s unavailable: %s", tenant_id, err)
            return {}
        self._cached[tenant_id] = (now + SOURCE_VOTES_TTL_S, votes)
        return votes

    def forget(self, tenant_id: str) -> None:
        self._cached.pop(tenant_id, None)


async def record_feedback(pipeline: Pipeline, tenant_id: str, target: str, target_id: str, helpful: bool,
                          user_id: str, *, principal: Principal | None = None,
                          search_id: str = "") -> tuple[FeedbackAck, float]:
    """Persist one vote (module docstring); returns the ack and the smoothed reputation after it
    (of the artifact; for a federated result, of its source: the ack's `artifact_id` names it).
    For a verified `principal`: its tenant and user, on a document it can see — a hidden one is
    NotFound exactly as a missing one (permissions.py)."""
    if target not in ("entry", "artifact"):
        raise InvalidArgument("target", "must be 'entry' or 'artifact'")
    if not target_id:
        raise InvalidArgument("target_id", "is required")
    ks = pipeline.knowledge
    with acting_for(principal):              # the store checks the same user again
        if principal is not None:
            tenant_id = pipeline.tenant_for(tenant_id, principal)
            if not permissions.trusted(principal):
                if not principal.user_id:
                    raise PermissionDenied("votes count only from a verified user; this credential names none")
                user_id = principal.user_id
        if search_id:
            await pipeline.search_log.settled(search_id)
        source = _federated_source(pipeline, target_id, principal, tenant_id)
        if source is not None:
            votes = await ks.record_source_feedback(tenant_id, source.id, target_id, helpful, user_id,
                                                    search_id=search_id)
            pipeline.source_votes.forget(tenant_id)
            ack = FeedbackAck(source.id, votes.helpful, votes.unhelpful, source.reputation)
        else:
            if principal is not None:
                await permissions.check_feedback_target(ks, pipeline.access, principal, tenant_id, target,
                                                        target_id)
            try:
                ack = await ks.record_feedback(tenant_id, target, target_id, helpful, user_id, search_id=search_id)
            except NotFound:
                raise permissions.no_such_target(target, target_id, tenant_id) from None
    profile = await pipeline.resolve_profile(tenant_id, "", "")
    rep = reputation_factor(np.array([ack.reputation_prior], np.float32),
                            np.array([ack.feedback_helpful], np.int32),
                            np.array([ack.feedback_unhelpful], np.int32), DEFAULT_REPUTATION,
                            profile.reputation_prior_strength)
    return ack, float(rep[0])


def _federated_source(pipeline: Pipeline, target_id: str, principal: Principal | None, tenant_id: str):
    """The remote source a `<source>:<remote id>` target comes from, when the caller may use it;
    None: a local target (an id naming no source the caller sees is looked up locally)."""
    sid, colon, rest = target_id.partition(":")
    if pipeline.federation is None or not colon or not rest:
        return None
    try:
        plan = pipeline.federation.plan([sid], principal, tenant_id)
    except InvalidArgument:
        return None
    return next((s for s in plan.remotes if s.id == sid), None)


__all__ = ["SearchLog", "SourceVoteCache", "record_feedback"]
