"""Chat for end users: the one door to LlmOrchestration.GenerateChatCompletion.

LlmOrchestration's callers are the stack's services and its operator; end users reach a chat
model only here, through RAGPipeline (gRPC `Chat`, streaming; the MCP tool `rag_chat`, whole
replies), which decides per call:

    who          a verified caller is required when authentication is on (Unauthenticated
                 otherwise); with it off the local principal is the caller
    how often    `chat_rate_per_s` / `chat_burst`: a token bucket per tenant and user
                 (shared/ratelimit.py) — ResourceExhausted with retry-after when empty
    how much     `chat_token_budget` model tokens (input + output, as the model reports them)
                 per user per rolling `chat_budget_window_s`; a request is refused once the
                 budget is spent, and its `max_tokens` is capped at what is left
                 (ResourceExhausted saying when tokens free up)
    which model  the persona's: `persona_id` names a persona of the caller's tenant (read as
                 GetPersona reads it: the tenant is the verified caller's; another tenant's
                 persona is NotFound) and its `llm_model` is asked of LlmOrchestration, which
                 runs only models its operator allows (InvalidArgument naming `model` otherwise).
                 No persona, or one without a model: the stack's chat model. The caller never
                 names a model itself (a request with `model` set is InvalidArgument).

Operators and the stack's own services are not limited (`shared.ratelimit.rate_key`). What the
model returns streams through unchanged; usage is charged when the reply's last chunk arrives
(a reply cut off midway charges what it reported, or nothing if it reported nothing).
"""
from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from services.llm_orchestration.chat import ChatChunk, ChatRequest, join_tool_call_pieces
from shared.errors import InvalidArgument, ResourceExhausted, Unauthenticated, retry_after_seconds
from shared.identity import Principal
from shared.ratelimit import RateLimiter, rate_key

MAX_TRACKED_USERS = 100_000
#: `persona_model(persona_id, caller)`: the persona's `llm_model` ("" = the stack's chat model).
PersonaModel = Callable[[str, Principal | None], Awaitable[str]]


class TokenBudget:
    """Model tokens spent per key over a rolling window (bounded memory: oldest keys forgotten)."""

    def __init__(self, budget: int, window_s: float, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = MAX_TRACKED_USERS) -> None:
        self.budget = budget
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._spent: OrderedDict[str, deque[tuple[float, int]]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def _window(self, key: str) -> deque[tuple[float, int]]:
        now = self._clock()
        entries = self._spent.setdefault(key, deque())
        self._spent.move_to_end(key)
        while entries and entries[0][0] <= now - self.window_s:
            entries.popleft()
        while len(self._spent) > self._max_keys:
            self._spent.popitem(last=False)
        return entries

    def remaining(self, key: str) -> int:
        return max(0, self.budget - sum(n for _, n in self._window(key)))

    def check(self, key: str) -> int:
        """Tokens left for `key`; ResourceExhausted when none are."""
        left = self.remaining(key)
        if left <= 0:
            entries = self._spent[key]
            wait = max(0.0, entries[0][0] + self.window_s - self._clock()) if entries else self.window_s
            raise ResourceExhausted(
                f"chat token budget spent: {self.budget} tokens per {self.window_s:g} s; "
                f"retry after {retry_after_seconds(wait)} s", retry_after_s=wait)
        return left

    def charge(self, key: str, tokens: int) -> None:
        if tokens > 0:
            self._window(key).append((self._clock(), tokens))


class ChatGate:
    """Checks the caller, applies their rate and token budget, streams the model's reply."""

    def __init__(self, llm: Any, *, rate_per_s: float, burst: int, token_budget: int, window_s: float,
                 require_caller: bool, clock: Callable[[], float] = time.monotonic,
                 persona_model: PersonaModel | None = None) -> None:
        self._llm = llm                        # a LanguageModel port with `chat(request)` (ports.py)
        self._persona_model = persona_model
        self._rate = RateLimiter(rate_per_s, burst, clock=clock)
        self.budget = TokenBudget(token_budget, window_s, clock=clock)
        self._require_caller = require_caller

    @classmethod
    def from_settings(cls, llm: Any, settings: Any, *, require_caller: bool,
                      persona_model: PersonaModel | None = None) -> ChatGate:
        return cls(llm, rate_per_s=settings.chat_rate_per_s, burst=settings.chat_burst,
                   token_budget=settings.chat_token_budget, window_s=settings.chat_budget_window_s,
                   require_caller=require_caller, persona_model=persona_model)

    async def chat(self, request: ChatRequest, caller: Principal | None, *, persona_id: str = "",
                   timeout_s: float | None = None) -> AsyncIterator[ChatChunk]:
        if caller is None and self._require_caller:
            raise Unauthenticated("chat needs a verified caller (an API key or token)")
        if request.model:
            raise InvalidArgument("model", "is chosen by the persona (persona_id) and the operator, not by the "
                                           "caller; leave it empty")
        key = rate_key(caller)
        if key is not None:
            self._rate.check(key, what="chat requests")
            if self.budget.enabled:
                left = self.budget.check(key)
                if request.max_tokens == 0 or request.max_tokens > left:
                    request = replace(request, max_tokens=min(left, 32_768))
        if persona_id:
            if self._persona_model is None:
                raise InvalidArgument("persona_id", "personas are not served by this process; leave it empty")
            request = replace(request, model=await self._persona_model(persona_id, caller))
        async for chunk in self._llm.chat(request, timeout_s=timeout_s):
            if chunk.done and key is not None:
                self.budget.charge(key, chunk.input_tokens + chunk.output_tokens)
            yield chunk


async def whole_reply(chunks: AsyncIterator[ChatChunk]) -> dict[str, Any]:
    """A streamed reply collected: text, tool calls (pieces joined per index), finish reason, usage."""
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    last = ChatChunk()
    async for chunk in chunks:
        text.append(chunk.content)
        join_tool_call_pieces(calls, chunk.tool_calls)
        if chunk.done:
            last = chunk
    return {"content": "".join(text), "tool_calls": [calls[i] for i in sorted(calls)],
            "finish_reason": last.finish_reason, "model": last.model,
            "usage": {"input_tokens": last.input_tokens, "output_tokens": last.output_tokens}}


__all__ = ["ChatGate", "TokenBudget", "whole_reply"]

