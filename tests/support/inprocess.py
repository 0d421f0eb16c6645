"""In-process stand-ins for the RAG pipeline's ports (services/rag_pipeline/ports.py).

    InProcessKnowledge      a KnowledgeSource over a real KnowledgeStore core: SQLite and FAISS
                            in a directory, the same calls the gRPC servicer makes
    InProcessLanguageModel  a LanguageModel without a chat model: feature-hashing embeddings
                            (`HashEmbedder`), and LlmOrchestration's own non-LLM techniques for
                            the rest (keyword expansion, embedding-cosine re-ranking, extractive
                            synthesis)

Either can be told to fail: `fail("candidates_by_vector_with_completion", Unavailable(...))` makes every later
call of that method raise the error, as a dead or slow service would through its gRPC client;
`heal(name)` undoes it. `calls` lists the methods called, in order, failed ones included.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from ranking.profile import RankingProfile
from services.knowledge_store.backend import (
    candidates_by_both_legs,
    keyword_candidates,
    keyword_hits,
    vector_candidates_with_completion,
)
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.models import StoreStatus
from services.knowledge_store.personas import Persona
from services.llm_orchestration import expansion, rerank as rerank_mod, synthesis as synth
from services.llm_orchestration.results import Expansion, RerankResult, Synthesis
from shared.errors import DeadlineExceeded, InvalidArgument, NotFound, NucleusError
from shared.records import (CandidateColumns, FeedbackAck, Hit, KeywordScores, ScoreCompletion, SearchFilters,
                            SearchLogRecord, SourceVotes, TenantStats)
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 10.0
HASH_MODEL = "feature-hash"


class _Port:
    """Failure switches and a call log shared by both adapters."""

    service = ""

    def __init__(self) -> None:
        self.failures: dict[str, NucleusError] = {}
        self.calls: list[str] = []

    def fail(self, method: str, error: NucleusError) -> None:
        """Every later call of `method` raises `error` instead of answering."""
        if not callable(getattr(self, method, None)):
            raise AttributeError(f"{type(self).__name__} has no method {method!r}")
        self.failures[method] = error

    def heal(self, method: str) -> None:
        self.failures.pop(method, None)

    def _enter(self, method: str) -> None:
        self.calls.append(method)
        error = self.failures.get(method)
        if error is not None:
            raise error

    async def _within(self, work: Awaitable[T], timeout_s: float | None) -> T:
        """`work` under the call's deadline, as a gRPC client would impose it."""
        try:
            async with asyncio.timeout(timeout_s or DEFAULT_TIMEOUT_S):
                return await work
        except TimeoutError:
            raise DeadlineExceeded(f"{self.service} did not answer before the deadline") from None


