"""GenerateChatCompletion's request: checked, bounded, and turned into the OpenAI wire shape.

    ChatRequest(messages, tools, tool_choice, max_tokens, model)   plain Python, from any adapter
    check_request()      roles, sizes, tool names and schemas, tool_choice — InvalidArgument
                         naming the field and what is accepted
    chat_model_for()     the model a request runs on: "" = the configured chat model, else one
                         of the operator's allowed models (`chat_models_allowed`); any other is
                         InvalidArgument naming `model` — a caller cannot pick an arbitrary model
    wire_messages() / wire_tools() / wire_tool_choice()      what the OpenAI-compatible client sends

The span (`chat_span`) follows the GenAI semantic conventions: `chat {model}`, CLIENT, with
gen_ai.operation.name / request.model / response.model / response.finish_reasons /
usage.input_tokens / usage.output_tokens. Message content goes on it only when content
capture is on (NUCLEUS_OTEL_CAPTURE_CONTENT), through `shared.telemetry.genai`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from shared.errors import InvalidArgument
from shared.telemetry.genai import set_content_attribute

ROLES = ("system", "user", "assistant", "tool")
TOOL_CHOICES = ("", "auto", "none", "required")
MAX_MESSAGES = 256
MAX_TOOLS = 64
MAX_TOOL_SCHEMA_CHARS = 16_000
MAX_TOKENS = 32_768
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ToolCall:
    index: int
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str = ""
    name: str = ""
    tool_call_id: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str = ""
    parameters_json: str = ""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: str = ""
    max_tokens: int = 0
    model: str = ""                     # "" = the configured chat model; else an allowed one


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One piece of the reply; the last has `done`, the finish reason and the usage."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    model: str = ""
    finish_reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    done: bool = False


def join_tool_call_pieces(calls: dict[int, dict[str, str]], pieces: Iterable[ToolCall]) -> None:
    """Add a chunk's tool-call pieces to `calls` (by index, as {id, name, arguments}): the first
    id a call is given stays, its name and arguments are concatenated in arrival order."""
    for c in pieces:
        slot = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
        slot["id"] = slot["id"] or c.id
        slot["name"] += c.name
        slot["arguments"] += c.arguments


def check_request(request: ChatRequest, *, max_text_chars: int) -> None:
    if not request.messages:
        raise InvalidArgument("messages", "at least one message is required")
    if len(request.messages) > MAX_MESSAGES:
        raise InvalidArgument("messages", f"{len(request.messages)} messages; at most {MAX_MESSAGES}")
    total = 0
    for i, m in enumerate(request.messages):
        if m.role not in ROLES:
            raise InvalidArgument(f"messages[{i}].role", f"{m.role!r} is not one of {', '.join(ROLES)}")
        if m.role == "tool" and not m.tool_call_id:
            raise InvalidArgument(f"messages[{i}].tool_call_id", "is required for role 'tool'")
        if m.tool_calls and m.role != "assistant":
            raise InvalidArgument(f"messages[{i}].tool_calls", "only an 'assistant' message carries tool calls")
        total += len(m.content) + sum(len(c.arguments) for c in m.tool_calls)
        if total > max_text_chars * 4:
            raise InvalidArgument("messages", f"more than {max_text_chars * 4} characters in all")
    if len(request.tools) > MAX_TOOLS:
        raise InvalidArgument("tools", f"{len(request.tools)} tools; at most {MAX_TOOLS}")
    names = set()
    for i, t in enumerate(request.tools):
        if not _TOOL_NAME.match(t.name):
            raise InvalidArgument(f"tools[{i}].name", "1-64 letters, digits, '_' or '-'")
        if t.name in names:
            raise InvalidArgument(f"tools[{i}].name", f"{t.name!r} is listed twice")
        names.add(t.name)
        if len(t.parameters_json) > MAX_TOOL_SCHEMA_CHARS:
            raise InvalidArgument(f"tools[{i}].parameters_json", f"longer than {MAX_TOOL_SCHEMA_CHARS} characters")
        if t.parameters_json:
            try:
                schema = json.loads(t.parameters_json)
            except ValueError:
                raise InvalidArgument(f"tools[{i}].parameters_json", "is not JSON") from None
            if not isinstance(schema, dict):
                raise InvalidArgument(f"tools[{i}].parameters_json", "must be a JSON Schema object")
    if request.tool_choice not in TOOL_CHOICES and request.tool_choice not in names:
        raise InvalidArgument("tool_choice", f"{request.tool_choice!r}; accepted: auto, none, required or the "
                                             "name of a listed tool")
    if not 0 <= request.max_tokens <= MAX_TOKENS:
        raise InvalidArgument("max_tokens", f"{request.max_tokens}; 0 (the model's default) to {MAX_TOKENS}")


def allowed_chat_models(chat_model: str, allowed: str) -> tuple[str, ...]:
    """The models chat may run on: the configured chat model and the operator's comma-separated
    `chat_models_allowed` (none configured: only the chat model)."""
    extra = tuple(m.strip() for m in allowed.split(",") if m.strip())
    return tuple(dict.fromkeys(((chat_model,) if chat_model else ()) + extra))


def chat_model_for(request: ChatRequest, chat_model: str, allowed: Sequence[str]) -> str:
    if not request.model:
        return chat_model
    if request.model not in allowed:
        raise InvalidArgument("model", f"{request.model!r} is not allowed on this stack; accepted: "
                                       f"{', '.join(allowed) or 'none'} (NUCLEUS_LLM_CHAT_MODELS_ALLOWED)")
    return request.model


def wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content or (None if m.tool_calls else "")}
        if m.name:
            item["name"] = m.name
        if m.tool_call_id:
            item["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            item["tool_calls"] = [{"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
        out.append(item)
    return out


def wire_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description,
        "parameters": json.loads(t.parameters_json) if t.parameters_json else {"type": "object", "properties": {}}}}
        for t in tools]


def wire_tool_choice(choice: str) -> Any:
    if choice in ("", "auto", "none", "required"):
        return choice or "auto"
    return {"type": "function", "function": {"name": choice}}


@contextmanager
def chat_span(model: str, request: ChatRequest, *,
              tracer_provider: trace.TracerProvider | None = None) -> Iterator[trace.Span]:
    tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
    with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.provider.name": "openai",
            "gen_ai.system": "openai", "nucleus.chat.messages": len(request.messages),
            "nucleus.chat.tools": len(request.tools)}) as span:
        if request.max_tokens:
            span.set_attribute("gen_ai.request.max_tokens", request.max_tokens)
        set_content_attribute(span, "gen_ai.input.messages", [m.content for m in request.messages])  # gated
        yield span


def end_chat_span(span: trace.Span, last: ChatChunk, reply_text: str) -> None:
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.response.model", last.model)
    span.set_attribute("gen_ai.response.finish_reasons", [last.finish_reason])
    span.set_attribute("gen_ai.usage.input_tokens", last.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", last.output_tokens)
    set_content_attribute(span, "gen_ai.output.messages", reply_text)              # gated
