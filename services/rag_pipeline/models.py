"""Plain core types of the RAG pipeline (no protobuf), and the up-front check of a SearchAndRank
request (`validate_request`): each problem names its field and what is accepted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Sequence

import numpy as np

from ranking.inputs import FUSIONS, RECENCY_MODES
from services.rag_pipeline.federation.hits import SourceReport
from shared.errors import InvalidArgument, PermissionDenied, check_unix_time
from shared.identity import Principal, is_verified_operator, relays_operator
from shared.records import ArtifactSummary, Entry, SearchFilters
from shared.settings import RagPipelineSettings

FACTORS = ("relevancy", "recency", "richness", "reputation")


@dataclass(frozen=True, slots=True)
class Preferences:
    """Per-request ranking preferences (seed 001: RankingPreferences). Empty = inherit."""

    weights: tuple[float, float, float, float] | None = None
    profile_name: str = ""
    fusion: str = ""                 # "" | "convex" | "convex_minmax" | "rrf"
    recency_mode: str = ""           # "" | "auto" | "always" | "never"
    half_life_days: float = 0.0
    rerank: bool = False
    explain: bool = False


@dataclass(frozen=True, slots=True)
class SearchRequest:
    tenant_id: str
    query: str
    persona_id: str = ""
    query_vector: tuple[float, ...] | None = None
    top_k_initial: int = 0           # 0 = settings default
    top_k_final: int = 0
    prefs: Preferences = field(default_factory=Preferences)
    filters: SearchFilters = field(default_factory=SearchFilters)
    expand: bool = False
    extra_phrases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()    # federation: () = local + every visible remote; "local" = the store
    remote_resources: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (source, its resource ids) to search
    # None = merge.COLLAPSE_BY_ARTIFACT (on); False = rank chunks, several of one document may
    # come back (an answer's synthesis wants the chunks that hold the answer: docs/MODELS.md)
    collapse: bool | None = None
    embed_timeout_s: float = 0.0     # operators only: the query embedding's deadline (0 = the settings')
    fold_duplicates: bool | None = None   # None = the profile's (merge.py); True/False overrides it


@dataclass(frozen=True, slots=True)
class FeatureContribution:
    """One feature's share of a learned model's score of a result (services/rag_pipeline/feedback.py)."""

    name: str                          # a ranking feature (ranking/features.py), or OTHER_FEATURES
    value: float | None                # the feature's value for the result; None = missing
    contribution: float


OTHER_FEATURES = "other features"      # the contributions beyond the largest ones listed, summed


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a result ranks where it does: the source of the explanation's fields (the gRPC
    ScoreExplanation message and the MCP ExplanationOut carry exactly these, in this order)."""

    weights: tuple[float, float, float, float]
    contributions: tuple[float, float, float, float]
    dense_cosine: float
    bm25: float
    dense_rank: int
    bm25_rank: int
    dense_norm: float
    bm25_norm: float
    rerank_score: float
    fusion_method: str
    recency_applied: bool
    age_days: float
    dense_source: str = "retrieved"   # "retrieved" | "completed" | "rescored" | "vectors" | "absent" (merge.py)
    bm25_source: str = "retrieved"
    dense_weight: float = 0.0          # the fusion's dense weight for this query
    query_profile: str = ""            # the query features behind it (ranking/query_features.py)
    source_id: str = "local"           # "local" or the remote source the result comes from
    remote_score: float = 0.0          # a remote result's own score, on its own scale (not ranked on)
    reputation_basis: str = ""         # where Reputation came from: the artifact's or the source's prior and votes
    # a learned model's score of the result = learned_base + Σ contribution (empty: not scored by one)
    feature_contributions: tuple[FeatureContribution, ...] = ()
    learned_base: float = 0.0


FourR = tuple[float, float, float, float]
"""The type of an Explanation field that holds one value per factor (FACTORS order)."""


def explanation_values(e: Explanation) -> dict[str, Any]:
    """An explanation's fields by name: the one list the gRPC message (convert.py) and the MCP
    output (mcp_api.py ExplanationOut) are built from; tests/unit/rag_pipeline/test_explanation_fields.py
    checks the proto message has exactly these fields."""
    return {f.name: getattr(e, f.name) for f in fields(e)}


@dataclass(frozen=True, slots=True)
class RankedResult:
    entry: Entry
    artifact: ArtifactSummary
    snippet: str
    overall: float
    scores: tuple[float, float, float, float]   # relevancy, recency, richness, reputation
    explanation: Explanation | None
    probability: float = 0.0                    # calibrated P(relevant) (ranking/rank.py, step 3)
    source_id: str = "local"                    # "local" or the remote source (federation)
    resource_id: str = ""                       # a remote result's seed-000 resource, if its source said
    #: [start, end) of each word of `snippet` that matches an analysed query term, in code points
    highlights: tuple[tuple[int, int], ...] = ()
    #: the near-identical copies folded into this result (merge.py), best first; each without its own
    duplicates: tuple[RankedResult, ...] = ()


NO_VISIBLE_SOURCES = "no visible sources"      # SearchResponse.debug of a caller who may see nothing


