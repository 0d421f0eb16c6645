"""RAGPipeline core: SearchAndRank (seed 001 §3) over a `KnowledgeSource` and a `LanguageModel`
(ports.py), with the numpy 4R ranking core, ranking profiles and feedback.

`_search` is the query's stages, each a method below taking and returning typed values:
  profile and intent -> phrases (expansion) -> federation (started, runs beside) -> local legs
  (embedding + one `Retrieve` per leg or both, `_local_legs`) -> merge -> rank (4R, learned,
  re-rank) -> fetch (an entry deleted since the search is dropped and refilled; duplicates
  folded when asked, merge.py) -> results.

A dependency failing mid-query degrades the answer instead of failing it: no embedding or no
vector leg -> keyword-only; no keyword leg -> vector-only; both -> Unavailable. The whole call
runs under `settings.deadline_s`; every dependency call has its own, shorter deadline. The
steps live beside this module: models.py (the request's check), merge.py, results.py (fetch, snippets).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
from opentelemetry import trace

from ranking import Candidates, RankingConfig, rank
from ranking.profile import BUILTIN_PROFILE, MAX_RERANK_TOP_N, RankingProfile, refuse_model_fields
from ranking.query_features import query_features
from ranking.query_features import detect_temporal_intent
from services.rag_pipeline import permissions, rerankers
from services.rag_pipeline.access import AccessPolicy, Scope
from services.rag_pipeline.federation.fanout import MAX_REMOTE_HITS, Federation, Plan, RemoteQuery
from services.rag_pipeline.federation.hits import LOCAL, Caller
from services.rag_pipeline.federation.filters import for_remotes
from services.rag_pipeline.federation.identity import INCOMING_PATH
from services.rag_pipeline.federation.rescore import Rescorer
from services.rag_pipeline.federation.unify import FederatedSearch, without_local_repeats
from services.rag_pipeline.feedback import SearchLog, SourceVoteCache, record_feedback
from services.rag_pipeline.results import load_hits, load_results
from services.rag_pipeline.feedback import LearnedRanking, feedback_notes
from services.rag_pipeline.merge import Folded, Merged, fold_plan, fold_prefetch, merge, ranking_candidates
from services.rag_pipeline.merge import COLLAPSE_BY_ARTIFACT, visible_copies
from services.rag_pipeline.models import NO_VISIBLE_SOURCES, RankedResult, SearchRequest, SearchResponse
from services.knowledge_store.models import StoreStatus
from services.rag_pipeline.ports import KnowledgeSource, LanguageModel
from services.rag_pipeline.results import build_results, ranking_config, recency_applies
from services.rag_pipeline.models import check_operator_options, settings_for, validate_request
from services.rag_pipeline.capture import CAPTURE
from shared.errors import DeadlineExceeded, InvalidArgument, NotFound, NucleusError, PermissionDenied, Unavailable
from shared.auth.config import EMPTY_CONFIG
from shared.errors import INT32_MAX, check_int
from shared.identity import OPERATOR, Principal, acting_for
from shared.records import (EMPTY_COLUMNS, CandidateColumns, FeedbackAck, QueryPhrases, Retrieval, RetrievalRequest,
                            ScoreCompletion, SearchFilters, TenantStats)
from shared.settings import RagPipelineSettings
from shared.telemetry.genai import retrieval_attributes, set_content_attribute  # telemetry hook

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.rag_pipeline")

PROFILE_CACHE_TTL_S = 5.0
MAX_PHRASES = 5
FEDERATION_RESERVE_S = 1.5      # of the deadline kept for re-scoring and ranking after the fan-out
RANK_MARGIN_S = 0.5             # of the deadline kept for ranking after the re-scoring


@dataclass(slots=True)
class _Query:
    """One search in flight: its request and what it gathered (timings, degraded reasons, notes, vanished ids)."""

    request: SearchRequest
    settings: RagPipelineSettings
    t0: float = field(default_factory=time.perf_counter)
    last: float = 0.0
    timings: list[tuple[str, float]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    vanished: set[str] = field(default_factory=set)
    fold: int = 0                       # duplicate folding (merge.py): top_k_final, 0 = off; and
    folded: dict[str, str] = field(default_factory=dict)   # folded artifact id -> its representative's

    def __post_init__(self) -> None:
        self.last = self.t0

    def mark(self, stage: str, since: float | None = None) -> None:
        """Record `stage`'s time, since the last mark (or `since`)."""
        now = time.perf_counter()
        self.timings.append((stage, (now - (self.last if since is None else since)) * 1000.0))
        self.last = now

    def left(self, margin_s: float) -> float:
        """Seconds left of the request's deadline, less `margin_s`."""
        return self.settings.deadline_s - (time.perf_counter() - self.t0) - margin_s


