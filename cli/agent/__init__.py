"""`nucleus chat` / `nucleus ask`: a persona agent over the RAG MCP tools.

    config.py   the agent's limits, from the environment
    stack_chat.py  its model: the stack's chat, RAGPipeline.Chat over gRPC as the caller
    tools.py    the RAGPipeline's MCP tools through the official MCP client: their schemas in
                OpenAI function format, calls, and results formatted compactly for the model
    loop.py     the agent loop (tool_choice="auto", bounded tool rounds, streamed answer,
                citations) and the retrieval-only answer when no LLM is configured

The agent is an MCP client application: it calls the same tools, with the same bearer token
and the same scoping, as any external agent (docs/AGENTS.md).
"""
from cli.agent.config import AgentConfig
from cli.agent.loop import Answer, ChatAgent, retrieval_only
from cli.agent.stack_chat import StackChat
from cli.agent.tools import McpToolbox, connect, load_persona

__all__ = ["AgentConfig", "Answer", "ChatAgent", "McpToolbox", "StackChat", "connect", "load_persona", "retrieval_only"]