@dataclass(frozen=True, slots=True)
class SearchResponse:
    results: tuple[RankedResult, ...]
    degraded: bool = False
    degraded_reasons: tuple[str, ...] = ()
    profile_name: str = ""
    profile_version: int = 0
    query_phrases: tuple[str, ...] = ()
    candidates_considered: int = 0
    timings: tuple[tuple[str, float], ...] = ()
    temporal_intent: bool = False
    debug: str = ""
    sources: tuple[SourceReport, ...] = ()      # federation: one per source asked; () = none configured
    search_id: str = ""                         # names this answer in a vote (feedback.py); "" = none

    @property
    def nothing_visible(self) -> bool:
        """The caller may see no local source and asked no remote one (RagPipeline.search)."""
        return self.debug == NO_VISIBLE_SOURCES


MAX_EXTRA_PHRASES = 4


def check_operator_options(request: SearchRequest, principal: Principal) -> None:
    """PermissionDenied for an option only operators may set (`embed_timeout_s`), set by anybody else."""
    if request.embed_timeout_s and not (is_verified_operator(principal) or relays_operator(principal)):
        raise PermissionDenied("embed_timeout_s: a longer embed deadline is for operator calls only")


def settings_for(request: SearchRequest, s: RagPipelineSettings) -> RagPipelineSettings:
    """The settings one (validated) request runs under: an operator's embed deadline, if it asks."""
    return s.model_copy(update={"embed_timeout_s": request.embed_timeout_s}) if request.embed_timeout_s else s


def validate_request(request: SearchRequest, s: RagPipelineSettings) -> SearchRequest:
    """The request with its query stripped and both k resolved from the settings' defaults;
    InvalidArgument (naming the field) when anything is out of range."""
    if not request.tenant_id:
        raise InvalidArgument("tenant_id", "is required (it comes from the caller's identity)")
    query = request.query.strip() if request.query else ""
    if not query:
        raise InvalidArgument("user_query_text", "must not be empty")
    if len(request.query) > s.max_query_chars:
        raise InvalidArgument("user_query_text",
                              f"is {len(request.query)} characters; at most {s.max_query_chars} accepted")
    if request.embed_timeout_s and not 0 < request.embed_timeout_s <= s.deadline_s:
        raise InvalidArgument("embed_timeout_s", f"must be between 0 and the request deadline, {s.deadline_s:g} s "
                                                 f"(0: the server's {s.embed_timeout_s:g} s), "
                                                 f"got {request.embed_timeout_s}")
    k_final = request.top_k_final or s.default_top_k_final
    k_init = request.top_k_initial or max(s.default_top_k_initial, k_final)
    if not 1 <= k_final <= s.max_top_k_final:
        raise InvalidArgument("top_k_final_rank", f"must be between 1 and {s.max_top_k_final}, got {k_final}")
    if not 1 <= k_init <= s.max_top_k_initial:
        raise InvalidArgument("top_k_initial_retrieve", f"must be between 1 and {s.max_top_k_initial}, got {k_init}")
    if k_init < k_final:
        raise InvalidArgument("top_k_initial_retrieve",
                              f"must be >= top_k_final_rank ({k_final}), got {k_init}")
    validate_filters(request.filters)
    prefs = request.prefs
    if prefs.weights is not None:
        validate_weights(prefs.weights, "ranking_prefs")
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
    if len(request.extra_phrases) > MAX_EXTRA_PHRASES:
        raise InvalidArgument("extra_query_phrases",
                              f"at most {MAX_EXTRA_PHRASES} accepted, got {len(request.extra_phrases)}")
    for i, phrase in enumerate(request.extra_phrases):
        if not phrase.strip():
            raise InvalidArgument(f"extra_query_phrases[{i}]", "must not be empty")
        if len(phrase) > s.max_query_chars:
            raise InvalidArgument(f"extra_query_phrases[{i}]", f"at most {s.max_query_chars} characters accepted")
    return replace(request, query=query, top_k_final=k_final, top_k_initial=k_init)


def validate_filters(f: SearchFilters, field: str = "filters") -> None:
    """The date bounds of the filters: unix seconds in range (0 = open), from <= to."""
    check_unix_time(f"{field}.date_from_unix", f.date_from_unix)
    check_unix_time(f"{field}.date_to_unix", f.date_to_unix)
    if f.date_from_unix and f.date_to_unix and f.date_from_unix > f.date_to_unix:
        raise InvalidArgument(f"{field}.date_to_unix",
                              f"{f.date_to_unix} is before date_from_unix {f.date_from_unix}")


def validate_weights(weights: Sequence[float], field: str) -> None:
    """The four 4R weights: each finite and >= 0, not all zero."""
    names = ("relevancy_weight", "recency_weight", "richness_weight", "reputation_weight")
    for name, w in zip(names, weights):
        if not math.isfinite(w) or w < 0:
            raise InvalidArgument(f"{field}.{name}", f"must be a finite number >= 0, got {w}")
    if sum(weights) <= 0:
        raise InvalidArgument(f"{field}.weights", "must not all be zero")
