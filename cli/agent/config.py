"""The agent's limits. Its model is the stack's (RAGPipeline.Chat → LlmOrchestration, see
stack_chat.py): the model endpoint, key and chat model are LlmOrchestration's settings
(NUCLEUS_LLM_OPENAI_BASE_URL, NUCLEUS_LLM_OPENAI_API_KEY, NUCLEUS_LLM_CHAT_MODEL), not the CLI's.

    NUCLEUS_CHAT_MAX_TOOL_ROUNDS    tool rounds per question before the model must answer (default 4)
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from shared.errors import InvalidArgument

DEFAULT_MAX_TOOL_ROUNDS = 4
MAX_TOOL_ROUNDS = 20


@dataclass(frozen=True)
class AgentConfig:
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentConfig:
        e = os.environ if env is None else env
        rounds_text = e.get("NUCLEUS_CHAT_MAX_TOOL_ROUNDS", str(DEFAULT_MAX_TOOL_ROUNDS))
        try:
            rounds = int(rounds_text)
        except ValueError:
            rounds = -1
        if not 0 <= rounds <= MAX_TOOL_ROUNDS:
            raise InvalidArgument("NUCLEUS_CHAT_MAX_TOOL_ROUNDS",
                                  f"must be an integer from 0 to {MAX_TOOL_ROUNDS}, got {rounds_text!r}")
        return cls(max_tool_rounds=rounds)
