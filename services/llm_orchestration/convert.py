"""protobuf <-> LlmOrchestration core results."""
from __future__ import annotations

import numpy as np

from nucleus.v1 import llm_orchestration_pb2 as llm_pb
from services.llm_orchestration import chat
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
        truncated=s.truncated, truncation_reason=s.truncation_reason, model=s.model, method=s.method,
        degraded=s.degraded, degraded_reasons=list(s.degraded_reasons))


def chat_request_from_pb(r: llm_pb.ChatCompletionRequest) -> chat.ChatRequest:
    return chat.ChatRequest(
        messages=tuple(chat.Message(m.role, m.content, m.name, m.tool_call_id,
                                    tuple(chat.ToolCall(c.index, c.id, c.name, c.arguments) for c in m.tool_calls))
                       for m in r.messages),
        tools=tuple(chat.Tool(t.name, t.description, t.parameters_json) for t in r.tools),
        tool_choice=r.tool_choice, max_tokens=r.max_tokens, model=r.model)


def chat_request_to_pb(r: chat.ChatRequest) -> llm_pb.ChatCompletionRequest:
    return llm_pb.ChatCompletionRequest(
        messages=[llm_pb.ChatMessage(role=m.role, content=m.content, name=m.name, tool_call_id=m.tool_call_id,
                                     tool_calls=[_call_to_pb(c) for c in m.tool_calls]) for m in r.messages],
        tools=[llm_pb.ChatTool(name=t.name, description=t.description, parameters_json=t.parameters_json)
               for t in r.tools],
        tool_choice=r.tool_choice, max_tokens=r.max_tokens, model=r.model)


def _call_to_pb(c: chat.ToolCall) -> llm_pb.ChatToolCall:
    return llm_pb.ChatToolCall(index=c.index, id=c.id, name=c.name, arguments=c.arguments)


def chat_chunk_to_pb(c: chat.ChatChunk) -> llm_pb.ChatCompletionChunk:
    return llm_pb.ChatCompletionChunk(
        content=c.content, tool_calls=[_call_to_pb(t) for t in c.tool_calls], finish_reason=c.finish_reason,
        usage=llm_pb.ChatUsage(input_tokens=c.input_tokens, output_tokens=c.output_tokens), model=c.model,
        done=c.done)


def chat_chunk_from_pb(c: llm_pb.ChatCompletionChunk) -> chat.ChatChunk:
    return chat.ChatChunk(content=c.content, tool_calls=tuple(chat.ToolCall(t.index, t.id, t.name, t.arguments)
                                                            for t in c.tool_calls),
                          model=c.model, finish_reason=c.finish_reason, input_tokens=c.usage.input_tokens,
                          output_tokens=c.usage.output_tokens, done=c.done)


def info_to_pb(info: dict) -> llm_pb.ModelInfo:
    return llm_pb.ModelInfo(
        embedding_model=info.get("embedding_model", ""), dimension=int(info.get("dimension", 0)),
        embedding_provider=info.get("provider", ""), chat_configured=bool(info.get("chat_configured")),
        chat_model=info.get("chat_model", ""), breaker_state=info.get("breaker_state", ""),
        rerankers=list(info.get("rerankers", ())))
