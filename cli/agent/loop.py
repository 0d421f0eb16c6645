"""The agent loop: the stack's chat model answers with the RAG tools it chooses.

    question ─▶ chat completion (RAGPipeline.Chat, streamed; tools = the allowed MCP tools,
       │        tool_choice="auto"; stack_chat.py)
       ├─ tool calls ─▶ each through MCP (McpToolbox.call) ─▶ compact result as a "tool"
       │                message ─▶ next round (at most `max_tool_rounds` rounds)
       └─ text ─▶ the answer (streamed to `on_token`), with the sources it cites

Robustness: arguments that are not a JSON object go back to the model as an error message
naming the problem (no call is made); a failing tool returns "error: ..." the model can read;
once the round limit is reached the model is asked once more, without tools, to answer from
what it has. A stack without a chat model, or a chat that fails (unreachable, the caller's
rate or token budget spent, …), gives a retrieval-only answer instead: the ranked passages of
rag_search and the service's extractive synthesis (rag_get_synthesized_results), labelled as
such, with the reason in `note`.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cli.agent.config import AgentConfig
from cli.agent.stack_chat import NO_CHAT_MODEL
from cli.agent.tools import McpToolbox, Source
from services.llm_orchestration.chat import join_tool_call_pieces
from shared.errors import NucleusError, Unavailable
from shared.redaction import Redactor

log = logging.getLogger(__name__)

BASE_PROMPT = (
    "You answer questions about the user's document collection using the tools provided. Use rag_search for "
    "facts and passages; rag_topics for the main themes of the collection; rag_topic_evolution for how a topic "
    "changed over time; rag_recent_developments for what is new in a topic; rag_topic_map for the layout of "
    "topics. Base every statement on tool results and cite them with their [n] numbers. If the tools return "
    "nothing relevant, say so. Tool errors are shown to you as 'error: ...': fix the arguments or try another "
    "tool.")
ROUND_LIMIT_NOTE = ("The tool round limit is reached: answer now from the tool results above, without calling "
                    "tools.")
NO_LLM = ("Retrieval-only answer: the stack has no chat model (LlmOrchestration's NUCLEUS_LLM_OPENAI_BASE_URL "
          "and NUCLEUS_LLM_CHAT_MODEL give a conversational answer).")


@dataclass
class ToolCallRecord:
    name: str
    arguments: dict[str, Any] | None        # None: the model's arguments were not a JSON object
    ok: bool
    result: str                             # what the model was shown


@dataclass
class Answer:
    text: str
    mode: str                               # "llm" | "retrieval-only"
    sources: list[Source] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    rounds: int = 0                         # tool rounds used
    note: str = ""                          # e.g. the round limit was reached, the LLM failed

    def to_json(self) -> dict[str, Any]:
        return {"answer": self.text, "mode": self.mode, "note": self.note, "rounds": self.rounds,
                "sources": [{"n": s.n, "title": s.title, "url": s.url} for s in self.sources],
                "tool_calls": [{"name": c.name, "arguments": c.arguments, "ok": c.ok} for c in self.tool_calls]}


def _parse_arguments(raw: str | None) -> tuple[dict[str, Any] | None, str]:
    """The tool call's arguments as an object, or (None, the problem)."""
    try:
        value = json.loads(raw or "{}")
    except ValueError as err:
        return None, f"arguments are not valid JSON ({err.msg} at character {err.pos})"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, ""


