"""protobuf <-> LlmOrchestration core results."""
from __future__ import annotations

import numpy as np

from nucleus.v1 import llm_orchestration_pb2 as llm_pb
from services.llm_orchestration.results import EmbeddingResult, Expansion, RerankResult, Synthesis

_EXPANSION = {"llm": llm_pb.EXPANSION_METHOD_LLM, "keywords": llm_pb.EXPANSION_METHOD_KEYWORDS,
              "unavailable": llm_pb.EXPANSION_METHOD_UNAVAILABLE}


def embeddings_to_pb(r: EmbeddingResult) -> llm_pb.GenerateEmbeddingsResponse:
    vectors = np.ascontiguousarray(r.vectors, dtype="<f4")
    return llm_pb.GenerateEmbeddingsResponse(
        vectors_f32=vectors.tobytes(), dimension=r.dimension, count=vectors.shape[0], model=r.model,
        provider=r.provider, cache_hits=r.cache_hits)


def expansion_to_pb(e: Expansion) -> llm_pb.ExpandQueryResponse:
    return llm_pb.ExpandQueryResponse(phrases=list(e.phrases), method=_EXPANSION[e.method], note=e.note, model=e.model)


def rerank_to_pb(ids: list[str], r: RerankResult) -> llm_pb.RerankResponse:
    return llm_pb.RerankResponse(scores=[llm_pb.RerankScore(id=i, score=s) for i, s in zip(ids, r.scores)],
                                 model=r.model, method=r.method)


def synthesis_to_pb(s: Synthesis) -> llm_pb.SynthesizeResponse:
    return llm_pb.SynthesizeResponse(
        answer=s.answer, citations=[llm_pb.Citation(passage_id=c.passage_id, title=c.title) for c in s.citations],
        truncated=s.truncated, truncation_reason=s.truncation_reason, model=s.model, method=s.method)


def info_to_pb(info: dict) -> llm_pb.ModelInfo:
    return llm_pb.ModelInfo(
        embedding_model=info.get("embedding_model", ""), dimension=int(info.get("dimension", 0)),
        embedding_provider=info.get("provider", ""), chat_configured=bool(info.get("chat_configured")),
        chat_model=info.get("chat_model", ""), breaker_state=info.get("breaker_state", ""))
