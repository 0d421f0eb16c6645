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

The learned ranking served (trained from those votes by `nucleus tune`): a profile that names a
model re-orders its top N fused candidates.

    profile.model_sha256 set   the model is read from the KnowledgeStore (GetRankingModel) once,
                               checked and parsed (ranking/trees.py load_model) and cached by
                               (tenant, sha256); today's top N are found (`learned_top`: the blend),
                               the per-field signals of those that are local entries are asked of the
                               store in one call (KnowledgeStore GetFieldSignals: the query text and
                               the query vector SearchAndRank embedded), and the model re-scores them
                               (`learned_finish`, `ranking.learned.served_features`) — one pass of the
                               ranking core
    model reads none of them   (no split on, no weight for a per-field feature) the store is not
                               asked: those features cannot change its scores
    signals fail / time out    the per-field features stay NaN (as for a federated hit), flagged
                               "learned_signals_unavailable: …"; the search is never failed for it
    model missing / refused    the untrained ranking, flagged in the response's degraded reasons:
    / feature version differs  "learned_model_missing: …", "learned_model_refused: …",
                               "learned_model_mismatch: …", "learned_model_unavailable: …"
    feedback_expansion "rm3"   applied by the store's keyword leg (services/knowledge_store/
                               keywords.py: the pipeline passes the profile's value);
                               the debug says `rm3=+N terms` (`feedback_notes`)

`capture` (set by `nucleus tune`, cli/tune.py, in its own pipeline over the running stack's
services): every query's untrained candidates, their artifact ids, ranking config and the field
signals of every local candidate (one GetFieldSignals call) are handed to it as a `Captured`
before any model applies — the candidates and features tune trains on are the ones served
(`Captured.features_of`: `served_features` over those signals).

The explanation of each result shows the learned Relevancy as its `rerank_score` (the ranking's
rerank column, weight 1) and, for a result the model scored, its feature contributions
(`LearnedExplainer`: computed when the results are built, for the returned rows only): the
MAX_LISTED largest by |contribution|, the rest summed as one "other features" entry, so that
`learned_base` + Σ contribution = the model's score of the result.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from ranking import Candidates, RankingConfig
from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.inputs import DEFAULT_REPUTATION
from ranking.learned import (
    FeaturesOf,
    Learned,
    learned_finish,
    learned_top,
    RowSignals,
    served_features,
    SERVED_MISSING,
)
from ranking.profile import RankingProfile
from ranking.rank import Ranked, rank, reputation as reputation_factor
from ranking.trees import RankerModel, load_model
from services.rag_pipeline import permissions
from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.merge import Merged
from services.rag_pipeline.models import OTHER_FEATURES, FeatureContribution, SearchRequest, SearchResponse
from services.rag_pipeline.ports import KnowledgeSource
from shared.analysis import analyse, query_terms as analysis_terms
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
        # told each search id given out, with its request and caller (pages.py holds the request for a why-not)
        self.listeners: list[Callable[[SearchResponse, SearchRequest, Principal | None, str], None]] = []

    def record(self, response: SearchResponse, request: SearchRequest, principal: Principal | None,
               tenant_id: str, *, tell: bool = True) -> SearchResponse:
        """`response` with a new search id, its log entry being written, and the `listeners` told
        (unless not `tell`); unchanged when it has no result or its caller has no user (a vote needs one)."""
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
        response = replace(response, search_id=sid)
        for listener in self.listeners if tell else ():
            listener(response, request, principal, tenant_id)
        return response

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


MAX_CACHED_MODELS = 32
FAILED_LOOKUP_TTL_S = 30.0      # a missing or refused model is asked for again after this, not on every query
_PER_FIELD = [FEATURE_NAMES.index(name) for name in SERVED_MISSING]     # what GetFieldSignals serves
MAX_LISTED = 8           # feature contributions listed per result (the rest: one "other features" entry)


def query_terms(query: str) -> int:
    """The number of distinct analysed terms of the query (the `query_terms` feature)."""
    return len(dict.fromkeys(analyse(query)))


@dataclass(frozen=True, slots=True)
class Captured:
    """One query's untrained candidates as `nucleus tune` captures them (module docstring)."""

    query: str
    artifact_ids: list[str]
    candidates: Candidates
    config: RankingConfig
    signals: RowSignals | None      # of every local candidate; None: none local, or not served (`why`)
    why: str = ""                   # why the store served no signals ("" = it did, or nothing to ask)

    def features_of(self) -> FeaturesOf:
        """`features_of(rows, fused)` of these candidates: what serving computes for them."""
        c, cfg, t, signals = self.candidates, self.config, query_terms(self.query), self.signals
        return lambda rows, fused: served_features(c, cfg, t, rows, fused, signals)