class ChatAgent:
    """One conversation (the history is kept between `ask` calls)."""

    def __init__(self, config: AgentConfig, toolbox: McpToolbox, *, system_prompt: str = "",
                 llm: Any = None, on_token: Callable[[str], None] | None = None,
                 secrets: tuple[str, ...] = ()) -> None:
        """`llm`: the stack's chat (stack_chat.StackChat, or anything with its `stream`); None =
        retrieval-only answers. `secrets` never appear in a note."""
        self.config = config
        self.toolbox = toolbox
        self.on_token = on_token
        self._redactor = Redactor([s for s in secrets if s])
        prompt = BASE_PROMPT + (f"\n\n{system_prompt.strip()}" if system_prompt.strip() else "")
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": prompt}]
        self._llm = llm
        self._specs: list[dict[str, Any]] | None = None

    async def ask(self, question: str) -> Answer:
        question = question.strip()
        if not question:
            return Answer(text="Ask a question.", mode="llm" if self._llm else "retrieval-only")
        if self._llm is None:
            return await retrieval_only(self.toolbox, question)
        if self._specs is None:
            self._specs = await self.toolbox.specs()
        start = len(self.messages)
        self.messages.append({"role": "user", "content": question})
        answer = Answer(text="", mode="llm")
        try:
            await self._loop(answer)
        except NucleusError as err:
            del self.messages[start:]              # the failed turn leaves no half-written history
            fallback = await retrieval_only(self.toolbox, question)
            if isinstance(err, Unavailable) and NO_CHAT_MODEL in err.message:
                self._llm = None                   # the stack has none: retrieval-only from now on
            else:
                fallback.note = self._redactor.redact(
                    f"the stack's chat failed ({type(err).__name__}: {str(err)[:200]}); retrieval-only answer")
            fallback.tool_calls = answer.tool_calls + fallback.tool_calls
            return fallback
        cited = {int(n) for n in re.findall(r"\[(\d+)\]", answer.text)}
        consulted = {s.n: s for s in self.toolbox.sources.by_key.values()}
        answer.sources = [consulted[n] for n in sorted(cited) if n in consulted]
        return answer

    async def _loop(self, answer: Answer) -> None:
        rounds = self.config.max_tool_rounds
        while True:
            allow_tools = bool(self._specs) and answer.rounds < rounds
            if not allow_tools and answer.rounds >= rounds and answer.rounds > 0:
                self.messages.append({"role": "system", "content": ROUND_LIMIT_NOTE})
                answer.note = f"stopped calling tools after {rounds} round(s) (NUCLEUS_CHAT_MAX_TOOL_ROUNDS)"
            text, calls = await self._complete(allow_tools)
            if not calls or not allow_tools:
                answer.text = text or ("(the model returned no answer)" if not calls else
                                       "(the model kept calling tools past the round limit)")
                self.messages.append({"role": "assistant", "content": answer.text})
                return
            answer.rounds += 1
            self.messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]})
            for c in calls:
                args, problem = _parse_arguments(c["arguments"])
                if args is None:
                    result, ok = f"error: {problem}; call {c['name']} again with a JSON object of arguments", False
                else:
                    result, ok, _ = await self.toolbox.call(c["name"], args)
                answer.tool_calls.append(ToolCallRecord(c["name"], args, ok, result))
                self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})

    async def _complete(self, allow_tools: bool) -> tuple[str, list[dict[str, str]]]:
        """One streamed chat completion: (text, tool calls as {id, name, arguments})."""
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        async for chunk in self._llm.stream(self.messages, self._specs if allow_tools else None, "auto"):
            if chunk.content:
                text.append(chunk.content)
                if self.on_token is not None:
                    self.on_token(chunk.content)
            join_tool_call_pieces(calls, chunk.tool_calls)
        ordered = [calls[i] for i in sorted(calls)]
        for i, c in enumerate(ordered):
            c["id"] = c["id"] or f"call_{i}"
        return "".join(text), ordered


async def retrieval_only(toolbox: McpToolbox, question: str, *, top: int = 5) -> Answer:
    """Ranked passages (rag_search) and the service's extractive synthesis
    (rag_get_synthesized_results) of `question`, through the same MCP tools, labelled."""
    answer = Answer(text="", mode="retrieval-only")
    passages, ok, cited = await toolbox.call("rag_search", {"search_phrases": [question], "max_segments": top},
                                             check=False)
    answer.tool_calls.append(ToolCallRecord("rag_search", {"search_phrases": [question]}, ok, passages))
    synthesis, ok2, cited2 = await toolbox.call("rag_get_synthesized_results", {"query": question, "top_k": top},
                                                 check=False)
    answer.tool_calls.append(ToolCallRecord("rag_get_synthesized_results", {"query": question}, ok2, synthesis))
    answer.text = (f"{NO_LLM}\n\nExtractive synthesis:\n{synthesis if ok2 else '(unavailable: ' + synthesis + ')'}"
                   f"\n\nRanked results:\n{passages}")
    numbers = set(cited) | set(cited2)
    answer.sources = sorted((s for s in toolbox.sources.by_key.values() if s.n in numbers), key=lambda s: s.n)
    return answer
