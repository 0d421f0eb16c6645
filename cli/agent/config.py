"""The agent's limits. Its model is the stack's (RAGPipeline.Chat → LlmOrchestration, see
stack_chat.py): the model endpoint, key and chat model are LlmOrchestration's settings
(NUCLEUS_LLM_OPENAI_BASE_URL, NUCLEUS_LLM_OPENAI_API_KEY, NUCLEUS_LLM_CHAT_MODEL), not the CLI's.
The CLI's own (NUCLEUS_CHAT_MAX_TOOL_ROUNDS) is `CliSettings.chat_max_tool_rounds`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AgentConfig:
    max_tool_rounds: int = 4          # tool rounds per question before the model must answer