@dataclass(slots=True)
class _Legs:
    """What the local store answered for one query, leg by leg (None: not answered)."""

    phrases: QueryPhrases
    profile: RankingProfile
    local: bool = True                  # False: nothing stored here for the tenant (the remote sources only)
    vectors: np.ndarray | None = None
    keyword: CandidateColumns | None = None
    keyword_error: NucleusError | None = None
    dense: tuple[CandidateColumns, ...] | None = None
    completion: ScoreCompletion | None = None

    @property
    def failed(self) -> bool:
        return self.keyword_error is not None and self.dense is None

    def request(self, q: _Query, *, keyword: bool = False, vectors: np.ndarray | None = None,
                rows: Any = ()) -> RetrievalRequest:
        r = q.request
        return RetrievalRequest(r.tenant_id, self.phrases, r.top_k_initial, r.filters, vectors=vectors,
                                keyword=keyword, complete=vectors is not None, complete_rows=rows,
                                feedback_expansion=self.profile.feedback_expansion)

    def answered(self, q: _Query, answer: Retrieval) -> None:
        if answer.degraded and answer.degraded not in q.reasons:
            q.reasons.append(answer.degraded)
        if answer.keyword is not None:
            self.keyword = answer.keyword
            q.notes.extend(feedback_notes(self.profile, self.phrases, answer.terms))
        if answer.dense is not None:
            self.dense, self.completion = answer.dense, answer.completion

    def not_stored(self, q: _Query, err: NotFound, fed: Any) -> None:
        """The tenant has nothing stored here: with remote sources, they answer alone."""
        if fed is None:
            raise err
        self.local, self.keyword = False, EMPTY_COLUMNS
        q.notes.append(f"local: {err.message}")


