"""The ports of the RAG pipeline: what it needs from the knowledge store and the language model.

    KnowledgeSource   retrieval (keyword leg, dense leg with score completion, or both), entries by id, tenant
                      stats, the store's condition, filter search, ranking profiles, feedback
    LanguageModel     embeddings, query expansion, re-ranking, answer synthesis

The pipeline core, the RAG tools and the access policy are written against these protocols
only. The gRPC clients of KnowledgeStore and LlmOrchestration satisfy them (signatures are
theirs, parameter for parameter) and are wired in by `main`; an in-process adapter can stand
in for either. Errors arrive as `shared.errors`: a port that cannot answer raises
`Unavailable` or `DeadlineExceeded`, and the pipeline degrades where it can.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, Sequence

import numpy as np

from ranking.profile import RankingProfile
from services.knowledge_store.models import StoreStatus
from services.knowledge_store.personas import Persona
from services.llm_orchestration.chat import ChatChunk, ChatRequest
from services.llm_orchestration.results import Expansion, RerankResult, Synthesis
from shared.records import (
    AnalysedText,
    FeedbackAck,
    SearchLogRecord,
    SourceVotes,
    Hit,
    KeywordScores,
    Keywords,
    FieldSignals,
    PeerEntries,
    Retrieval,
    RetrievalRequest,
    SearchFilters,
    TenantStats,
)


class KnowledgeSource(Protocol):
    """The KnowledgeStore calls the pipeline makes (a tenant's entries, profiles, feedback)."""

    async def close(self) -> None: ...

    async def retrieve(self, request: RetrievalRequest, *, timeout_s: float | None = None) -> Retrieval:
        """One retrieval: the keyword leg, the dense leg completing the keyword leg's rows, or
        both in one call (shared/records.py RetrievalRequest, the store's front.py `retrieve`)."""
        ...

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                          timeout_s: float | None = None) -> list[Hit]:
        """The entries with these ids, in request order; unknown ids are skipped."""
        ...

    def data_id(self, tenant_id: str) -> str:
        """Which copy of the tenant's data the last read answered from: new after a restore or an
        import replaced it, kept by writes ("" = unknown). Held rankings are dropped when it changes."""
        ...

    async def get_entries_with_vectors(self, tenant_id: str, entry_ids: Sequence[str], *,
                                       timeout_s: float | None = None) -> tuple[list[Hit], list[np.ndarray | None]]:
        """`get_entries`, and each entry's stored unit vector, parallel (None: the index holds none)
        — for a peer stack that scores the hits without re-embedding them (federation/peer_vectors.py)."""
        ...

    async def get_peer_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                               timeout_s: float | None = None) -> PeerEntries:
        """`get_entries`, each entry's stored unit vector and its analysed keyword terms, parallel
        — what this stack sends a peer stack with its own hits (federation/peer_vectors.py)."""
        ...

    async def get_field_signals(self, tenant_id: str, entry_ids: Sequence[str], query: str,
                                query_vector: np.ndarray, *, timeout_s: float | None = None) -> FieldSignals:
        """The per-field signals of these entries for `query` (analysed as the keyword leg does)
        and its embedding (shared/records.py FieldSignals): the learned re-ranker's inputs."""
        ...

    async def score_keywords(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str] | AnalysedText], *,
                             timeout_s: float | None = None) -> KeywordScores:
        """BM25 of the keyword phrases for (title, text) pairs the store does not hold (remote
        hits), or such texts already analysed (a peer's stored terms), with the tenant's own
        term statistics, and their richness."""
        ...

    async def stats(self, tenant_id: str) -> TenantStats: ...

    async def store_status(self) -> StoreStatus:
        """The store's storage condition (GetStoreStatus: state, free space, each tenant's problem);
        the store answers operators only, so PermissionDenied for any caller the pipeline acts for."""
        ...

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, *, k: int = 0, max_terms: int = 0,
                     examples: int = 0, period: str = "", date_field: str = "", topic_id: int | None = None,
                     query_vector: np.ndarray | None = None, limit: int = 0, max_points: int = 0,
                     timeout_s: float | None = None) -> dict:
        """The tenant's topics as a caller scoped by `filters` sees them (GetTopics; kind "topics" |
        "evolution" | "members" | "map"; 0 / "" = the store's default): a JSON-ready dict, or
        {"status": "computing", ...}."""
        ...

    async def put_profile(self, profile: RankingProfile) -> RankingProfile: ...

    async def put_persona(self, persona: Persona) -> Persona: ...

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        """The persona's settings; NotFound when there are none."""
        ...

    async def list_personas(self, tenant_id: str) -> list[Persona]: ...

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile:
        """The profile (latest version unless `version`); NotFound when there is none."""
        ...

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]: ...

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes:
        """A stored ranking model's bytes by its sha256; NotFound when there is none."""
        ...

    async def record_feedback(self, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str, *, search_id: str = "") -> FeedbackAck: ...

    async def record_search(self, record: SearchLogRecord) -> None:
        """Log what a search returned, to whom (the search log; NotFound: the tenant has no store)."""
        ...

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> SourceVotes: ...

    async def source_votes(self, tenant_id: str) -> list[SourceVotes]: ...


class LanguageModel(Protocol):
    """The LlmOrchestration calls the pipeline makes."""

    async def close(self) -> None: ...

    async def embed(self, texts: Sequence[str], *, purpose: str = "query",
                    timeout_s: float | None = None) -> np.ndarray:
        """(len(texts), dimension) float32 vectors, L2-normalised, in input order."""
        ...

    async def expand(self, query: str, max_alternatives: int = 3, *,
                     timeout_s: float | None = None) -> Expansion: ...

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], *, method: str = "",
                     timeout_s: float | None = None) -> RerankResult:
        """Scores for (id, text) candidates; `method` "" = the default, else a configured model
        re-ranker ("cross-encoder", "rerank-api")."""
        ...

    async def rerankers(self, *, timeout_s: float | None = None) -> list[str]:
        """The re-rank methods the stack has configured (GetModelInfo's `rerankers`): the default
        method first, then the model re-rankers the operator set up."""
        ...

    async def synthesize(self, query: str, passages: Sequence[tuple[str, str, str]], *, max_chars: int = 0,
                         style: str = "", timeout_s: float | None = None) -> Synthesis:
        """An answer from (id, title, text) passages."""
        ...

    def chat(self, request: ChatRequest, *, timeout_s: float | None = None) -> AsyncIterator[ChatChunk]:
        """GenerateChatCompletion: the reply's chunks as they stream (services/rag_pipeline/chat.py
        is the only caller: it checks the end user and their budget first)."""
        ...
