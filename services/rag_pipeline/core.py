"""RAGPipeline core: SearchAndRank (seed 001 §3) over the KnowledgeStore and LlmOrchestration
clients, with the numpy 4R ranking core, ranking profiles and feedback.

One query, step by step:
  validate -> resolve profile -> detect temporal intent -> [expand] -> embed all phrases in one
  batch (the keyword leg starts at once, in parallel with embedding) -> vector leg (all phrase
  vectors, one call) -> merge & de-duplicate by entry id keeping every raw signal -> rank
  (ranking/, vectorised) -> [rerank top N, rank again] -> results with snippets & explanations.

A dependency failing mid-query degrades the answer instead of failing it: no embedding or no
vector leg -> keyword-only; no keyword leg -> vector-only; both -> Unavailable. The whole call
runs under `settings.deadline_s`; every dependency call has its own, shorter deadline.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import numpy as np
from opentelemetry import trace

from ranking import Candidates, RankingConfig, rank
from ranking.factors import reputation as reputation_factor
from ranking.temporal import detect_temporal_intent
from services.knowledge_store.client import KnowledgeStoreClient
from ranking.config import FUSIONS, RECENCY_MODES
from ranking.profile import BUILTIN_PROFILE, RankingProfile
from shared.records import EMPTY_COLUMNS, ArtifactSummary, CandidateColumns, Entry, FeedbackAck, Hit
from services.llm_orchestration.client import LlmOrchestrationClient
from services.rag_pipeline.models import (
    Explanation,
    Preferences,
    RankedResult,
    SearchRequest,
    SearchResponse,
)
from shared.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    NucleusError,
    PermissionDenied,
    Unavailable,
)
from shared.identity import Principal
from shared.settings import RagPipelineSettings
from shared.tracing import retrieval_attributes, set_content_attribute  # telemetry hook

log = logging.getLogger(__name__)
tracer = trace.get_tracer("nucleus.rag_pipeline")

PROFILE_CACHE_TTL_S = 5.0
RERANK_TOP_N = 20
SNIPPET_CHARS = 320
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(slots=True)
class _Merged:
    """One candidate (an entry, or an artifact's pooled chunks) with every raw signal.

    `signals` are the representative entry's (timestamp, richness, reputation prior, helpful,
    unhelpful) from the legs' columns; `hit` (full entry and artifact) is fetched only for the
    candidates that are returned (or re-ranked)."""
    entry_id: str
    artifact_id: str
    signals: tuple[int, float, float, int, int]
    dense: float = math.nan
    dense_rank: int = 0
    bm25: float = math.nan
    bm25_rank: int = 0
    hit: Hit | None = None


class RagPipeline:
    def __init__(self, settings: RagPipelineSettings, knowledge: KnowledgeStoreClient,
                 llm: LlmOrchestrationClient) -> None:
        self._settings = settings
        self._ks = knowledge
        self._llm = llm
        self._profiles: dict[tuple[str, str, str], tuple[float, RankingProfile | None]] = {}

    async def close(self) -> None:
        await asyncio.gather(self._ks.close(), self._llm.close())

    # ------------------------------------------------------------------ validation
    def validate(self, request: SearchRequest) -> SearchRequest:
        s = self._settings
        if not request.tenant_id:
            raise InvalidArgument("tenant_id", "is required (it comes from the caller's identity)")
        query = request.query.strip() if request.query else ""
        if not query:
            raise InvalidArgument("user_query_text", "must not be empty")
        if len(request.query) > s.max_query_chars:
            raise InvalidArgument("user_query_text", f"is {len(request.query)} characters; at most {s.max_query_chars} accepted")
        k_final = request.top_k_final or s.default_top_k_final
        k_init = request.top_k_initial or max(s.default_top_k_initial, k_final)
        if not 1 <= k_final <= s.max_top_k_final:
            raise InvalidArgument("top_k_final_rank", f"must be between 1 and {s.max_top_k_final}, got {k_final}")
        if not 1 <= k_init <= s.max_top_k_initial:
            raise InvalidArgument("top_k_initial_retrieve", f"must be between 1 and {s.max_top_k_initial}, got {k_init}")
        if k_init < k_final:
            raise InvalidArgument("top_k_initial_retrieve",
                                  f"must be >= top_k_final_rank ({k_final}), got {k_init}")
        prefs = request.prefs
        if prefs.weights is not None:
            _validate_weights(prefs.weights, "ranking_prefs")
        if prefs.fusion and prefs.fusion not in FUSIONS:
            raise InvalidArgument("ranking_prefs.fusion_method", f"must be one of {FUSIONS}")
        if prefs.recency_mode and prefs.recency_mode not in RECENCY_MODES:
            raise InvalidArgument("ranking_prefs.recency_mode", f"must be one of {RECENCY_MODES}")
        if prefs.half_life_days < 0 or not math.isfinite(prefs.half_life_days):
            raise InvalidArgument("ranking_prefs.recency_half_life_days", "must be a finite number >= 0")
        if request.query_vector is not None:
            vec = np.asarray(request.query_vector, dtype=np.float32)
            if vec.ndim != 1 or vec.size == 0 or not np.all(np.isfinite(vec)):
                raise InvalidArgument("user_query_vector", "must be a non-empty list of finite floats")
        if len(request.extra_phrases) > 4:
            raise InvalidArgument("extra_query_phrases", f"at most 4 accepted, got {len(request.extra_phrases)}")
        for i, phrase in enumerate(request.extra_phrases):
            if not phrase.strip():
                raise InvalidArgument(f"extra_query_phrases[{i}]", "must not be empty")
            if len(phrase) > s.max_query_chars:
                raise InvalidArgument(f"extra_query_phrases[{i}]", f"at most {s.max_query_chars} characters accepted")
        return replace(request, query=query, top_k_final=k_final, top_k_initial=k_init)

    @staticmethod
    def scope_to(request: SearchRequest, principal: Principal) -> SearchRequest:
        """The request as the verified principal may make it: its tenant, its groups' view."""
        if request.tenant_id and request.tenant_id != principal.tenant_id:
            raise PermissionDenied(f"tenant_id '{request.tenant_id}' is not the caller's tenant")
        filters = replace(request.filters, visibility_groups=principal.groups, enforce_visibility=True)
        return replace(request, tenant_id=principal.tenant_id, filters=filters)

    @staticmethod
    def tenant_for(requested: str, principal: Principal | None) -> str:
        """The tenant a non-search call acts on: the principal's, when there is one."""
        if principal is None:
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

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        """Stored (and validated, naming the field) by the KnowledgeStore, the system of record."""
        stored = await self._ks.put_profile(profile)
        self._profiles.clear()
        return stored

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile:
        return await self._ks.get_profile(tenant_id, persona_id, name, version)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        return await self._ks.list_profiles(tenant_id, persona_id)

    async def record_feedback(self, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str) -> tuple[FeedbackAck, float]:
        """Persist one vote; returns the ack and the artifact's smoothed reputation after it."""
        if target not in ("entry", "artifact"):
            raise InvalidArgument("target", "must be 'entry' or 'artifact'")
        if not target_id:
            raise InvalidArgument("target_id", "is required")
        ack = await self._ks.record_feedback(tenant_id, target, target_id, helpful, user_id)
        profile = await self.resolve_profile(tenant_id, "", "")
        rep = reputation_factor(np.array([ack.reputation_prior], np.float32), np.array([ack.feedback_helpful], np.int32),
                                np.array([ack.feedback_unhelpful], np.int32), RankingConfig().default_reputation,
                                profile.reputation_prior_strength)
        return ack, float(rep[0])

    # ------------------------------------------------------------------ search
    async def search_and_rank(self, request: SearchRequest) -> SearchResponse:
        request = self.validate(request)
        with tracer.start_as_current_span("rag.search_and_rank") as span:
            span.set_attribute("nucleus.tenant_id", request.tenant_id)
            span.set_attribute("nucleus.top_k_initial", request.top_k_initial)
            span.set_attribute("nucleus.top_k_final", request.top_k_final)
            set_content_attribute(span, "gen_ai.retrieval.query.text", request.query)  # telemetry hook (gated)
            try:
                async with asyncio.timeout(self._settings.deadline_s):
                    response = await self._search(request)
            except TimeoutError:
                raise DeadlineExceeded(f"SearchAndRank did not finish within {self._settings.deadline_s:.1f}s") from None
            span.set_attribute("nucleus.degraded", response.degraded)
            span.set_attribute("nucleus.results", len(response.results))
            span.set_attribute("nucleus.profile", f"{response.profile_name}@v{response.profile_version}")
            return response

    async def _search(self, request: SearchRequest) -> SearchResponse:
        s = self._settings
        timings: list[tuple[str, float]] = []
        reasons: list[str] = []
        notes: list[str] = []
        t0 = time.perf_counter()

        def mark(stage: str, since: float) -> float:
            now = time.perf_counter()
            timings.append((stage, (now - since) * 1000.0))
            return now

        profile = await self.resolve_profile(request.tenant_id, request.persona_id, request.prefs.profile_name)
        intent = detect_temporal_intent(request.query)
        t = mark("profile", t0)

        phrases = [request.query, *[p.strip() for p in request.extra_phrases]]
        if request.expand:
            with tracer.start_as_current_span("rag.expand") as span:
                try:
                    expansion = await self._llm.expand(request.query, timeout_s=s.embed_timeout_s)
                    phrases += [p for p in expansion.phrases[1:] if p not in phrases]
                    notes.append(f"expansion={expansion.method}: {expansion.note}".strip())
                    span.set_attribute("nucleus.expansion_method", expansion.method)
                except NucleusError as err:
                    reasons.append(f"query expansion unavailable: {err}")
            t = mark("expand", t)
        phrases = _dedupe(phrases)[:5]

        # Keyword leg starts now; it does not need vectors.
        keyword_task = asyncio.create_task(self._keyword_leg(request, phrases)) if s.overlap_keyword_leg else None
        vectors, embed_reason = await self._embed(request, phrases)
        if keyword_task is None:
            keyword_task = asyncio.create_task(self._keyword_leg(request, phrases))
        t = mark("embed", t)
        if embed_reason:
            reasons.append(embed_reason)
        dense_hits: list[CandidateColumns] | None = None
        dense_error: NucleusError | None = None
        if vectors is not None:
            with tracer.start_as_current_span("rag.retrieve.vector") as span:
                retrieval_attributes(span, data_source="knowledge_store.vector", top_k=request.top_k_initial,
                                     query=phrases)  # telemetry hook
                try:
                    dense_hits = await self._ks.candidates_by_vector(
                        request.tenant_id, vectors, request.top_k_initial, request.filters,
                        timeout_s=s.retrieval_timeout_s)
                    span.set_attribute("nucleus.candidates", sum(len(h) for h in dense_hits))
                except (NotFound, InvalidArgument):
                    keyword_task.cancel()
                    raise
                except NucleusError as err:
                    dense_error = err
                    reasons.append(f"vector retrieval unavailable: {err}")
        try:
            keyword_hits, _terms = await keyword_task
            keyword_error: NucleusError | None = None
        except (NotFound, InvalidArgument):
            raise
        except NucleusError as err:
            keyword_hits, keyword_error = EMPTY_COLUMNS, err
            reasons.append(f"keyword retrieval unavailable: {err}")
        t = mark("retrieve", t)
        if keyword_error is not None and dense_hits is None:
            raise Unavailable("both retrieval legs failed: " + "; ".join(reasons))

        with tracer.start_as_current_span("rag.merge") as span:
            merged = _merge(dense_hits or [], keyword_hits, collapse=s.collapse_by_artifact)
            span.set_attribute("nucleus.candidates", len(merged))
        t = mark("merge", t)

        apply_recency = _recency_applies(request.prefs.recency_mode or profile.recency_mode, intent.has_intent)
        config = _config_for(request.prefs, profile, apply_recency)
        with tracer.start_as_current_span("rag.rank") as span:
            candidates = _candidates(merged)
            ranked = rank(candidates, config, request.top_k_final) if merged else None
            span.set_attribute("nucleus.candidates", len(merged))
        t = mark("rank", t)

        if ranked is not None and request.prefs.rerank and len(merged) > 1:
            with tracer.start_as_current_span("rag.rerank"):
                ranked, candidates, rerank_reason = await self._rerank(request, merged, candidates, config, reasons)
                if rerank_reason:
                    reasons.append(rerank_reason)
            t = mark("rerank", t)

        results: tuple[RankedResult, ...] = ()
        if ranked is not None:
            # The legs sent ranking signals only; fetch entries and artifacts for the results in
            # one call. (Asking the legs for the full hits of their best k (`top_hits`) did not
            # save it: on SciFact 97% of queries still missed a result with k = top_k_final and
            # 16% with 50/20, and the larger leg answers cost more than the call: probe p50
            # 15.0 ms with k = top_k_final vs 14.6 ms without, means of four alternating pairs.)
            await self._load_hits(request.tenant_id, [merged[int(r)] for r in ranked.rows], reasons)
            results = _results(merged, ranked, candidates, config, request.query, request.prefs.explain)
            t = mark("fetch", t)
        mark("total", t0)
        debug = "; ".join([f"phrases={len(phrases)}", f"candidates={len(merged)}",
                           f"temporal_cues={','.join(intent.cues) or '-'}", *notes])
        return SearchResponse(
            results=results, degraded=bool(reasons), degraded_reasons=tuple(reasons),
            profile_name=profile.name, profile_version=profile.version, query_phrases=tuple(phrases),
            candidates_considered=len(merged), timings=tuple(timings), temporal_intent=intent.has_intent,
            debug=debug,
        )

    async def _keyword_leg(self, request: SearchRequest, phrases: Sequence[str]) -> tuple[CandidateColumns, list[str]]:
        with tracer.start_as_current_span("rag.retrieve.keyword") as span:
            retrieval_attributes(span, data_source="knowledge_store.keyword", top_k=request.top_k_initial,
                                 query=list(phrases))  # telemetry hook
            hits, terms = await self._ks.candidates_by_filters(
                request.tenant_id, phrases[0], list(phrases[1:]), request.top_k_initial, request.filters,
                timeout_s=self._settings.retrieval_timeout_s)
            span.set_attribute("nucleus.candidates", len(hits))
            return hits, terms

    async def _embed(self, request: SearchRequest, phrases: list[str]) -> tuple[np.ndarray | None, str]:
        with tracer.start_as_current_span("rag.embed") as span:
            span.set_attribute("nucleus.phrases", len(phrases))
            given = None
            if request.query_vector is not None:
                given = np.asarray(request.query_vector, dtype=np.float32)[None, :]
                norm = float(np.linalg.norm(given))
                if norm > 0:
                    given = given / norm
                to_embed = phrases[1:]
            else:
                to_embed = phrases
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

    async def _load_hits(self, tenant_id: str, chosen: list[_Merged], reasons: list[str]) -> None:
        """Fetch the full entry and artifact of the chosen candidates (one GetEntries call). If
        the store cannot answer, or an entry vanished since the search, the result keeps its
        ids and ranking signals with empty text, and the response says so."""
        missing = [m for m in chosen if m.hit is None]
        if not missing:
            return
        try:
            fetched = {h.entry.id: h for h in await self._ks.get_entries(
                tenant_id, [m.entry_id for m in missing], timeout_s=self._settings.retrieval_timeout_s)}
        except NucleusError as err:
            fetched = {}
            reasons.append(f"entry texts unavailable, ids and scores returned: {err}")
        for m in missing:
            m.hit = fetched.get(m.entry_id) or _placeholder_hit(m, tenant_id)

    async def _rerank(self, request: SearchRequest, merged: list[_Merged], candidates: Candidates,
                      config: RankingConfig, reasons: list[str]) -> tuple[Any, Candidates, str]:
        first = rank(candidates, config, min(RERANK_TOP_N, len(merged)))
        rows = [int(r) for r in first.rows]
        await self._load_hits(request.tenant_id, [merged[r] for r in rows], reasons)
        try:
            scored = await self._llm.rerank(request.query, [(merged[r].hit.entry.id, merged[r].hit.entry.text)
                                                             for r in rows], timeout_s=self._settings.embed_timeout_s)
        except NucleusError as err:
            return rank(candidates, config, request.top_k_final), candidates, f"rerank unavailable: {err}"
        rerank_col = np.full(len(merged), np.nan, dtype=np.float32)
        rerank_col[rows] = np.asarray(scored.scores, dtype=np.float32)
        updated = replace(candidates, rerank=rerank_col)
        ranked = rank(updated, config, request.top_k_final)
        return ranked, updated, ""


