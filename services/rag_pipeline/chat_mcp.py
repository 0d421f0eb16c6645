"""`rag_chat`, the MCP face of chat (chat.py): one chat completion for the calling user, the
whole reply at once (MCP tool results do not stream; the gRPC `Chat` method does)."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from services.llm_orchestration import chat as chat_mod
from services.rag_pipeline.chat import ChatGate, whole_reply
from shared.identity import Principal
from shared.mcp_annotations import ADD
from shared.mcp_errors import guarded


class ToolCallIn(BaseModel):
    id: str = ""
    name: str
    arguments: str = ""


class MessageIn(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: Annotated[str, Field(max_length=200_000)] = ""
    name: str = ""
    tool_call_id: str = ""
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=64)] = []


class ToolIn(BaseModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None


class ChatOut(BaseModel):
    content: str
    tool_calls: list[ToolCallIn]
    finish_reason: str
    model: str
    usage: dict[str, int]


def chat_request(messages: list[MessageIn], tools: list[ToolIn] | None, tool_choice: str,
                 max_tokens: int) -> chat_mod.ChatRequest:
    return chat_mod.ChatRequest(
        messages=tuple(chat_mod.Message(m.role, m.content, m.name, m.tool_call_id,
                                        tuple(chat_mod.ToolCall(i, c.id, c.name, c.arguments)
                                              for i, c in enumerate(m.tool_calls))) for m in messages),
        tools=tuple(chat_mod.Tool(t.name, t.description, json.dumps(t.parameters) if t.parameters else "")
                    for t in tools or ()),
        tool_choice=tool_choice, max_tokens=max_tokens)


def register_chat_tool(mcp: MCPServer, gate: ChatGate, principal_of: Callable[[Context], Principal | None]) -> None:
    """Add `rag_chat` to `mcp`; `principal_of(ctx)` is the verified caller of a tool call."""

    @mcp.tool(annotations=ADD, name="rag_chat", description=(
        "One chat completion from the stack's chat model for the authenticated user (OpenAI-style messages, "
        "optional function tools and tool_choice; persona_id: a persona of the user's tenant, whose model is "
        "used). Subject to the user's request rate and token budget."))
    async def rag_chat(messages: Annotated[list[MessageIn], Field(min_length=1, max_length=chat_mod.MAX_MESSAGES)],
                       ctx: Context,
                       tools: Annotated[list[ToolIn] | None, Field(max_length=chat_mod.MAX_TOOLS)] = None,
                       tool_choice: str = "",
                       max_tokens: Annotated[int, Field(ge=0, le=chat_mod.MAX_TOKENS)] = 0,
                       persona_id: Annotated[str, Field(max_length=200)] = "") -> ChatOut:
        request = chat_request(messages, tools, tool_choice, max_tokens)

        async def run() -> ChatOut:
            return ChatOut(**await whole_reply(gate.chat(request, principal_of(ctx), persona_id=persona_id)))
        return await guarded(run)
