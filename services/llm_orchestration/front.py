"""LlmOrchestration's front: the calls other services make (the `LanguageModel` port of
services/rag_pipeline/ports.py, the KnowledgeStore's embedder), once, over the orchestrator core.

`LlmFront`'s methods take the verified caller first (None: authentication is off) and then
exactly the port's arguments, and give the port's results; the in-process adapter
(inprocess_client.py, `shared.inprocess.InProcessClient`) wraps each with the caller, deadline
and span of the RPC `CALLS` names. `CALLS` also marks each call idempotent or not (a retry of an
attempt that took effect changes nothing: the gRPC client's channel retries exactly those) and
long work or not (chat: the stream's per-item deadline, at least 60 s, not the call deadline).
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np

from services.llm_orchestration.chat import ChatChunk, ChatRequest
from services.llm_orchestration.results import EmbeddingResult, Expansion, RerankResult, Synthesis
from shared.identity import Principal, queue_key
from shared import inprocess
from shared.inprocess import Call
from shared.telemetry.genai import embeddings_span, end_embeddings

RPC_SERVICE = "nucleus.v1.LlmOrchestration"
#: The orchestrator core (core.py `LlmOrchestrator`), not imported: the gRPC client reads this table,
#: and the services reached only through the client never import the core (pyproject.toml's contracts).
LlmOrchestrator = Any

CALLS: dict[str, Call] = {
    "embed": Call("GenerateEmbeddings", True),
    "expand": Call("ExpandOrRephraseQuery", True),
    "rerank": Call("Rerank", True),
    "rerankers": Call("GetModelInfo", True),
    "embedding_model": Call("GetModelInfo", True),
    "synthesize": Call("Synthesize", True),
    "chat": Call("GenerateChatCompletion", False, long=True),   # streamed; retried by the service's breaker
}


def idempotent_methods() -> frozenset[str]:
    """The full gRPC method names a client may retry ("/nucleus.v1.LlmOrchestration/Rerank")."""
    return inprocess.idempotent_methods(RPC_SERVICE, CALLS)


async def embeddings(core: LlmOrchestrator, p: Principal | None, texts: Sequence[str],
                     purpose: str) -> EmbeddingResult:
    """GenerateEmbeddings (gRPC and in process): the GenAI embeddings span around the core's
    embedding (the one span of it: the core sets its `llm.embed.*` attributes there), the request
    taking its turn in the micro-batcher's fair queue as the caller."""
    with embeddings_span(core.embedding_model, core.provider, len(texts)) as span:   # telemetry hook
        result = await core.embed(list(texts), purpose or "query", caller=queue_key(p), span=span)
        end_embeddings(span, model=result.model, dimension=result.dimension, cache_hits=result.cache_hits)
    return result


class LlmFront:
    """Each call of `CALLS` over the core, the verified caller first (module docstring)."""

    def __init__(self, core: LlmOrchestrator) -> None:
        self.core = core

    async def embed(self, p: Principal | None, texts: Sequence[str], *, purpose: str = "query") -> np.ndarray:
        """(len(texts), dimension) float32 vectors, L2-normalised, in input order."""
        return np.asarray((await embeddings(self.core, p, texts, purpose)).vectors, dtype=np.float32)

    async def expand(self, p: Principal | None, query: str, max_alternatives: int = 3) -> Expansion:
        return await self.core.expand(query, max_alternatives or 3)

    async def rerank(self, p: Principal | None, query: str, candidates: Sequence[tuple[str, str]], *,
                     method: str = "") -> RerankResult:
        return await self.core.rerank(query, [(cid, text) for cid, text in candidates], method)

    async def rerankers(self, p: Principal | None) -> list[str]:
        return list(self.core.rerankers)

    async def embedding_model(self, p: Principal | None) -> str:
        return self.core.embedding_model

    async def synthesize(self, p: Principal | None, query: str, passages: Sequence[tuple[str, str, str]], *,
                         max_chars: int = 0, style: str = "") -> Synthesis:
        return await self.core.synthesize(query, [(pid, title, text) for pid, title, text in passages],
                                          max_chars=max_chars, style=style or "concise")

    async def chat(self, p: Principal | None, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """The reply's chunks as they stream (the last has `done`)."""
        async for chunk in self.core.chat_completion(request):
            yield chunk


__all__ = ["CALLS", "LlmFront", "RPC_SERVICE", "embeddings", "idempotent_methods"]
