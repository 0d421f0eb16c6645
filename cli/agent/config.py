"""The agent's configuration: the OpenAI-compatible LLM it talks to, and its limits.

The LLM settings are LlmOrchestration's own names (shared/settings.py), so one environment
configures both the service's synthesis and the agent:

    NUCLEUS_LLM_OPENAI_BASE_URL     any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio)
    NUCLEUS_LLM_OPENAI_API_KEY      its key (or NUCLEUS_LLM_OPENAI_API_KEY_FILE: a file holding it);
                                    optional for local servers
    NUCLEUS_LLM_CHAT_MODEL          the chat model (a persona may name another)
    NUCLEUS_CHAT_MAX_TOOL_ROUNDS    tool rounds per question before the model must answer (default 4)

No base URL or no model: no LLM is configured, and answers are retrieval-only (loop.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shared.errors import InvalidArgument

DEFAULT_MAX_TOOL_ROUNDS = 4
MAX_TOOL_ROUNDS = 20


@dataclass(frozen=True)
class AgentConfig:
    base_url: str = ""
    api_key: str = ""
    model: str = ""
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    timeout_s: float = 60.0

    @property
    def llm_configured(self) -> bool:
        return bool(self.base_url and self.model)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, *, model: str = "") -> AgentConfig:
        e = os.environ if env is None else env
        key = e.get("NUCLEUS_LLM_OPENAI_API_KEY", "")
        key_file = e.get("NUCLEUS_LLM_OPENAI_API_KEY_FILE", "")
        if not key and key_file:
            try:
                key = Path(key_file).read_text().strip()
            except OSError as err:
                raise InvalidArgument("NUCLEUS_LLM_OPENAI_API_KEY_FILE",
                                      f"cannot be read ({err.strerror})") from None
        rounds_text = e.get("NUCLEUS_CHAT_MAX_TOOL_ROUNDS", str(DEFAULT_MAX_TOOL_ROUNDS))
        try:
            rounds = int(rounds_text)
        except ValueError:
            rounds = -1
        if not 0 <= rounds <= MAX_TOOL_ROUNDS:
            raise InvalidArgument("NUCLEUS_CHAT_MAX_TOOL_ROUNDS",
                                  f"must be an integer from 0 to {MAX_TOOL_ROUNDS}, got {rounds_text!r}")
        return cls(base_url=e.get("NUCLEUS_LLM_OPENAI_BASE_URL", "").strip(), api_key=key,
                   model=model or e.get("NUCLEUS_LLM_CHAT_MODEL", "").strip(), max_tool_rounds=rounds)
