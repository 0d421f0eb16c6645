"""Plain core types of the RAG pipeline (no protobuf)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from services.rag_pipeline.federation.hits import SourceReport
from shared.records import ArtifactSummary, Entry, SearchFilters

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
    # None = the settings' collapse_by_artifact; False = rank chunks, several of one document may
    # come back (an answer's synthesis wants the chunks that hold the answer: docs/MODELS.md)
    collapse: bool | None = None
    embed_timeout_s: float = 0.0     # operators only: the query embedding's deadline (0 = the settings')
    fold_duplicates: bool | None = None   # None = the profile's (folding.py); True/False overrides it


@dataclass(frozen=True, slots=True)
class FeatureContribution:
    """One feature's share of a learned model's score of a result (services/rag_pipeline/learned.py)."""

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
    #: the near-identical copies folded into this result (folding.py), best first; each without its own
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