class RagPipeline:
    """SearchAndRank, ranking profiles and feedback over a knowledge source and a language model."""

    def __init__(self, settings: RagPipelineSettings, knowledge: KnowledgeSource, llm: LanguageModel, *,
                 access: AccessPolicy | None = None, clock: Callable[[], float] = time.time,
                 federation: Federation | None = None) -> None:
        self._settings = settings
        self.federation = federation      # remote sources (federation/); None = the local store only
        self.rescorer = Rescorer(knowledge, llm)
        self.remote_hits = MAX_REMOTE_HITS     # asked of each remote source (at most top_k_initial)
        self.access = access or AccessPolicy(knowledge, EMPTY_CONFIG)   # who may see what (access.py)
        self._clock = clock      # wall time (unix seconds): recency and temporal intent are measured from it
        self._ks = self.knowledge = knowledge
        self._llm = llm
        self.search_log, self.source_votes = SearchLog(knowledge, clock), SourceVoteCache(knowledge)   # feedback.py
        self._searching = 0      # searches in flight (the combined legs call is for concurrent ones)
        self._profiles: dict[tuple[str, str, str], tuple[float, RankingProfile | None]] = {}
        self.learned = LearnedRanking(knowledge, signals_timeout_s=settings.retrieval_timeout_s)   # feedback.py

    async def close(self) -> None:
        await self.search_log.close()
        await asyncio.gather(self._ks.close(), self._llm.close())

    def validate(self, request: SearchRequest) -> SearchRequest:
        """The request with defaults resolved; InvalidArgument naming the field otherwise."""
        return validate_request(request, self._settings)

    async def scope(self, principal: Principal, *, base: SearchFilters = SearchFilters(),
                    only_sources: tuple[str, ...] | None = None) -> Scope:
        """The filters `principal`'s searches run under (tenant groups, source rules, session
        tags); `only_sources` must already be vetted. `Scope.empty`: nothing is visible."""
        return await self.access.scope(principal, base=base, only_sources=only_sources)

    async def search(self, request: SearchRequest, principal: Principal | None, *,
                     scope: Scope | None = None) -> SearchResponse:
        """SearchAndRank for a verified caller (`search_for`), its answer given a search id (feedback.py)."""
        response = await self.search_for(request, principal, scope)
        return self.search_log.record(response, request, principal, self.tenant_for(request.tenant_id, principal))

    async def search_for(self, request: SearchRequest, principal: Principal | None,
                         scope: Scope | None) -> SearchResponse:
        """SearchAndRank for a verified caller: the one access decision for every transport.

        The caller's tenant; its groups (enforced inside the store's searches); the auth
        config's source rules and a trusted platform's session tags (access.py; `scope` when
        the caller already asked for it, e.g. a RAG tool naming sources); and every
        call to the store and the model made for it carries a signed assertion of it, so the
        store holds it to its tenant and groups again. None = authentication is off (a
        trusted network): the request runs as sent.

        The scope and the federation plan are decided here, once, for every transport (gRPC,
        search_and_rank, rag_search pass the caller's request through): the sources the
        request selects (`plan`), and when nothing local is visible either the remote sources
        only or, with none, an empty answer (`SearchResponse.nothing_visible`)."""
        if principal is None:
            return await self.search_and_rank(request)
        check_operator_options(request, principal)
        principal = replace(principal, tenant_id=self.tenant_for(request.tenant_id, principal))
        plan = self.plan(request.sources, principal, principal.tenant_id)
        if scope is None:
            scope = await self.scope(principal, base=request.filters)
        if scope.empty:
            if plan is None or not plan.remotes:
                return SearchResponse(results=(), debug=NO_VISIBLE_SOURCES)
            plan = replace(plan, local=False)     # nothing local to see: the remote sources only
        with acting_for(principal):
            response = await self.search_and_rank(replace(request, tenant_id=principal.tenant_id,
                                                          filters=scope.filters),
                                                  plan=plan, caller=Caller.of(principal))
        if scope.post_tags:
            response = replace(response, results=visible_copies(response.results, scope.keep))
        return response

    @staticmethod
    def tenant_for(requested: str, principal: Principal | None) -> str:
        """The tenant a call acts on: the principal's, when its credential names one (an
        operator credential without a tenant acts on the requested one)."""
        if principal is None or (not principal.tenant_id and principal.has_role(OPERATOR)):
            return requested
        if requested and requested != principal.tenant_id:
            raise PermissionDenied(f"tenant_id '{requested}' is not the caller's tenant")
        return principal.tenant_id

    async def resolve_profile(self, tenant_id: str, persona_id: str, name: str) -> RankingProfile:
        """Named profile, else the persona's default, else the tenant's default, else built-in."""
        if name:
            profile = await self._cached_profile(tenant_id, persona_id, name)
            if profile is None and persona_id:
                profile = await self._cached_profile(tenant_id, "", name)
            if profile is None:
                raise NotFound(f"ranking profile '{name}' does not exist for tenant '{tenant_id}'")
            return profile
        for persona in ((persona_id, "") if persona_id else ("",)):
            profile = await self._cached_profile(tenant_id, persona, "")
            if profile is not None:
                return profile
        return BUILTIN_PROFILE

    async def _cached_profile(self, tenant_id: str, persona_id: str, name: str) -> RankingProfile | None:
        key = (tenant_id, persona_id, name)
        now = time.monotonic()
        cached = self._profiles.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            profile: RankingProfile | None = await self._ks.get_profile(tenant_id, persona_id, name)
            if persona_id and profile is not None and profile.persona_id != persona_id:
                profile = None
        except NotFound:
            profile = None
        self._profiles[key] = (now + PROFILE_CACHE_TTL_S, profile)
        return profile

    async def put_profile(self, profile: RankingProfile, principal: Principal | None = None) -> RankingProfile:
        """Stored (and validated, naming the field) by the KnowledgeStore, the system of record.
        For a verified `principal`: in its tenant, and a change of a default profile needs the
        admin role (permissions.py). None = authentication is off: stored as sent."""
        refuse_model_fields(profile)             # only `nucleus tune` names a model (the store checks again)
        with acting_for(principal):              # the store checks the same user again
            if principal is not None:
                profile = replace(profile, tenant_id=self.tenant_for(profile.tenant_id, principal))
                await permissions.check_profile_write(self._ks, profile, principal)
            await rerankers.check_configured(self._llm, profile, timeout_s=self._settings.embed_timeout_s)
            stored = await self._ks.put_profile(profile)
        self._profiles.clear()
        return stored

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile:
        check_int("version", version, 0, INT32_MAX)          # 0 = latest
        return await self._ks.get_profile(tenant_id, persona_id, name, version)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        return await self._ks.list_profiles(tenant_id, persona_id)

    async def tenant_stats(self, tenant_id: str, principal: Principal | None) -> TenantStats:
        """GetTenantStats of the principal's tenant (an operator's: the requested one), asked for it."""
        tenant_id = self.tenant_for(tenant_id, principal)
        with acting_for(principal):
            return await self._ks.stats(tenant_id)

    async def store_status(self, principal: Principal | None) -> StoreStatus:
        """The store's storage condition, asked for `principal`: the whole of it for the verified
        operator (the call says `for_operator`, never the role), an admin its own tenant's view
        (`StoreStatus.for_tenant`), anybody else PermissionDenied."""
        with acting_for(principal):
            return await self._ks.store_status()

    async def record_feedback(self, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str, *, principal: Principal | None = None,
                              search_id: str = "") -> tuple[FeedbackAck, float]:
        """One vote and the smoothed reputation after it (feedback.py: who counts, the caps, the
        search id's check, votes on federated results)."""
        return await record_feedback(self, tenant_id, target, target_id, helpful, user_id, principal=principal,
                                     search_id=search_id)

    def plan(self, selection: Sequence[str], principal: Principal | None, tenant_id: str | None = None
             ) -> Plan | None:
        """Which sources a query goes to (federation/fanout.py); None = the local store only, as
        without federation (no remote source configured or visible, and none asked for).
        `principal` None: authentication is off, the sources of `tenant_id`."""
        if self.federation is None:
            unknown = [s for s in selection if s != LOCAL]
            if unknown:
                raise InvalidArgument("sources", f"unknown source '{unknown[0]}'; accepted: local "
                                                 "(no remote source is configured)")
            return None
        plan = self.federation.plan(selection, principal, tenant_id)
        return plan if plan.federated else None

    async def search_and_rank(self, request: SearchRequest, *, plan: Plan | None | str = "auto",
                              caller: Caller | None = None) -> SearchResponse:
        """`plan`: the sources (`plan()`); "auto" = as the request's `sources` select for a
        caller who may see every source of the request's tenant (authentication off).
        `caller`: who the remote sources are asked for (None: the request's tenant, no user)."""
        if plan == "auto":
            plan = self.plan(request.sources, None, request.tenant_id)
        caller = caller or Caller(request.tenant_id)
        request = self.validate(request)
        with tracer.start_as_current_span("rag.search_and_rank") as span:
            span.set_attributes({"nucleus.tenant_id": request.tenant_id, "nucleus.top_k_final": request.top_k_final,
                                 "nucleus.top_k_initial": request.top_k_initial})
            set_content_attribute(span, "gen_ai.retrieval.query.text", request.query)  # telemetry hook (gated)
            try:
                async with asyncio.timeout(self._settings.deadline_s):
                    response = await self._search(request, plan, caller)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"SearchAndRank did not finish within {self._settings.deadline_s:.1f}s") from None
            span.set_attributes({"nucleus.degraded": response.degraded, "nucleus.results": len(response.results),
                                 "nucleus.degraded_reasons": list(response.degraded_reasons),
                                 "nucleus.profile": f"{response.profile_name}@v{response.profile_version}"})
            return response

    async def _search(self, request: SearchRequest, plan: Plan | None = None, caller: Caller | None = None
                      ) -> SearchResponse:
        """One SearchAndRank, as its stages (module docstring); `CAPTURE` set: what it ranked, for why_not.py."""
        q = _Query(request, settings_for(request, self._settings))
        started: list[FederatedSearch] = []
        self._searching += 1
        try:
            profile, now, intent = await self._profile_and_intent(q)
            phrases = await self._phrases(q)
            fed = self._federate(q, plan, caller, phrases, started)
            legs = await self._local_legs(q, phrases, profile, plan is None or plan.local, fed)
            merged, reports, final_k = await self._merge(q, legs, plan, fed, phrases)
            q.fold, k = fold_plan(request, profile, final_k)
            ranked, candidates, config, learned = await self._rank(q, merged, legs, profile, intent.has_intent, now, k)
            results = await self._fetch(q, merged, candidates, ranked, config, k, now, learned, fed)
            if (capture := CAPTURE.get()) is not None:       # a why-not's search (capture.py)
                capture.took(request, legs, merged, candidates, config, results, learned, q.fold, now)
        finally:
            self._searching -= 1
            for federated in started:      # an answer or an error: no remote call outlives the query
                federated.cancel()
        q.mark("total", q.t0)
        debug = "; ".join([f"phrases={len(phrases)}", f"candidates={len(merged)}",
                           f"temporal_cues={','.join(intent.cues) or '-'}", *q.notes])
        return SearchResponse(
            results=results, degraded=bool(q.reasons), degraded_reasons=tuple(q.reasons),
            profile_name=profile.name, profile_version=profile.version, query_phrases=tuple(phrases),
            candidates_considered=len(merged), timings=tuple(q.timings), temporal_intent=intent.has_intent,
            debug=debug, sources=reports)

    async def _profile_and_intent(self, q: _Query) -> tuple[RankingProfile, float, Any]:
        r = q.request
        profile = await self.resolve_profile(r.tenant_id, r.persona_id, r.prefs.profile_name)
        now = self._clock()
        intent = detect_temporal_intent(r.query, now_year=time.gmtime(now).tm_year)
        q.mark("profile")
        return profile, now, intent

    async def _phrases(self, q: _Query) -> QueryPhrases:
        """The query's phrases, normalised once (stripped, distinct), with the expansion's when asked."""
        expanded: tuple[str, ...] = ()
        if q.request.expand:
            with tracer.start_as_current_span("rag.expand") as span:
                try:
                    expansion = await self._llm.expand(q.request.query, timeout_s=q.settings.embed_timeout_s)
                    expanded = tuple(expansion.phrases[1:])
                    q.notes.append(f"expansion={expansion.method}: {expansion.note}".strip())
                    span.set_attribute("nucleus.expansion_method", expansion.method)
                except NucleusError as err:
                    q.reasons.append(f"query expansion unavailable: {err}")
            q.mark("expand")
        return QueryPhrases.distinct((q.request.query, *q.request.extra_phrases, *expanded), MAX_PHRASES)

    def _federate(self, q: _Query, plan: Plan | None, caller: Caller | None, phrases: QueryPhrases,
                  started: list[FederatedSearch]) -> FederatedSearch | None:
        """The remote sources' fan-out, started now to run beside the local legs (None: none)."""
        if plan is None or not plan.remotes:
            return None
        r, s = q.request, q.settings
        budget = q.left(min(FEDERATION_RESERVE_S, s.deadline_s / 3))
        fed = FederatedSearch(self.federation, self.rescorer, plan,
                              RemoteQuery(r.query, tuple(phrases), min(self.remote_hits, r.top_k_initial),
                                          caller, r.remote_resources, INCOMING_PATH.get(), for_remotes(r.filters)),
                              max(0.05, budget), votes=self.source_votes.of(r.tenant_id)).start()
        started.append(fed)
        return fed

    async def _local_legs(self, q: _Query, phrases: QueryPhrases, profile: RankingProfile, local: bool,
                          fed: FederatedSearch | None) -> _Legs:
        """The query's embedding and the local store's two legs. The rule, measured (docs/BENCHMARKS.md
        "Deployment modes"): a lone search runs its keyword leg beside the embedding (lower latency,
        the CPU is there); searches that run concurrently ask for both legs in one call after it
        (one round trip less each). A failed combined call falls back to the two calls, which
        answer, or degrade, on their own: a failed leg is a reason, not an error."""
        legs = _Legs(phrases, profile, local=local)
        keyword_task = None
        if local and self._searching <= 1:
            keyword_task = asyncio.create_task(self._retrieve(q, legs.request(q, keyword=True), "keyword"))
        legs.vectors = await self._embed(q, phrases)
        q.mark("embed")
        if local and keyword_task is None and legs.vectors is not None:
            try:
                legs.answered(q, await self._retrieve(q, legs.request(q, keyword=True, vectors=legs.vectors),
                                                      "hybrid"))
            except NotFound as err:
                legs.not_stored(q, err, fed)
            except InvalidArgument:
                raise
            except NucleusError as err:
                log.info("combined retrieval call failed (%s: %s); calling the legs separately",
                         type(err).__name__, err)
        if legs.local and legs.keyword is None:
            try:
                task = keyword_task or self._retrieve(q, legs.request(q, keyword=True), "keyword")
                legs.answered(q, await task)
            except NotFound as err:
                legs.not_stored(q, err, fed)
            except InvalidArgument:
                raise
            except NucleusError as err:
                legs.keyword_error = err
                q.reasons.append(f"keyword retrieval unavailable: {err}")
        if legs.local and legs.dense is None and legs.vectors is not None:
            rows = legs.keyword.row_ids if legs.keyword is not None else ()
            try:
                legs.answered(q, await self._retrieve(q, legs.request(q, vectors=legs.vectors, rows=rows), "vector"))
            except (NotFound, InvalidArgument):
                raise
            except NucleusError as err:
                q.reasons.append(f"vector retrieval unavailable: {err}")
        q.mark("retrieve")
        if legs.failed and fed is None:
            raise Unavailable("both retrieval legs failed: " + "; ".join(q.reasons))
        return legs

    async def _retrieve(self, q: _Query, request: RetrievalRequest, leg: str) -> Retrieval:
        """One retrieval call, its span named by the leg(s) it runs (InvalidArgument propagates)."""
        with tracer.start_as_current_span(f"rag.retrieve.{leg}") as span:
            retrieval_attributes(span, data_source=f"knowledge_store.{leg}", top_k=request.top_k,
                                 query=list(request.phrases))  # telemetry hook
            answer = await self._ks.retrieve(request, timeout_s=q.settings.retrieval_timeout_s)
            span.set_attribute("nucleus.candidates", len(answer.keyword or ()) + sum(map(len, answer.dense or ())))
            return answer

    async def _merge(self, q: _Query, legs: _Legs, plan: Plan | None, fed: FederatedSearch | None,
                     phrases: QueryPhrases) -> tuple[list[Merged], tuple, int]:
        """Both legs merged by entry id with every raw signal; the remote sources' rows after them."""
        r, s = q.request, q.settings
        with tracer.start_as_current_span("rag.merge") as span:
            collapse = COLLAPSE_BY_ARTIFACT if r.collapse is None else r.collapse
            merged = merge(legs.dense or [], legs.keyword or EMPTY_COLUMNS, collapse=collapse,
                           completion=legs.completion)
            span.set_attribute("nucleus.candidates", len(merged))
        q.mark("merge")
        final_k, reports = r.top_k_final, ()
        if plan is None:
            return merged, reports, final_k
        local_report = FederatedSearch.local_report(
            legs.local and not legs.failed, (q.last - q.t0) * 1000.0, len(merged) if legs.local else 0,
            "; ".join(q.reasons) if legs.failed else "" if legs.local else "nothing stored for this tenant"
        ) if plan.local else None
        if fed is not None:
            # Re-scoring embeds every remote hit not seen before: it may use what is left of the
            # request's deadline (less a margin for ranking), not just one embed call's.
            remote_rows, remote_reasons = await fed.candidates(
                r.tenant_id, phrases, legs.vectors, r.tenant_id,
                timeout_s=max(s.embed_timeout_s, q.left(RANK_MARGIN_S)))
            q.reasons.extend(remote_reasons)
            merged = merged + remote_rows
            final_k += min(len(remote_rows), r.top_k_final)   # room for remote repeats of local results
            q.timings += [("slowest_source", fed.timings.slowest_source_ms), ("rescore", fed.timings.rescore_ms)]
            q.notes.extend(fed.notes())            # remote_embedded, remote_vectors, remote_duplicates
            q.mark("federate")
        reports = tuple(x for x in ([local_report] if local_report else []) + (fed.reports if fed else
                                                                               list(plan.skipped)))
        if legs.failed and not any(m.origin for m in merged):
            raise Unavailable("both retrieval legs failed and no remote source answered: " + "; ".join(q.reasons))
        return merged, reports, final_k

    async def _rank(self, q: _Query, merged: list[Merged], legs: _Legs, profile: RankingProfile,
                    temporal: bool, now: float, final_k: int) -> tuple[Any, Candidates | None, RankingConfig, Any]:
        """The 4R ranking of every candidate at once (with the profile's learned model when it has
        one), then the model re-rank of its best rows when asked for."""
        r, s = q.request, q.settings
        apply_recency = recency_applies(r.prefs.recency_mode or profile.recency_mode, temporal)
        stats = legs.completion.keyword_stats if legs.completion is not None else None
        features = query_features(r.query, stats.document_frequency if stats else (), stats.entries if stats else 0)
        config = ranking_config(r.prefs, profile, apply_recency, now, features)
        # Model re-ranking is off by default: a request asks for it (the default method), or the
        # profile names a re-ranker; the profile says how many rows it re-scores.
        rerank = (r.prefs.rerank or bool(profile.reranker)) and len(merged) > 1
        with tracer.start_as_current_span("rag.rank") as span:
            candidates = ranking_candidates(merged)
            # With a re-rank, this first ranking picks the rows the model scores (_rerank).
            k = min(max(1, min(profile.rerank_top_n, MAX_RERANK_TOP_N)), len(merged)) if rerank else final_k
            if merged and self.learned.wanted(profile):      # ranks once, with the model if there is one
                ranked, candidates, learned = await self.learned.apply(
                    r.tenant_id, r.query, profile, merged, candidates, config, k, q.reasons, q.notes,
                    query_vector=legs.vectors[0] if legs.vectors is not None else None,
                    timeout_s=max(0.05, min(s.retrieval_timeout_s, q.left(RANK_MARGIN_S))))
            else:
                ranked, learned = (rank(candidates, config, k) if merged else None), None
            span.set_attribute("nucleus.candidates", len(merged))
        q.mark("rank")
        if ranked is not None and rerank:
            with tracer.start_as_current_span("rag.rerank"):
                ranked, candidates, reason = await self._rerank(replace(r, top_k_final=final_k), merged, candidates,
                                                                config, ranked, q.reasons, q.vanished,
                                                                method=profile.reranker)
                if reason:
                    q.reasons.append(reason)
                learned = None                          # the re-ranker's score replaced the model's
            q.mark("rerank")
        return ranked, candidates, config, learned

    async def _fetch(self, q: _Query, merged: list[Merged], candidates: Candidates, ranked: Any,
                     config: RankingConfig, final_k: int, now: float, learned: Any,
                     fed: FederatedSearch | None) -> tuple[RankedResult, ...]:
        """The chosen entries read in one call (results.py), copies folded when asked (merge.py), explained."""
        if ranked is None:
            return ()
        r, vectors = q.request, await fold_prefetch(self._ks, q, merged, ranked) if q.fold else None
        kept, kept_candidates, ranked = await load_results(
            self._ks, r.tenant_id, merged, candidates, ranked, config, final_k, q.reasons, q.vanished,
            timeout_s=q.settings.retrieval_timeout_s)
        if q.vanished:
            q.notes.append(f"vanished={len(q.vanished)} (deleted during the search, refilled)")
        results: tuple[RankedResult, ...] = ()
        if ranked is not None:
            folded = Folded(q, kept, ranked, vectors) if q.fold else None    # groups, then their results
            results = build_results(kept, folded.ranked if folded else ranked, kept_candidates, config, r.query,
                                    r.prefs.explain, now_unix=now, learned=learned)
            results = folded.attach(results) if folded else results
            if fed is not None:
                results, repeats = without_local_repeats(results, r.top_k_final)
                if repeats:
                    q.notes.append(f"remote_repeats_of_local={repeats}")
        q.mark("fetch")
        return results

    async def _embed(self, q: _Query, phrases: QueryPhrases) -> np.ndarray | None:
        """All phrases embedded in one call (the caller's own query vector first, when given);
        None, with the reason noted, when the model cannot answer."""
        request = q.request
        with tracer.start_as_current_span("rag.embed") as span:
            span.set_attribute("nucleus.phrases", len(phrases))
            given = None
            if request.query_vector is not None:
                given = np.asarray(request.query_vector, dtype=np.float32)[None, :]
                norm = float(np.linalg.norm(given))
                if norm > 0:
                    given = given / norm
                to_embed = list(phrases[1:])
            else:
                to_embed = list(phrases)
            if not to_embed:
                return given
            try:
                vectors = await self._llm.embed(to_embed, timeout_s=q.settings.embed_timeout_s)
            except NucleusError as err:
                q.reasons.append(f"embedding unavailable: {err}")
                return given
            if given is not None:
                if given.shape[1] != vectors.shape[1]:
                    raise InvalidArgument("user_query_vector",
                                          f"expected {vectors.shape[1]} dimensions, got {given.shape[1]}")
                vectors = np.vstack([given, vectors])
            return vectors

    async def _rerank(self, request: SearchRequest, merged: list[Merged], candidates: Candidates,
                      config: RankingConfig, first: Any, reasons: list[str],
                      vanished: set[str], method: str = "") -> tuple[Any, Candidates, str]:
        """Re-score `first` (the profile's rerank_top_n best rows) with the model (`method`: the
        profile's re-ranker, "" = the default) and rank again to top_k_final, the score blended
        into Relevancy with the profile's rerank_weight. A failing re-ranker degrades to the
        first ranking with the reason flagged."""
        await load_hits(self._ks, request.tenant_id, [merged[int(r)] for r in first.rows], reasons, vanished,
                        timeout_s=self._settings.retrieval_timeout_s)
        rows = [int(r) for r in first.rows if merged[int(r)].hit is not None]     # vanished ones: not re-ranked
        if not rows:
            return rank(candidates, config, request.top_k_final), candidates, ""
        try:
            scored = await self._llm.rerank(request.query, [(merged[r].hit.entry.id, merged[r].hit.entry.text)
                                                             for r in rows], method=method,
                                             timeout_s=self._settings.embed_timeout_s)
        except NucleusError as err:
            return rank(candidates, config, request.top_k_final), candidates, f"rerank unavailable: {err}"
        rerank_col = np.full(len(merged), np.nan, dtype=np.float32)
        rerank_col[rows] = np.asarray(scored.scores, dtype=np.float32)
        updated = replace(candidates, rerank=rerank_col)
        return rank(updated, config, request.top_k_final), updated, ""