class LearnedRanking:
    """Parsed models cached by (tenant, sha256), and the learned re-ordering of a query's candidates."""

    def __init__(self, knowledge: KnowledgeSource, *, signals_timeout_s: float | None = None) -> None:
        self._ks = knowledge
        self._signals_timeout_s = signals_timeout_s       # the GetFieldSignals call's
        self._models: OrderedDict[tuple[str, str], RankerModel] = OrderedDict()
        self._failed: dict[tuple[str, str], tuple[float, str]] = {}       # (tenant, sha) -> (until, why)
        # every query's candidates and their signals, before any model (cli/tune.py)
        self.capture: Callable[[Captured], None] | None = None

    def wanted(self, profile: RankingProfile) -> bool:
        return bool(profile.model_sha256 or self.capture is not None)

    async def model(self, tenant_id: str, profile: RankingProfile) -> tuple[RankerModel | None, str]:
        """(the profile's model, "") or (None, why it is not used); (None, "") without a model."""
        sha = profile.model_sha256
        if not sha:
            return None, ""
        if profile.feature_version != FEATURE_VERSION:
            return None, (f"learned_model_mismatch: profile '{profile.name}' v{profile.version} names a model of "
                          f"feature version {profile.feature_version}; this ranking computes {FEATURE_VERSION}")
        key = (tenant_id, sha)
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key], ""
        failed = self._failed.get(key)
        if failed is not None and failed[0] > time.monotonic():
            return None, failed[1]
        try:
            raw = await self._ks.get_ranking_model(tenant_id, sha)
        except NotFound:
            return self._fail(key, f"learned_model_missing: model {sha[:12]} of profile '{profile.name}' is not stored")
        except NucleusError as err:
            return None, f"learned_model_unavailable: {err}"           # transient: asked again next query
        try:
            if hashlib.sha256(raw).hexdigest() != sha:
                raise InvalidArgument("model", "its bytes do not hash to the profile's model_sha256")
            parsed = load_model(raw, FEATURE_NAMES, FEATURE_VERSION)
        except InvalidArgument as err:
            return self._fail(key, f"learned_model_refused: {err}")
        self._failed.pop(key, None)
        self._models[key] = parsed
        while len(self._models) > MAX_CACHED_MODELS:
            self._models.popitem(last=False)
        return parsed, ""

    def _fail(self, key: tuple[str, str], why: str) -> tuple[None, str]:
        """(None, why), remembered for FAILED_LOOKUP_TTL_S: a profile naming a missing or refused
        model does not cost a store call (and a hash and parse) on every query."""
        now = time.monotonic()
        if len(self._failed) >= MAX_CACHED_MODELS:
            self._failed = {k: v for k, v in self._failed.items() if v[0] > now}
        self._failed[key] = (now + FAILED_LOOKUP_TTL_S, why)
        return None, why

    async def field_signals(self, tenant_id: str, query: str, query_vector: np.ndarray | None,
                            merged: Sequence[Merged], rows: Sequence[int], timeout_s: float | None = None
                            ) -> tuple[RowSignals | None, str]:
        """(the store's FieldSignals of the local entries among candidate `rows`, "") in one call;
        (None, "") when none is local; (None, why) when they cannot be had (no query vector, the
        store failed, timed out or answered out of shape). `timeout_s`: else the constructor's."""
        local = [r for r in rows if not merged[r].origin]
        if not local:
            return None, ""
        if query_vector is None:
            return None, "no query vector (embedding unavailable)"
        try:
            signals = await self._ks.get_field_signals(tenant_id, [merged[r].entry_id for r in local], query,
                                                       np.asarray(query_vector, dtype=np.float32),
                                                       timeout_s=timeout_s or self._signals_timeout_s)
            return RowSignals(signals, np.asarray(local, dtype=np.intp)), ""
        except NucleusError as err:
            return None, str(err)

    async def apply(self, tenant_id: str, query: str, profile: RankingProfile, merged: Sequence[Merged],
                    candidates: Candidates, config: RankingConfig, k: int, reasons: list[str],
                    notes: list[str], query_vector: np.ndarray | None = None, timeout_s: float | None = None
                    ) -> tuple[Ranked, Candidates, LearnedExplainer | None]:
        """(ranked, candidates, explainer): the best k re-ordered by the profile's model, else
        today's ranking (a reason flagged, no explainer). `query_vector`: the query's embedding
        (the store's title cosine); None: the per-field signals are not asked. `timeout_s`: the
        signals call's (what is left of the request's deadline)."""
        asked: tuple[RowSignals | None, str] | None = None       # every local candidate's, when captured
        if self.capture is not None:
            asked = await self.field_signals(tenant_id, query, query_vector, merged, range(len(merged)), timeout_s)
            self.capture(Captured(query, [m.artifact_id for m in merged], candidates, config, *asked))
        model, why = await self.model(tenant_id, profile)
        if why:
            reasons.append(why)
        if model is None or not len(candidates):
            return rank(candidates, config, k), candidates, None
        first = learned_top(candidates, config, model, k)
        if asked is not None:
            signals, why = asked
        elif model.uses(_PER_FIELD):
            signals, why = await self.field_signals(tenant_id, query, query_vector, merged, first.top.tolist(),
                                                    timeout_s)
        else:                     # the model reads no per-field feature: the store is not asked
            signals, why = None, ""
        if why:
            reasons.append(f"learned_signals_unavailable: {why}")
        t = query_terms(query)
        learned = learned_finish(candidates, config, model, k, first,
                                 lambda rs, fused: served_features(candidates, config, t, rs, fused, signals))
        found = 0 if signals is None else int(signals.found_among(candidates, first.top).sum())
        notes.append(f"learned={model.kind} N{model.top_n} model {profile.model_sha256[:12]}")
        notes.append(f"field_signals={found}")         # of the N rows, those served with the store's signals
        return learned.ranked, candidates.with_rerank(learned.column), LearnedExplainer(model, learned, merged)


