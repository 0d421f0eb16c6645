"""`nucleus chat` / `nucleus ask`: a persona agent over the RAG MCP tools.

    config.py   which LLM (OpenAI-compatible: any base_url) and limits, from the environment
    tools.py    the RAGPipeline's MCP tools through the official MCP client: their schemas in
                OpenAI function format, calls, and results formatted compactly for the model
    loop.py     the agent loop (tool_choice="auto", bounded tool rounds, streamed answer,
                citations) and the retrieval-only answer when no LLM is configured

The agent is an MCP client application: it calls the same tools, with the same bearer token
and the same scoping, as any external agent (docs/AGENTS.md).
"""
from cli.agent.config import AgentConfig
from cli.agent.loop import Answer, ChatAgent, retrieval_only
from cli.agent.tools import McpToolbox, connect, load_persona

__all__ = ["AgentConfig", "Answer", "ChatAgent", "McpToolbox", "connect", "load_persona", "retrieval_only"]