# ---------------------------------------------------------------------- helpers
def _validate_weights(weights: Sequence[float], field: str) -> None:
    names = ("relevancy_weight", "recency_weight", "richness_weight", "reputation_weight")
    for name, w in zip(names, weights):
        if not math.isfinite(w) or w < 0:
            raise InvalidArgument(f"{field}.{name}", f"must be a finite number >= 0, got {w}")
    if sum(weights) <= 0:
        raise InvalidArgument(f"{field}.weights", "must not all be zero")


def _dedupe(phrases: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for p in phrases:
        key = p.strip().lower()
        if key and key not in seen:
            seen.add(key)
            out.append(p.strip())
    return out


def _recency_applies(mode: str, has_intent: bool) -> bool:
    return mode == "always" or (mode in ("", "auto") and has_intent)


def _config_for(prefs: Preferences, profile: RankingProfile, apply_recency: bool) -> RankingConfig:
    weights = prefs.weights or (profile.relevancy_weight, profile.recency_weight, profile.richness_weight,
                                profile.reputation_weight)
    return RankingConfig(
        weights=tuple(float(w) for w in weights),
        fusion=prefs.fusion or profile.fusion_method,
        dense_weight=profile.dense_weight,
        half_life_days=prefs.half_life_days or profile.recency_half_life_days,
        apply_recency=apply_recency,
        now_unix=time.time(),
        prior_strength=profile.reputation_prior_strength,
    )


def _merge(dense: list[CandidateColumns], keyword: CandidateColumns, *, collapse: bool = True) -> list[_Merged]:
    """De-duplicate by entry id, keeping the best cosine/rank over phrases and the BM25 signal.

    With `collapse`, candidates are then pooled per artifact (MaxP, as in passage-level
    retrieval of long documents): the artifact's dense signal is its best chunk's cosine, its
    BM25 signal its best chunk's BM25, each with the best rank; it is represented by the chunk
    with the strongest single signal. Without pooling, a document whose best dense chunk and
    best keyword chunk differ would see its evidence split over two half-scored candidates,
    and near-duplicate chunks of one document would crowd out other documents.
    """
    by_id: dict[str, _Merged] = {}
    for per_phrase in dense:
        for rank_, (entry_id, artifact_id, score, signals) in enumerate(_rows(per_phrase), start=1):
            m = by_id.get(entry_id)
            if m is None:
                by_id[entry_id] = _Merged(entry_id, artifact_id, signals, dense=score, dense_rank=rank_)
            else:
                if math.isnan(m.dense) or score > m.dense:
                    m.dense = score
                m.dense_rank = rank_ if m.dense_rank == 0 else min(m.dense_rank, rank_)
    for rank_, (entry_id, artifact_id, score, signals) in enumerate(_rows(keyword), start=1):
        m = by_id.get(entry_id)
        if m is None:
            by_id[entry_id] = _Merged(entry_id, artifact_id, signals, bm25=score, bm25_rank=rank_)
        else:
            m.bm25, m.bm25_rank = score, rank_
    if not collapse:
        return list(by_id.values())
    by_artifact: dict[str, _Merged] = {}
    for m in by_id.values():
        pooled = by_artifact.get(m.artifact_id)
        if pooled is None:
            by_artifact[m.artifact_id] = replace(m)
            continue
        if _best_rank(m) < _best_rank(pooled):
            pooled.entry_id, pooled.signals = m.entry_id, m.signals
        if not math.isnan(m.dense) and (math.isnan(pooled.dense) or m.dense > pooled.dense):
            pooled.dense = m.dense
        if not math.isnan(m.bm25) and (math.isnan(pooled.bm25) or m.bm25 > pooled.bm25):
            pooled.bm25 = m.bm25
        pooled.dense_rank = _min_rank(pooled.dense_rank, m.dense_rank)
        pooled.bm25_rank = _min_rank(pooled.bm25_rank, m.bm25_rank)
    return list(by_artifact.values())


def _rows(c: CandidateColumns) -> Iterator[tuple[str, str, float, tuple[int, float, float, int, int]]]:
    """(entry id, artifact id, score, signals) per candidate, best first."""
    signals = zip(c.timestamps_unix.tolist(), c.richness.tolist(), c.reputation_prior.tolist(),
                  c.feedback_helpful.tolist(), c.feedback_unhelpful.tolist())
    return zip(c.entry_ids, c.artifact_ids, c.scores.tolist(), signals)


def _placeholder_hit(m: _Merged, tenant_id: str) -> Hit:
    """A result whose entry could not be fetched: its ids and ranking signals, no text."""
    ts, richness, reputation, helpful, unhelpful = m.signals
    return Hit(entry=Entry(id=m.entry_id, tenant_id=tenant_id, persona_id="", artifact_id=m.artifact_id,
                           chunk_index=0, text="", headline="", content_summary="", timestamp_unix=ts,
                           richness=richness),
               artifact=ArtifactSummary(artifact_id=m.artifact_id, reputation_prior=reputation,
                                        feedback_helpful=helpful, feedback_unhelpful=unhelpful),
               score=0.0, rank=0)


def _min_rank(a: int, b: int) -> int:
    """The better of two 1-based ranks where 0 means absent."""
    return b if a == 0 else a if b == 0 else min(a, b)


def _best_rank(m: _Merged) -> int:
    return _min_rank(m.dense_rank, m.bm25_rank) or 1 << 30


def _candidates(merged: list[_Merged]) -> Candidates:
    n = len(merged)
    ts, richness, reputation, helpful, unhelpful = zip(*(m.signals for m in merged)) if n else ((),) * 5
    return Candidates.build(
        dense=[m.dense for m in merged],
        bm25=[m.bm25 for m in merged],
        dense_rank=[m.dense_rank for m in merged],
        bm25_rank=[m.bm25_rank for m in merged],
        timestamp=np.asarray(ts, dtype=np.float64),
        richness=richness,
        reputation_prior=reputation,
        helpful=helpful,
        unhelpful=unhelpful,
        rerank=np.full(n, np.nan, dtype=np.float32),
    )


def _results(merged: list[_Merged], ranked: Any, candidates: Candidates, config: RankingConfig, query: str,
             explain: bool) -> tuple[RankedResult, ...]:
    out = []
    weights = tuple(ranked.weights.tolist())
    now = config.now_unix or time.time()
    rows = ranked.rows.tolist()              # plain Python numbers once, not numpy scalars per field
    overall, factors = ranked.overall.tolist(), ranked.factors.tolist()
    if explain:
        contributions = ranked.contributions.tolist()
        dense_norm, bm25_norm = ranked.dense_norm.tolist(), ranked.bm25_norm.tolist()
        rerank = np.nan_to_num(candidates.rerank[ranked.rows], nan=0.0).tolist()
    for pos, row in enumerate(rows):
        m = merged[row]
        explanation = None
        if explain:
            e, a = m.hit.entry, m.hit.artifact
            ts = e.timestamp_unix or a.modified_unix or a.created_unix
            explanation = Explanation(
                weights=weights,
                contributions=tuple(contributions[pos]),
                dense_cosine=0.0 if math.isnan(m.dense) else m.dense,
                bm25=0.0 if math.isnan(m.bm25) else m.bm25,
                dense_rank=m.dense_rank, bm25_rank=m.bm25_rank,
                dense_norm=dense_norm[pos], bm25_norm=bm25_norm[pos], rerank_score=rerank[pos],
                fusion_method=config.fusion, recency_applied=config.apply_recency,
                age_days=max(0.0, (now - ts) / 86400.0) if ts else -1.0,
            )
        out.append(RankedResult(entry=m.hit.entry, artifact=m.hit.artifact, snippet=make_snippet(m.hit.entry.text, query),
                                overall=overall[pos], scores=tuple(factors[pos]), explanation=explanation))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _snippet_terms(query: str) -> tuple[str, ...]:
    """The query's distinct lower-cased words of more than 2 chars."""
    return tuple({w.lower() for w in _WORD.findall(query) if len(w) > 2})


def _term_hits(text: str, terms: tuple[str, ...]) -> list[tuple[int, str]]:
    """(position, term) of every occurrence of the terms, case-insensitive, by position.
    str.find on the lower-cased text (C speed); a text whose lower-casing changes its length
    (rare Unicode) falls back to a case-insensitive regex so positions stay exact."""
    lower = text.lower()
    hits: list[tuple[int, str]] = []
    if len(lower) == len(text):
        for term in terms:
            pos = lower.find(term)
            while pos >= 0:
                hits.append((pos, term))
                pos = lower.find(term, pos + len(term))
    else:
        pattern = re.compile("|".join(map(re.escape, sorted(terms, key=len, reverse=True))), re.IGNORECASE)
        hits = [(m.start(), m.group().lower()) for m in pattern.finditer(text)]
    hits.sort()
    return hits


def make_snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """A window of at most `limit` chars around the densest cluster of distinct query words,
    starting at the beginning of its sentence when that is near; the text's opening when no
    query word occurs. Substring search, no tokenising (this runs for every returned result)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    start = 0
    terms = _snippet_terms(query)
    if terms:
        hits = _term_hits(text, terms)
        best_distinct = 0
        reach = limit * 3 // 4                   # the cluster must fit well inside the window
        for i, (pos, _) in enumerate(hits):
            seen = set()
            for j in range(i, len(hits)):
                if hits[j][0] - pos > reach:
                    break
                seen.add(hits[j][1])
            if len(seen) > best_distinct:
                best_distinct, start = len(seen), pos
        if start:
            sentence = max(text.rfind(". ", 0, start), text.rfind("? ", 0, start), text.rfind("! ", 0, start),
                           text.rfind("\n", 0, start))
            if sentence >= 0 and start - sentence <= limit // 3:
                start = sentence + 1
            else:                                # mid-sentence: begin at a word boundary
                space = text.rfind(" ", 0, start)
                start = space + 1 if space >= 0 and start - space <= 30 else start
    window = text[start:start + limit + 1].strip()
    if len(window) <= limit:
        return window
    end = max(window.rfind(". ", 0, limit), window.rfind("? ", 0, limit), window.rfind("! ", 0, limit))
    if end >= limit // 2:
        return window[:end + 1]
    return window[:limit].rsplit(" ", 1)[0] + "…"
