"""RAGPipeline core: SearchAndRank (seed 001 §3) over a `KnowledgeSource` and a `LanguageModel`
(ports.py), with the numpy 4R ranking core, ranking profiles and feedback.

One query, step by step:
  validate -> resolve profile -> detect temporal intent -> [expand] -> embed all phrases in one
  batch (the keyword leg starts at once, in parallel with embedding) -> vector leg (all phrase
  vectors, one call, which also completes both signals for the keyword leg's candidates and its
  own) -> merge & de-duplicate by entry id keeping every raw signal -> rank
  (ranking/, vectorised) -> [rerank top N, rank again] -> fetch the chosen entries (an entry
  deleted since the search is dropped and refilled, fetch.py) -> results with snippets, explanations.

A dependency failing mid-query degrades the answer instead of failing it: no embedding or no
vector leg -> keyword-only; no keyword leg -> vector-only; both -> Unavailable. The whole call
runs under `settings.deadline_s`; every dependency call has its own, shorter deadline.

The steps that need no I/O live beside this module: request checks (validation.py), merging
the legs (merge.py), results with explanations (results.py) and snippets (snippets.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
from opentelemetry import trace

from ranking import Candidates, RankingConfig, rank
from ranking.profile import BUILTIN_PROFILE, MAX_RERANK_TOP_N, RankingProfile, refuse_model_fields
from ranking.query_features import query_features
from ranking.temporal import detect_temporal_intent
from services.rag_pipeline import permissions, rerankers
from services.rag_pipeline.access import AccessPolicy, Scope
from services.rag_pipeline.federation.fanout import MAX_REMOTE_HITS, Federation, Plan, RemoteQuery
from services.rag_pipeline.federation.hits import LOCAL, Caller
from services.rag_pipeline.federation.filters import for_remotes
from services.rag_pipeline.federation.identity import INCOMING_PATH
from services.rag_pipeline.federation.rescore import Rescorer
from services.rag_pipeline.federation.unify import FederatedSearch, without_local_repeats
from services.rag_pipeline.feedback import SearchLog, SourceVoteCache, record_feedback
from services.rag_pipeline.fetch import load_hits, load_results
from services.rag_pipeline.learned import LearnedRanking, feedback_notes
from services.rag_pipeline.merge import Merged, merge, ranking_candidates
from services.rag_pipeline.models import (
    NO_VISIBLE_SOURCES,
    RankedResult,
    SearchRequest,
    SearchResponse,
)
from services.knowledge_store.models import StoreStatus
from services.rag_pipeline.ports import KnowledgeSource, LanguageModel
from services.rag_pipeline.results import build_results, ranking_config, recency_applies
from services.rag_pipeline.validation import validate_request
from shared.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    NucleusError,
    PermissionDenied,
    Unavailable,
)
from shared.auth.config import EMPTY_CONFIG
from shared.bounds import INT32_MAX, check_int
from shared.identity import OPERATOR, Principal, acting_for
from shared.records import (
    EMPTY_COLUMNS,
    CandidateColumns,
    FeedbackAck,
    QueryPhrases,
    ScoreCompletion,
    SearchFilters,
    TenantStats,
)
from shared.settings import RagPipelineSettings
from shared.telemetry.content import set_content_attribute  # telemetry hook
from shared.telemetry.genai import retrieval_attributes  # telemetry hook

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.rag_pipeline")

PROFILE_CACHE_TTL_S = 5.0
MAX_PHRASES = 5
FEDERATION_RESERVE_S = 1.5      # of the deadline kept for re-scoring and ranking after the fan-out
RANK_MARGIN_S = 0.5             # of the deadline kept for ranking after the re-scoring


@dataclass(frozen=True, slots=True)
class _BothLegs:
    """What the combined store call answered: the keyword leg (columns, analysed terms), the
    vector leg's columns per query vector, and both signals for all their rows."""

    keyword: tuple[CandidateColumns, list[str]]
    dense: list[CandidateColumns]
    completion: ScoreCompletion


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
        # a profile's learned model (learned.py); its field signals are a retrieval call
        self.learned = LearnedRanking(knowledge, signals_timeout_s=settings.retrieval_timeout_s)

    async def close(self) -> None:
        await self.search_log.close()
        await asyncio.gather(self._ks.close(), self._llm.close())

    # ------------------------------------------------------------------ validation
    def validate(self, request: SearchRequest) -> SearchRequest:
        """The request with defaults resolved; InvalidArgument naming the field otherwise."""
        return validate_request(request, self._settings)

    # ------------------------------------------------------------------ access
    async def scope(self, principal: Principal, *, base: SearchFilters = SearchFilters(),
                    only_sources: tuple[str, ...] | None = None) -> Scope:
        """The filters `principal`'s searches run under (tenant groups, source rules, session
        tags); `only_sources` must already be vetted. `Scope.empty`: nothing is visible."""
        return await self.access.scope(principal, base=base, only_sources=only_sources)

    async def search(self, request: SearchRequest, principal: Principal | None, *,
                     scope: Scope | None = None) -> SearchResponse:
        """SearchAndRank for a verified caller (`_search_for`), its answer given a search id (feedback.py)."""
        response = await self._search_for(request, principal, scope)
        return self.search_log.record(response, request, principal, self.tenant_for(request.tenant_id, principal))

    async def _search_for(self, request: SearchRequest, principal: Principal | None,
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
            response = replace(response, results=tuple(r for r in response.results if scope.keep(r.artifact.tags)))
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

    # ------------------------------------------------------------------ profiles
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

    # ------------------------------------------------------------------ the tenant's store
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

    # ------------------------------------------------------------------ search
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
        if caller is None:
            caller = Caller(request.tenant_id)
        request = self.validate(request)
        with tracer.start_as_current_span("rag.search_and_rank") as span:
            span.set_attribute("nucleus.tenant_id", request.tenant_id)
            span.set_attribute("nucleus.top_k_initial", request.top_k_initial)
            span.set_attribute("nucleus.top_k_final", request.top_k_final)
            set_content_attribute(span, "gen_ai.retrieval.query.text", request.query)  # telemetry hook (gated)
            try:
                async with asyncio.timeout(self._settings.deadline_s):
                    response = await self._search(request, plan, caller)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"SearchAndRank did not finish within {self._settings.deadline_s:.1f}s") from None
            span.set_attributes({"nucleus.degraded": response.degraded,
                                 "nucleus.degraded_reasons": list(response.degraded_reasons)})
            span.set_attribute("nucleus.results", len(response.results))
            span.set_attribute("nucleus.profile", f"{response.profile_name}@v{response.profile_version}")
            return response

    async def _search(self, request: SearchRequest, plan: Plan | None = None, caller: Caller | None = None
                      ) -> SearchResponse:
        started: list[FederatedSearch] = []
        self._searching += 1
        try:
            return await self._search_sources(request, plan, caller, started)
        finally:
            self._searching -= 1
            for federated in started:      # an answer or an error: no remote call outlives the query
                federated.cancel()

    async def _search_sources(self, request: SearchRequest, plan: Plan | None, caller: Caller | None,
                              started: list[FederatedSearch]) -> SearchResponse:
        s = self._settings
        timings: list[tuple[str, float]] = []
        reasons: list[str] = []
        notes: list[str] = []
        vanished: set[str] = set()          # entry ids deleted since the search (fetch.py)
        t0 = time.perf_counter()

        def mark(stage: str, since: float) -> float:
            now = time.perf_counter()
            timings.append((stage, (now - since) * 1000.0))
            return now

        profile = await self.resolve_profile(request.tenant_id, request.persona_id, request.prefs.profile_name)
        now = self._clock()
        intent = detect_temporal_intent(request.query, now_year=time.gmtime(now).tm_year)
        t = mark("profile", t0)

        expanded: tuple[str, ...] = ()
        if request.expand:
            with tracer.start_as_current_span("rag.expand") as span:
                try:
                    expansion = await self._llm.expand(request.query, timeout_s=s.embed_timeout_s)
                    expanded = tuple(expansion.phrases[1:])
                    notes.append(f"expansion={expansion.method}: {expansion.note}".strip())
                    span.set_attribute("nucleus.expansion_method", expansion.method)
                except NucleusError as err:
                    reasons.append(f"query expansion unavailable: {err}")
            t = mark("expand", t)
        # The query's phrases, normalised once (stripped, distinct) and carried as one value to
        # the store's keyword leg and the remote sources.
        phrases = QueryPhrases.distinct((request.query, *request.extra_phrases, *expanded), MAX_PHRASES)

        # Federation: the remote sources are asked now, in parallel with the local legs.
        fed = None
        local = plan is None or plan.local
        if plan is not None and plan.remotes:
            budget = s.deadline_s - (time.perf_counter() - t0) - min(FEDERATION_RESERVE_S, s.deadline_s / 3)
            fed = FederatedSearch(self.federation, self.rescorer, plan,
                                  RemoteQuery(request.query, tuple(phrases),
                                              min(self.remote_hits, request.top_k_initial),
                                              caller, request.remote_resources, INCOMING_PATH.get(),
                                              for_remotes(request.filters)),
                                  max(0.05, budget), votes=self.source_votes.of(request.tenant_id)).start()
            started.append(fed)
        combined: _BothLegs | None = None
        keyword_task: asyncio.Task[tuple[CandidateColumns, list[str]]] | None = None
        if s.combined_legs and local and (s.combined_legs_alone or self._searching > 1):
            # Both legs in one store call after the embedding: one round trip less per query,
            # for throughput when searches run concurrently; a lone search keeps its keyword leg
            # beside the embedding (lower latency, the CPU is there). Failing (other than
            # NotFound / InvalidArgument), the two calls below answer instead.
            vectors, embed_reason = await self._embed(request, phrases)
            t = mark("embed", t)
            if vectors is not None:
                try:
                    combined = await self._both_legs(request, phrases, vectors, profile.feedback_expansion)
                except NotFound:
                    if fed is None:
                        raise
                    # federation: nothing stored here yet; the keyword call below says so as before
        else:
            # Keyword leg starts now; it does not need vectors.
            keyword_task = (asyncio.create_task(self._keyword_leg(request, phrases, profile, local))
                            if s.overlap_keyword_leg else None)
            vectors, embed_reason = await self._embed(request, phrases)
            t = mark("embed", t)
        if embed_reason:
            reasons.append(embed_reason)
        if combined is None and keyword_task is None:
            keyword_task = asyncio.create_task(self._keyword_leg(request, phrases, profile, local))
        # The vector call completes both legs' scores (merge.py), so it names the keyword leg's
        # rows: that leg runs beside the embedding and has usually answered by now.
        try:
            keyword_hits, terms = combined.keyword if combined is not None else await keyword_task
            keyword_error: NucleusError | None = None
            notes += feedback_notes(profile, phrases, terms)
        except NotFound as err:
            if fed is None:
                raise
            local = False                   # federation: a tenant with nothing stored yet, remotes only
            keyword_hits, keyword_error = EMPTY_COLUMNS, None
            notes.append(f"local: {err.message}")
        except InvalidArgument:
            raise
        except NucleusError as err:
            keyword_hits, keyword_error = EMPTY_COLUMNS, err
            reasons.append(f"keyword retrieval unavailable: {err}")
        dense_hits: list[CandidateColumns] | None = None if combined is None else combined.dense
        completion: ScoreCompletion | None = None if combined is None else combined.completion
        if vectors is not None and local and combined is None:
            with tracer.start_as_current_span("rag.retrieve.vector") as span:
                retrieval_attributes(span, data_source="knowledge_store.vector", top_k=request.top_k_initial,
                                     query=list(phrases))  # telemetry hook
                try:
                    dense_hits, completion = await self._ks.candidates_by_vector_with_completion(
                        request.tenant_id, vectors, request.top_k_initial, request.filters, keywords=phrases,
                        complete_rows=keyword_hits.row_ids, feedback_expansion=profile.feedback_expansion,
                        timeout_s=s.retrieval_timeout_s)
                    span.set_attribute("nucleus.candidates", sum(len(h) for h in dense_hits))
                except (NotFound, InvalidArgument):
                    raise
                except NucleusError as err:
                    reasons.append(f"vector retrieval unavailable: {err}")
        t = mark("retrieve", t)
        local_failed = keyword_error is not None and dense_hits is None
        if local_failed and fed is None:
            raise Unavailable("both retrieval legs failed: " + "; ".join(reasons))

        with tracer.start_as_current_span("rag.merge") as span:
            collapse = s.collapse_by_artifact if request.collapse is None else request.collapse
            merged = merge(dense_hits or [], keyword_hits, collapse=collapse, completion=completion)
            span.set_attribute("nucleus.candidates", len(merged))
        t = mark("merge", t)
        final_k, reports = request.top_k_final, ()
        if plan is not None:
            local_report = FederatedSearch.local_report(
                local and not local_failed, (t - t0) * 1000.0, len(merged) if local else 0,
                "; ".join(reasons) if local_failed else "" if local else "nothing stored for this tenant"
            ) if plan.local else None
            if fed is not None:
                # Re-scoring embeds every remote hit not seen before: it may use what is left of
                # the request's deadline (less a margin for ranking), not just one embed call's.
                left = s.deadline_s - (time.perf_counter() - t0) - RANK_MARGIN_S
                remote_rows, remote_reasons = await fed.candidates(
                    request.tenant_id, phrases, vectors, request.tenant_id, timeout_s=max(s.embed_timeout_s, left))
                reasons += remote_reasons
                merged = merged + remote_rows
                # Room for remote results that repeat a local one, dropped after the fetch.
                final_k += min(len(remote_rows), request.top_k_final)
                timings += [("slowest_source", fed.timings.slowest_source_ms), ("rescore", fed.timings.rescore_ms)]
                notes += fed.notes()            # remote_embedded, remote_vectors, remote_duplicates
                t = mark("federate", t)
            reports = tuple(r for r in ([local_report] if local_report else []) + (fed.reports if fed else
                                                                                   list(plan.skipped)))
            if local_failed and not any(m.origin for m in merged):
                raise Unavailable("both retrieval legs failed and no remote source answered: " + "; ".join(reasons))

        apply_recency = recency_applies(request.prefs.recency_mode or profile.recency_mode, intent.has_intent)
        stats = completion.keyword_stats if completion is not None else None
        features = query_features(request.query, stats.document_frequency if stats else (),
                                  stats.entries if stats else 0)
        config = ranking_config(request.prefs, profile, apply_recency, now, features)
        # Model re-ranking is off by default: a request asks for it (the default method), or the
        # profile names a re-ranker; the profile says how many rows it re-scores.
        rerank = (request.prefs.rerank or bool(profile.reranker)) and len(merged) > 1
        with tracer.start_as_current_span("rag.rank") as span:
            candidates = ranking_candidates(merged)
            # With a re-rank, this first ranking picks the rows the model scores (_rerank).
            k = min(max(1, min(profile.rerank_top_n, MAX_RERANK_TOP_N)), len(merged)) if rerank else final_k
            if merged and self.learned.wanted(profile):      # ranks once, with the model if there is one
                # vectors[0]: the query's own embedding (or the caller's user_query_vector); the
                # signals call may use what is left of the deadline, less the margin for ranking
                left = s.deadline_s - (time.perf_counter() - t0) - RANK_MARGIN_S
                ranked, candidates, learned = await self.learned.apply(
                    request.tenant_id, request.query, profile, merged, candidates, config, k, reasons, notes,
                    query_vector=vectors[0] if vectors is not None else None,
                    timeout_s=max(0.05, min(s.retrieval_timeout_s, left)))
            else:
                ranked, learned = (rank(candidates, config, k) if merged else None), None
            span.set_attribute("nucleus.candidates", len(merged))
        t = mark("rank", t)

        if ranked is not None and rerank:
            with tracer.start_as_current_span("rag.rerank"):
                ranked, candidates, rerank_reason = await self._rerank(replace(request, top_k_final=final_k), merged,
                                                                       candidates, config, ranked, reasons, vanished,
                                                                       method=profile.reranker)
                if rerank_reason:
                    reasons.append(rerank_reason)
                learned = None                          # the re-ranker's score replaced the model's
            t = mark("rerank", t)

        results: tuple[RankedResult, ...] = ()
        if ranked is not None:
            # The legs sent ranking signals only; fetch entries and artifacts for the results in
            # one call. (Asking the legs for the full hits of their best k (`top_hits`) did not
            # save it: on SciFact 97% of queries still missed a result with k = top_k_final and
            # 16% with 50/20, and the larger leg answers cost more than the call: probe p50
            # 15.0 ms with k = top_k_final vs 14.6 ms without, means of four alternating pairs.)
            # An entry deleted since the search is dropped and its place refilled (fetch.py).
            kept, kept_candidates, ranked = await load_results(
                self._ks, request.tenant_id, merged, candidates, ranked, config, final_k, reasons,
                vanished, timeout_s=s.retrieval_timeout_s)
            if vanished:
                notes.append(f"vanished={len(vanished)} (deleted during the search, refilled)")
            if ranked is not None:
                results = build_results(kept, ranked, kept_candidates, config, request.query, request.prefs.explain,
                                        now_unix=now, learned=learned)
                if fed is not None:
                    results, repeats = without_local_repeats(results, request.top_k_final)
                    if repeats:
                        notes.append(f"remote_repeats_of_local={repeats}")
            t = mark("fetch", t)
        mark("total", t0)
        debug = "; ".join([f"phrases={len(phrases)}", f"candidates={len(merged)}",
                           f"temporal_cues={','.join(intent.cues) or '-'}", *notes])
        return SearchResponse(
            results=results, degraded=bool(reasons), degraded_reasons=tuple(reasons),
            profile_name=profile.name, profile_version=profile.version, query_phrases=tuple(phrases),
            candidates_considered=len(merged), timings=tuple(timings), temporal_intent=intent.has_intent,
            debug=debug, sources=reports,
        )

    async def _both_legs(self, request: SearchRequest, phrases: QueryPhrases, vectors: np.ndarray,
                         feedback_expansion: str) -> _BothLegs | None:
        """Both retrieval legs in one store call; None when it failed for a reason the two
        separate calls may not share (they then answer, or degrade, as without it)."""
        with tracer.start_as_current_span("rag.retrieve.hybrid") as span:
            retrieval_attributes(span, data_source="knowledge_store.hybrid", top_k=request.top_k_initial,
                                 query=list(phrases))  # telemetry hook
            try:
                keyword, terms, dense, completion = await self._ks.candidates_by_both_legs(
                    request.tenant_id, vectors, request.top_k_initial, request.filters, keywords=phrases,
                    feedback_expansion=feedback_expansion, timeout_s=self._settings.retrieval_timeout_s)
            except (NotFound, InvalidArgument):
                raise
            except NucleusError as err:
                log.info("combined retrieval call failed (%s: %s); calling the legs separately",
                         type(err).__name__, err)
                span.set_attribute("nucleus.fallback", True)
                return None
            span.set_attribute("nucleus.candidates", len(keyword) + sum(len(h) for h in dense))
            return _BothLegs((keyword, terms), dense, completion)

    async def _keyword_leg(self, request: SearchRequest, phrases: QueryPhrases, profile: RankingProfile,
                           local: bool = True) -> tuple[CandidateColumns, list[str]]:
        if not local:                       # federation: the local store is not among the sources
            return EMPTY_COLUMNS, []
        with tracer.start_as_current_span("rag.retrieve.keyword") as span:
            retrieval_attributes(span, data_source="knowledge_store.keyword", top_k=request.top_k_initial,
                                 query=list(phrases))  # telemetry hook
            hits, terms = await self._ks.candidates_by_filters(
                request.tenant_id, phrases, (), request.top_k_initial, request.filters,
                feedback_expansion=profile.feedback_expansion, timeout_s=self._settings.retrieval_timeout_s)
            span.set_attribute("nucleus.candidates", len(hits))
            return hits, terms

    async def _embed(self, request: SearchRequest, phrases: QueryPhrases) -> tuple[np.ndarray | None, str]:
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
                return given, ""
            try:
                vectors = await self._llm.embed(to_embed, timeout_s=self._settings.embed_timeout_s)
            except NucleusError as err:
                return given, f"embedding unavailable: {err}"
            if given is not None:
                if given.shape[1] != vectors.shape[1]:
                    raise InvalidArgument("user_query_vector",
                                          f"expected {vectors.shape[1]} dimensions, got {given.shape[1]}")
                vectors = np.vstack([given, vectors])
            return vectors, ""

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
        ranked = rank(updated, config, request.top_k_final)
        return ranked, updated, ""