class InProcessKnowledge(_Port):
    """A KnowledgeSource calling a KnowledgeStore core directly (no gRPC, same answers)."""

    service = "KnowledgeStore"

    def __init__(self, store: KnowledgeStore) -> None:
        super().__init__()
        self.store = store

    @classmethod
    def in_directory(cls, path: Path, embedder: HashEmbedder | None = None, **settings: object) -> InProcessKnowledge:
        """A fresh store in `path`, embedding documents with `embedder` (a HashEmbedder by default)."""
        return cls(KnowledgeStore(settings_for(path, **settings), embedder or HashEmbedder()))

    async def close(self) -> None:
        self.store.close()

    async def candidates_by_vector_with_completion(
            self, tenant_id: str, vectors: np.ndarray, top_k: int, filters: SearchFilters, *, keywords: str,
            extra_keywords: Sequence[str] = (), complete_rows: Sequence[int] | np.ndarray = (),
            feedback_expansion: str = "",
            timeout_s: float | None = None) -> tuple[list[CandidateColumns], ScoreCompletion]:
        self._enter("candidates_by_vector_with_completion")
        return await self._within(vector_candidates_with_completion(
            self.store, tenant_id, vectors, top_k, filters, keywords=keywords, extra_keywords=extra_keywords,
            complete_rows=complete_rows, feedback_expansion=feedback_expansion), timeout_s)

    async def candidates_by_both_legs(
            self, tenant_id: str, vectors: np.ndarray, top_k: int, filters: SearchFilters, *, keywords: str,
            extra_keywords: Sequence[str] = (), feedback_expansion: str = "", timeout_s: float | None = None,
    ) -> tuple[CandidateColumns, list[str], list[CandidateColumns], ScoreCompletion]:
        # As the gRPC servicer composes it; either leg told to fail fails the combined call.
        self._enter("candidates_by_both_legs")
        self._enter("candidates_by_filters")
        self._enter("candidates_by_vector_with_completion")
        return await self._within(candidates_by_both_legs(
            self.store, tenant_id, vectors, top_k, filters, keywords=keywords, extra_keywords=extra_keywords,
            feedback_expansion=feedback_expansion), timeout_s)

    async def candidates_by_filters(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                                    filters: SearchFilters, *, top_hits: int = 0, feedback_expansion: str = "",
                                    timeout_s: float | None = None) -> tuple[CandidateColumns, list[str]]:
        self._enter("candidates_by_filters")
        return await self._within(keyword_candidates(self.store, tenant_id, keywords, extra_keywords, top_k, filters,
                                                     top_hits=top_hits, feedback_expansion=feedback_expansion),
                                  timeout_s)

    async def search_by_filters(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str], top_k: int,
                                filters: SearchFilters, *, feedback_expansion: str = "",
                                timeout_s: float | None = None) -> tuple[list[Hit], list[str]]:
        self._enter("search_by_filters")
        return await self._within(keyword_hits(self.store, tenant_id, keywords, extra_keywords, top_k, filters,
                                               feedback_expansion=feedback_expansion), timeout_s)

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                          timeout_s: float | None = None) -> list[Hit]:
        self._enter("get_entries")
        return await self._within(self.store.get_entries(tenant_id, entry_ids), timeout_s)

    async def get_entries_with_vectors(self, tenant_id: str, entry_ids: Sequence[str], *,
                                       timeout_s: float | None = None):
        self._enter("get_entries_with_vectors")
        hits = await self._within(self.store.get_entries(tenant_id, entry_ids), timeout_s)
        found = await self.store.entry_vectors(tenant_id, [h.entry.id for h in hits]) if hits else {}
        return hits, [found.get(h.entry.id) for h in hits]

    async def get_peer_entries(self, tenant_id: str, entry_ids: Sequence[str], *, timeout_s: float | None = None):
        from shared.records import PeerEntries
        self._enter("get_peer_entries")
        hits = await self._within(self.store.get_entries(tenant_id, entry_ids), timeout_s)
        ids = [h.entry.id for h in hits]
        vectors = await self.store.entry_vectors(tenant_id, ids) if hits else {}
        terms = await self.store.entry_terms(tenant_id, ids) if hits else {}
        return PeerEntries(hits, [vectors.get(i) for i in ids], [terms.get(i) for i in ids])

    async def get_field_signals(self, tenant_id: str, entry_ids: Sequence[str], query: str,
                                query_vector: np.ndarray, *, timeout_s: float | None = None):
        from services.knowledge_store.field_signals import field_signals
        self._enter("get_field_signals")
        return await self._within(field_signals(self.store, tenant_id, list(entry_ids), query, query_vector),
                                  timeout_s)

    async def score_keywords(self, tenant_id: str, keywords: str, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str]], *, timeout_s: float | None = None) -> KeywordScores:
        self._enter("score_keywords")
        return await self._within(self.store.score_keywords(tenant_id, keywords, extra_keywords, texts), timeout_s)

    async def stats(self, tenant_id: str) -> TenantStats:
        self._enter("stats")
        return await self._within(self.store.stats(tenant_id), None)

    async def store_status(self) -> StoreStatus:
        self._enter("store_status")
        return self.store.status()

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, *, k: int = 0, max_terms: int = 0,
                     examples: int = 0, period: str = "", date_field: str = "", topic_id: int | None = None,
                     query_vector: np.ndarray | None = None, limit: int = 0, max_points: int = 0,
                     timeout_s: float | None = None) -> dict:
        self._enter("topics")          # the defaults the gRPC adapter applies (0 / "" = default)
        return await self._within(self.store.topics(
            tenant_id, filters, kind, k=k, max_terms=max_terms or 8, examples=0 if examples < 0 else (examples or 3),
            period=period or "month", date_field=date_field or "created", topic_id=topic_id,
            query_vector=query_vector, limit=limit or 10, max_points=max_points or 2_000), timeout_s)

    async def put_persona(self, persona: Persona) -> Persona:
        self._enter("put_persona")
        return await self._within(self.store.put_persona(persona), None)

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        self._enter("get_persona")
        return await self._within(self.store.get_persona(tenant_id, persona_id), None)

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        self._enter("list_personas")
        return await self._within(self.store.list_personas(tenant_id), None)

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        self._enter("put_profile")
        return await self._within(self.store.put_profile(profile), None)

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile:
        self._enter("get_profile")
        profile = await self._within(self.store.get_profile(tenant_id, persona_id, name, version), None)
        if profile is None:            # the gRPC servicer answers NOT_FOUND, the client raises NotFound
            raise NotFound(f"no ranking profile '{name or 'default'}' for tenant '{tenant_id}'"
                           + (f" persona '{persona_id}'" if persona_id else ""))
        return profile

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        self._enter("list_profiles")
        return await self._within(self.store.list_profiles(tenant_id, persona_id), None)

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes:
        self._enter("get_ranking_model")
        raw = await self._within(self.store.get_ranking_model(tenant_id, sha256), None)
        if raw is None:
            raise NotFound(f"no ranking model {sha256} in tenant '{tenant_id}'")
        return raw

    async def record_feedback(self, tenant_id: str, target: str, target_id: str, helpful: bool,
                              user_id: str, *, search_id: str = "") -> FeedbackAck:
        self._enter("record_feedback")
        return await self._within(self.store.record_feedback(tenant_id, target, target_id, helpful, user_id,
                                                             search_id=search_id), None)

    async def record_search(self, record: SearchLogRecord) -> None:
        self._enter("record_search")
        await self._within(self.store.record_search(record), None)

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> SourceVotes:
        self._enter("record_source_feedback")
        return await self._within(self.store.record_source_feedback(tenant_id, source_id, target_id, helpful,
                                                                    user_id, search_id=search_id), None)

    async def source_votes(self, tenant_id: str) -> list[SourceVotes]:
        self._enter("source_votes")
        return await self._within(self.store.source_votes(tenant_id), None)


