"""Async client of the LlmOrchestration gRPC service. Used by KnowledgeStore (embedding at
ingest) and RAGPipeline. Every call has a deadline; errors arrive as `shared.errors`; results
are the core's own types (`results.py`), decoded from the wire."""
from __future__ import annotations

from pathlib import Path
from collections.abc import AsyncIterator
from typing import Sequence

import grpc

import numpy as np

from nucleus.v1 import llm_orchestration_pb2 as llm_pb
from nucleus.v1 import llm_orchestration_pb2_grpc as llm_grpc
from services.llm_orchestration import convert
from services.llm_orchestration.chat import ChatChunk, ChatRequest
from services.llm_orchestration.front import idempotent_methods
from services.llm_orchestration.results import Citation, Expansion, RerankResult, Synthesis
from shared.errors import UpstreamFailed
from shared.grpc_client import aio_channel, call
from shared.grpc_errors import from_grpc_error

SERVICE = "LlmOrchestration"
# Calls that change nothing (front.py `CALLS`), so the channel may resend one that failed UNAVAILABLE
# (a chat completion streams and is retried by the service under its breaker instead).
IDEMPOTENT = idempotent_methods()
_METHODS = {llm_pb.EXPANSION_METHOD_LLM: "llm", llm_pb.EXPANSION_METHOD_KEYWORDS: "keywords",
            llm_pb.EXPANSION_METHOD_UNAVAILABLE: "unavailable"}


class LlmOrchestrationClient:
    def __init__(self, target: str, *, timeout_s: float = 10.0, interceptors: list | None = None,
                 tls_ca_file: Path | None = None) -> None:
        self._channel = aio_channel(target, interceptors, tls_ca_file=tls_ca_file, idempotent=IDEMPOTENT)
        self._stub = llm_grpc.LlmOrchestrationStub(self._channel)
        self.timeout_s = timeout_s

    async def close(self) -> None:
        await self._channel.close()

    async def embed(self, texts: Sequence[str], *, purpose: str = "query",
                    timeout_s: float | None = None) -> np.ndarray:
        response = await call(self._stub.GenerateEmbeddings,
                              llm_pb.GenerateEmbeddingsRequest(texts=list(texts), purpose=purpose),
                              timeout=timeout_s or self.timeout_s, service=SERVICE)
        vectors = np.frombuffer(response.vectors_f32, dtype="<f4")
        if vectors.size != response.count * response.dimension or response.count != len(texts):
            raise UpstreamFailed(f"{SERVICE} returned {response.count} x {response.dimension} floats "
                                 f"for {len(texts)} texts ({vectors.size} values)")
        return vectors.reshape(response.count, response.dimension)

    async def expand(self, query: str, max_alternatives: int = 3, *, timeout_s: float | None = None) -> Expansion:
        response = await call(self._stub.ExpandOrRephraseQuery,
                              llm_pb.ExpandQueryRequest(query=query, max_alternatives=max_alternatives),
                              timeout=timeout_s or self.timeout_s, service=SERVICE)
        return Expansion(tuple(response.phrases), _METHODS.get(response.method, "unavailable"), response.note,
                         response.model)

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], *, method: str = "",
                     timeout_s: float | None = None) -> RerankResult:
        request = llm_pb.RerankRequest(query=query, method=method, candidates=[
            llm_pb.RerankCandidate(id=cid, text=text) for cid, text in candidates])
        response = await call(self._stub.Rerank, request, timeout=timeout_s or self.timeout_s, service=SERVICE)
        if len(response.scores) != len(candidates):
            raise UpstreamFailed(f"{SERVICE} reranked {len(response.scores)} of {len(candidates)} candidates")
        return RerankResult(tuple(s.score for s in response.scores), response.model, response.method)

    async def synthesize(self, query: str, passages: Sequence[tuple[str, str, str]], *, max_chars: int = 0,
                         style: str = "", timeout_s: float | None = None) -> Synthesis:
        request = llm_pb.SynthesizeRequest(query=query, max_chars=max_chars, style=style, passages=[
            llm_pb.Passage(id=pid, title=title, text=text) for pid, title, text in passages])
        r = await call(self._stub.Synthesize, request, timeout=timeout_s or self.timeout_s, service=SERVICE)
        return Synthesis(r.answer, tuple(Citation(c.passage_id, c.title) for c in r.citations), r.truncated,
                         r.truncation_reason, r.model, r.method, r.degraded, tuple(r.degraded_reasons))

    async def chat(self, request: ChatRequest, *, timeout_s: float | None = None) -> AsyncIterator[ChatChunk]:
        """GenerateChatCompletion: the reply's chunks as they stream (the last has `done`); the
        deadline covers the whole stream. Errors arrive as `shared.errors`."""
        stream = self._stub.GenerateChatCompletion(convert.chat_request_to_pb(request),
                                                   timeout=timeout_s or max(self.timeout_s, 60.0))
        try:
            async for chunk in stream:
                yield convert.chat_chunk_from_pb(chunk)
        except grpc.RpcError as err:
            raise from_grpc_error(err, service=SERVICE) from None

    async def rerankers(self, *, timeout_s: float | None = None) -> list[str]:
        info = await call(self._stub.GetModelInfo, llm_pb.ModelInfoRequest(), timeout=timeout_s or self.timeout_s,
                          service=SERVICE)
        return list(info.rerankers)

    async def embedding_model(self, *, timeout_s: float | None = None) -> str:
        """The embedding model's name (GetModelInfo)."""
        info = await call(self._stub.GetModelInfo, llm_pb.ModelInfoRequest(), timeout=timeout_s or self.timeout_s,
                          service=SERVICE)
        return info.embedding_model

    async def info(self) -> llm_pb.ModelInfo:
        return await call(self._stub.GetModelInfo, llm_pb.ModelInfoRequest(), timeout=self.timeout_s, service=SERVICE)
