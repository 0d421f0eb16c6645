"""LlmOrchestration's in-process client: what `LlmOrchestrationClient` (client.py) does over gRPC,
done by calling the orchestrator core in the same process (`nucleus up --mode single`).

Same signatures, results (`results.py`) and errors (`shared.errors`). Each call makes the
verified caller the gRPC servicer would have seen (`shared.inprocess`; with
authentication on, a call without a caller is refused), runs the core with it (an embedding
request takes its turn in the micro-batcher's fair queue as that caller, as grpc_api.py does),
and is one INTERNAL span named as the RPC (`nucleus.v1.LlmOrchestration/<Method>`), under the
call's deadline. A method of the core this client does not name yet is reached with
`call(rpc_method, core_method, ...)`, which applies the same caller, span and deadline.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from opentelemetry.trace import TracerProvider

from services.llm_orchestration.chat import ChatChunk, ChatRequest
from services.llm_orchestration.results import Expansion, RerankResult, Synthesis
from shared.inprocess import InProcessCaller, in_process_call
from shared.identity import Principal, queue_key
from shared.telemetry.genai import embeddings_span, end_embeddings

if TYPE_CHECKING:
    from services.llm_orchestration.core import LlmOrchestrator

SERVICE = "LlmOrchestration"
RPC_SERVICE = "nucleus.v1.LlmOrchestration"
CALLEE = "llm_orchestration"
T = TypeVar("T")


class InProcessLlmOrchestrationClient:
    """A LanguageModel (services/rag_pipeline/ports.py) over the orchestrator in this process."""

    def __init__(self, core: LlmOrchestrator, caller: InProcessCaller, *, timeout_s: float = 10.0,
                 tracer_provider: TracerProvider | None = None) -> None:
        self._tracer_provider = tracer_provider         # None: the process's (tests pass their own)
        self._core = core
        self._caller = caller
        self.timeout_s = timeout_s

    async def close(self) -> None:
        """The core belongs to the LlmOrchestration service, which closes it."""

    def _call(self, method: str, timeout_s: float | None) -> AbstractAsyncContextManager[Principal | None]:
        return in_process_call(self._caller, service=SERVICE, rpc_service=RPC_SERVICE, callee=CALLEE, method=method,
                               timeout_s=timeout_s or self.timeout_s, tracer_provider=self._tracer_provider)

    async def call(self, rpc_method: str, work: Callable[..., Awaitable[T]], *args: Any,
                   timeout_s: float | None = None, **kwargs: Any) -> T:
        """`work(*args, **kwargs)` (a core coroutine method) as the in-process call `rpc_method`."""
        async with self._call(rpc_method, timeout_s):
            return await work(*args, **kwargs)

    async def embed(self, texts: Sequence[str], *, purpose: str = "query",
                    timeout_s: float | None = None) -> np.ndarray:
        async with self._call("GenerateEmbeddings", timeout_s) as p:
            with embeddings_span(self._core.embedding_model, self._core.provider, len(texts)) as span:
                result = await self._core.embed(list(texts), purpose or "query", caller=queue_key(p))
                end_embeddings(span, model=result.model, dimension=result.dimension, cache_hits=result.cache_hits)
        return np.asarray(result.vectors, dtype=np.float32)

    async def expand(self, query: str, max_alternatives: int = 3, *, timeout_s: float | None = None) -> Expansion:
        async with self._call("ExpandOrRephraseQuery", timeout_s):
            return await self._core.expand(query, max_alternatives or 3)

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], *, method: str = "",
                     timeout_s: float | None = None) -> RerankResult:
        async with self._call("Rerank", timeout_s):
            return await self._core.rerank(query, [(cid, text) for cid, text in candidates], method)

    async def rerankers(self, *, timeout_s: float | None = None) -> list[str]:
        async with self._call("GetModelInfo", timeout_s):
            return list(self._core.rerankers)

    async def embedding_model(self, *, timeout_s: float | None = None) -> str:
        async with self._call("GetModelInfo", timeout_s):
            return self._core.embedding_model

    async def synthesize(self, query: str, passages: Sequence[tuple[str, str, str]], *, max_chars: int = 0,
                         style: str = "", timeout_s: float | None = None) -> Synthesis:
        async with self._call("Synthesize", timeout_s):
            return await self._core.synthesize(query, [(pid, title, text) for pid, title, text in passages],
                                               max_chars=max_chars, style=style or "concise")

    async def chat(self, request: ChatRequest, *, timeout_s: float | None = None) -> AsyncIterator[ChatChunk]:
        """GenerateChatCompletion in process: the reply's chunks as they stream (the deadline
        covers the whole stream, as the gRPC client's does)."""
        async with self._call("GenerateChatCompletion", max(timeout_s or self.timeout_s, 60.0)):
            async for chunk in self._core.chat_completion(request):
                yield chunk


__all__ = ["InProcessLlmOrchestrationClient"]
