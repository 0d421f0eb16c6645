"""The agent's model: the stack's chat, through RAGPipeline.Chat (gRPC, streamed), as the caller.

    ChatAgent ──gRPC RagPipeline.Chat (the caller's bearer token)──▶ RAGPipeline
        (checks the caller, their request rate and token budget: services/rag_pipeline/chat.py)
        ──▶ LlmOrchestration.GenerateChatCompletion ──▶ the OpenAI-compatible endpoint

One client and one policy: the model's key, retries, circuit breaker, traces and usage live in
LlmOrchestration; the CLI holds no model key and talks to no model endpoint itself. With
authentication off (no token) the stack's local principal is the caller. A stack without a chat
model answers Unavailable (`NO_CHAT_MODEL` in its message): the agent then answers retrieval-only.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.llm_orchestration import convert
from services.llm_orchestration.chat import ChatChunk, ChatRequest, Message, Tool, ToolCall
from shared.grpc_client import aio_channel
from shared.grpc_errors import from_grpc_error
from shared.identity import LOCAL_PRINCIPAL_METADATA

SERVICE = "RAGPipeline"
NO_CHAT_MODEL = "no chat model is configured"       # LlmOrchestration's Unavailable when it has none


def chat_request(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                 tool_choice: str) -> ChatRequest:
    """OpenAI-style messages and function tools (what the agent keeps) as a ChatRequest."""
    def calls(m: dict[str, Any]) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(i, c.get("id", ""), c["function"]["name"], c["function"].get("arguments") or "")
                     for i, c in enumerate(m.get("tool_calls") or ()))
    return ChatRequest(
        messages=tuple(Message(m["role"], m.get("content") or "", m.get("name", ""), m.get("tool_call_id", ""),
                               calls(m)) for m in messages),
        tools=tuple(Tool(t["function"]["name"], t["function"].get("description", ""),
                         json.dumps(t["function"]["parameters"]) if t["function"].get("parameters") else "")
                    for t in tools or ()),
        tool_choice=tool_choice if tools else "")


class StackChat:
    """RAGPipeline.Chat at `target`, as the holder of `token` (none: the local principal); with
    `persona_id`, as that persona of the caller's tenant (the stack applies its `llm_model`)."""

    def __init__(self, target: str, token: str = "", *, tls_ca_file: Path | None = None,
                 timeout_s: float = 120.0, persona_id: str = "") -> None:
        self.target = target
        self.persona_id = persona_id
        # No channel retries: LlmOrchestration retries the model call under its breaker (one policy).
        self._channel = aio_channel(target, None, tls_ca_file=tls_ca_file)
        self._stub = rag_grpc.RagPipelineStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else (LOCAL_PRINCIPAL_METADATA,)
        self.timeout_s = timeout_s

    async def close(self) -> None:
        await self._channel.close()

    async def stream(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None,
                     tool_choice: str = "auto") -> AsyncIterator[ChatChunk]:
        """The reply's chunks as they arrive; errors as `shared.errors` (the deadline covers the stream)."""
        completion = convert.chat_request_to_pb(chat_request(messages, tools, tool_choice))
        request = rag_pb.ChatRequest(completion=completion, persona_id=self.persona_id)
        call = self._stub.Chat(request, timeout=self.timeout_s, metadata=self._metadata)
        try:
            async for chunk in call:
                yield convert.chat_chunk_from_pb(chunk)
        except grpc.RpcError as err:
            raise from_grpc_error(err, service=SERVICE) from None


__all__ = ["NO_CHAT_MODEL", "StackChat", "chat_request"]