class InProcessLanguageModel(_Port):
    """A LanguageModel with deterministic feature-hashing embeddings and no chat model."""

    service = "LlmOrchestration"

    def __init__(self, embedder: HashEmbedder | None = None) -> None:
        super().__init__()
        self.embedder = embedder or HashEmbedder()

    async def close(self) -> None:
        pass

    async def embed(self, texts: Sequence[str], *, purpose: str = "query",
                    timeout_s: float | None = None) -> np.ndarray:
        self._enter("embed")
        if not texts:
            raise InvalidArgument("texts", "at least one text is required")
        return await self._within(self.embedder.embed(list(texts)), timeout_s)

    async def expand(self, query: str, max_alternatives: int = 3, *,
                     timeout_s: float | None = None) -> Expansion:
        self._enter("expand")
        phrase = expansion.keyword_phrase(query)
        note = f"{expansion.NOTE_NO_CHAT}; {expansion.NOTE_KEYWORDS}"
        if phrase is None:
            return Expansion(phrases=(query,), method="unavailable", model="",
                             note=f"{note} found no distinct keyword phrase")
        return Expansion(phrases=(query, phrase), method="keywords", model="", note=note)

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], *, method: str = "",
                     timeout_s: float | None = None) -> RerankResult:
        self._enter("rerank")
        if method not in ("", "embedding-cosine"):      # as LlmOrchestration without model re-rankers
            raise InvalidArgument("method", f"{method!r} is not a configured re-ranker")
        if not candidates:
            raise InvalidArgument("candidates", "at least one candidate is required")
        vectors = await self._within(self.embedder.embed([query, *(text for _, text in candidates)]), timeout_s)
        unit = rerank_mod.cosine_to_unit(vectors[0], vectors[1:])
        return RerankResult(tuple(float(x) for x in unit), HASH_MODEL, "embedding-cosine")

    async def rerankers(self, *, timeout_s: float | None = None) -> list[str]:
        self._enter("rerankers")
        return ["embedding-cosine"]                     # as LlmOrchestration without model re-rankers

    async def synthesize(self, query: str, passages: Sequence[tuple[str, str, str]], *, max_chars: int = 0,
                         style: str = "", timeout_s: float | None = None) -> Synthesis:
        self._enter("synthesize")
        if not passages:
            raise InvalidArgument("passages", "at least one passage is required")
        passages = [(pid, title or "", text) for pid, title, text in passages]
        max_chars = max_chars or synth.DEFAULT_MAX_CHARS
        units = synth.answer_units(passages)
        vectors = await self._within(self.embedder.embed([query, *(u.context for u in units)]), timeout_s)
        scores = synth.unit_scores(query, units, (vectors[1:] @ vectors[0]).astype(np.float32))
        extract = synth.extract_answer(units, scores, max_chars=max_chars, style=style or "concise")
        return Synthesis(answer=extract.answer, citations=synth.citations_for(extract.passage_ids, passages),
                         truncated=extract.truncated,
                         truncation_reason=f"answer limited to max_chars={max_chars}" if extract.truncated else "",
                         model=HASH_MODEL, method="extractive")
