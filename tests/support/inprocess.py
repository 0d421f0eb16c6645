"""In-process stand-ins for the RAG pipeline's ports (services/rag_pipeline/ports.py).

    InProcessKnowledge      a KnowledgeSource over a real KnowledgeStore core: SQLite and FAISS
                            in a directory, the same calls the gRPC servicer makes
    InProcessLanguageModel  a LanguageModel without a chat model: feature-hashing embeddings
                            (`HashEmbedder`), and LlmOrchestration's own non-LLM techniques for
                            the rest (keyword expansion, embedding-cosine re-ranking, extractive
                            synthesis)

Either can be told to fail: `fail("dense_leg", Unavailable(...))` makes every later
call of that method raise the error, as a dead or slow service would through its gRPC client;
`heal(name)` undoes it. `calls` lists the methods called, in order, failed ones included.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.front import CALLS
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from services.llm_orchestration import expansion, rerank as rerank_mod, synthesis as synth
from services.llm_orchestration.results import Expansion, RerankResult, Synthesis
from shared.inprocess import InProcessCaller
from shared.errors import DeadlineExceeded, InvalidArgument, NucleusError
from shared.records import Retrieval, RetrievalRequest
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 10.0
HASH_MODEL = "feature-hash"
LEGS = ("keyword_leg", "dense_leg", "both_legs")


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
    """A KnowledgeSource over a KnowledgeStore core in this process: the product's in-process
    client (no gRPC, the same front and answers) with no authentication, every call logged and
    failable by name. A retrieval is logged by its legs, `keyword_leg` and `dense_leg` (and
    `both_legs` when one call runs both); either leg told to fail fails the call."""

    service = "KnowledgeStore"

    def __init__(self, store: KnowledgeStore) -> None:
        super().__init__()
        self.store = store
        self._client = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False),
                                                     timeout_s=DEFAULT_TIMEOUT_S)

    @classmethod
    def in_directory(cls, path: Path, embedder: HashEmbedder | None = None, **settings: object) -> InProcessKnowledge:
        """A fresh store in `path`, embedding documents with `embedder` (a HashEmbedder by default)."""
        return cls(KnowledgeStore(settings_for(path, **settings), embedder or HashEmbedder()))

    def fail(self, method: str, error: NucleusError) -> None:
        if method not in LEGS and method not in CALLS:
            raise AttributeError(f"{type(self).__name__} has no method {method!r}")
        self.failures[method] = error

    async def close(self) -> None:
        self.store.close()

    async def retrieve(self, request: RetrievalRequest, *, timeout_s: float | None = None) -> Retrieval:
        dense = request.vectors is not None
        legs = (["both_legs"] if request.keyword and dense else []) + (["keyword_leg"] if request.keyword else []) \
            + (["dense_leg"] if dense else [])
        for leg in legs:
            self._enter(leg)
        return await self._client.retrieve(request, timeout_s=timeout_s)

    def __getattr__(self, name: str):
        if name not in CALLS:
            raise AttributeError(name)
        method = getattr(self._client, name)

        async def logged(*args, **kwargs):
            self._enter(name)
            return await method(*args, **kwargs)
        return logged


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

    async def embedding_model(self, *, timeout_s: float | None = None) -> str:
        return await self.embedder.model_name()

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