def feedback_notes(profile: RankingProfile, phrases: Sequence[str], terms: Sequence[str]) -> list[str]:
    """The debug note of a profile's keyword feedback expansion: `rm3=+N terms`, N the terms the
    store's keyword leg searched beyond the query's own (`terms`: the leg's query terms)."""
    if not profile.feedback_expansion:
        return []
    own = set(analysis_terms(phrases))
    return [f"{profile.feedback_expansion}=+{sum(t not in own for t in terms)} terms"]


class LearnedExplainer:
    """The feature contributions of the results a query's model scored, computed for the
    results returned only (they are known once the results are fetched: a vanished entry's
    place is refilled, so candidates are named by their Merged record, not by row)."""

    def __init__(self, model: RankerModel, learned: Learned, merged: Sequence[Merged]) -> None:
        self._model, self._learned = model, learned
        # the Merged records outlive the request's ranking: their identity names a candidate
        self._row = {id(merged[r]): i for i, r in enumerate(learned.top.tolist())}

    def explain(self, chosen: Sequence[Merged]) -> list[tuple[float, tuple[FeatureContribution, ...]] | None]:
        """Per chosen candidate: (learned_base, its largest contributions), None if not scored."""
        at = [self._row.get(id(m), -1) for m in chosen]
        rows = np.asarray([i for i in at if i >= 0], dtype=np.intp)
        if rows.size == 0:
            return [None] * len(chosen)
        x = self._learned.x[rows]
        base, contributions = self._model.contributions(x, self._learned.fused[rows])
        scored = iter(zip(base.tolist(), contributions, x))
        out: list[tuple[float, tuple[FeatureContribution, ...]] | None] = []
        for i in at:
            if i < 0:
                out.append(None)
                continue
            b, c, values = next(scored)
            out.append((b, listed(c, values)))
        return out


def listed(contributions: np.ndarray, values: np.ndarray) -> tuple[FeatureContribution, ...]:
    """The MAX_LISTED largest non-zero contributions by magnitude, then the rest summed."""
    nonzero = np.flatnonzero(contributions)
    order = nonzero[np.argsort(-np.abs(contributions[nonzero]), kind="stable")]
    out = [FeatureContribution(name=FEATURE_NAMES[j], value=None if np.isnan(values[j]) else float(values[j]),
                               contribution=float(contributions[j])) for j in order[:MAX_LISTED].tolist()]
    if order.size > MAX_LISTED:
        out.append(FeatureContribution(name=OTHER_FEATURES, value=None,
                                       contribution=float(contributions[order[MAX_LISTED:]].sum())))
    return tuple(out)


__all__ = ["SearchLog", "SourceVoteCache", "record_feedback"]
