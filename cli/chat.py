"""`nucleus chat`, `nucleus ask` and `nucleus topics`: the persona agent and the topic tools in
a terminal, as an MCP client of the running stack's RAGPipeline (cli/agent, docs/AGENTS.md).

    nucleus chat [--persona P]              a conversation; answers stream, then their sources
    nucleus ask "question" [--persona P]    one answer (--json for scripts)
    nucleus topics [list|evolution|recent|map] [--png FILE]

The MCP endpoint is the running stack's (stack.json) unless --url is given; the bearer token is
--token, else $NUCLEUS_API_KEY (a stack without authentication serves the local principal).
The model is the stack's: RAGPipeline.Chat over gRPC (the running stack's address unless
--rag-pipeline-target), as the same caller, under their rate and token budget
(cli/agent/stack_chat.py); a stack without a chat model gives retrieval-only answers, labelled.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape

from cli.agent import AgentConfig, ChatAgent, McpToolbox, StackChat, connect, load_persona
from cli.agent.tools import Sources, format_result
from cli.stack import console, stack_state, target, tls_ca
from shared.errors import InvalidArgument, Unavailable
from shared.settings import cli_settings


def _endpoint(args: argparse.Namespace) -> tuple[str, str]:
    url = args.url or stack_state(args)["services"]["rag_pipeline"]["mcp"]
    token = args.token or cli_settings(args).api_key.get_secret_value()
    return url, token


def _stack_chat(args: argparse.Namespace, token: str) -> tuple[StackChat | None, str]:
    """The stack's chat (RAGPipeline.Chat) as the caller, or (None, why not)."""
    try:
        address = target(args, "rag_pipeline")
    except Unavailable:
        return None, ("retrieval-only: no RAGPipeline gRPC address to chat through (give --rag-pipeline-target, "
                      "or run on the stack's machine)")
    return StackChat(address, token, tls_ca_file=tls_ca(args)), ""


async def _agent(client: Any, args: argparse.Namespace, chat: StackChat | None, on_token=None):
    persona: dict[str, Any] = {}
    if args.persona:
        persona = await load_persona(client, args.persona)
        if chat is not None:
            chat.persona_id = args.persona              # the stack applies the persona's llm_model
    token = args.token or cli_settings(args).api_key.get_secret_value()
    allowed = () if persona.get("tools_disabled") else (tuple(persona.get("allowed_tools") or ()) or None)
    toolbox = McpToolbox(client, allowed, secrets=(token,), sources=tuple(persona.get("allowed_sources") or ()))
    bot = ChatAgent(AgentConfig(cli_settings(args).chat_max_tool_rounds), toolbox,
                    system_prompt=persona.get("system_prompt", ""), llm=chat,
                    on_token=on_token, secrets=(token,))
    return bot, persona


def _write_token(text: str) -> None:
    """A piece of a streamed answer, shown as it arrives."""
    sys.stdout.write(text)
    sys.stdout.flush()


@asynccontextmanager
async def _session(args: argparse.Namespace, *, stream: bool
                   ) -> AsyncIterator[tuple[ChatAgent, dict[str, Any], StackChat | None, str]]:
    """(the persona agent, its persona, the stack's chat or None, why not) over the stack's MCP
    endpoint; with `stream`, answers are written as they arrive. The chat is closed on leaving."""
    url, token = _endpoint(args)
    chat, why_not = _stack_chat(args, token)
    try:
        async with connect(url, token) as client:
            bot, persona = await _agent(client, args, chat, on_token=_write_token if stream else None)
            yield bot, persona, chat, why_not
    finally:
        if chat is not None:
            await chat.close()


def _print_answer(console: Any, answer: Any, show_tools: bool, *, streamed: bool) -> None:
    """The answer's text (unless the model's reply was streamed as it came), then its tool calls
    (with `show_tools`), sources and note."""
    if not streamed or answer.mode != "llm":
        sys.stdout.write(answer.text)
    sys.stdout.write("\n")
    if show_tools:
        for c in answer.tool_calls:
            args = "(malformed arguments)" if c.arguments is None else json.dumps(c.arguments, ensure_ascii=False)
            console.print(f"[dim]→ {escape(c.name)} {escape(args)}[/dim]", soft_wrap=True)
            for line in c.result.splitlines()[:12]:
                console.print(f"[dim]    {escape(line[:160])}[/dim]", soft_wrap=True)

    if answer.sources:
        console.print("[bold]Sources[/bold]")
        for s in answer.sources:
            console.print(f"  [{s.n}] {escape(s.title)} — {escape(s.url)}", soft_wrap=True)
    if answer.tool_calls:
        calls = ", ".join(f"{c.name}{'' if c.ok else ' (error)'}" for c in answer.tool_calls)
        console.print(f"[dim]tools: {escape(calls)}[/dim]")
    if answer.note:
        console.print(f"[yellow]{escape(answer.note)}[/yellow]")


# ---------------------------------------------------------------------------- chat / ask
def cmd_chat(args: argparse.Namespace) -> int:
    return asyncio.run(_chat(args))


async def _chat(args: argparse.Namespace) -> int:
    async with _session(args, stream=True) as (bot, persona, chat, why_not):
        who = persona.get("display_name") or args.persona or "assistant"
        mode = f"the stack's chat model via RAGPipeline at {chat.target}" if chat else why_not
        console.print(f"[bold]nucleus chat[/bold] — {escape(who)}, {escape(mode)}. /quit to leave.")
        while True:
            try:
                question = await asyncio.to_thread(input, "\nyou> ")
            except EOFError:
                break
            if question.strip() in ("/quit", "/exit", "quit", "exit"):
                break
            if not question.strip():
                continue
            if not sys.stdin.isatty():          # piped questions: show them, as a terminal would
                sys.stdout.write(question + "\n")
            sys.stdout.write(f"{who}> ")
            sys.stdout.flush()
            _print_answer(console, await bot.ask(question), args.show_tools, streamed=True)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    return asyncio.run(_ask(args))


async def _ask(args: argparse.Namespace) -> int:
    streamed = not args.json and sys.stdout.isatty()
    async with _session(args, stream=streamed) as (bot, _, _, why_not):
        answer = await bot.ask(args.question)
    if why_not and not answer.note:
        answer.note = why_not
    if args.json:
        print(json.dumps(answer.to_json(), ensure_ascii=False, indent=2))
        return 0
    _print_answer(console, answer, args.show_tools, streamed=streamed)
    return 0


# ---------------------------------------------------------------------------- topics
def cmd_topics(args: argparse.Namespace) -> int:
    return asyncio.run(_topics(args))


async def _topics(args: argparse.Namespace) -> int:
    tool = {"list": "rag_topics", "evolution": "rag_topic_evolution", "recent": "rag_recent_developments",
            "map": "rag_topic_map"}[args.view]
    arguments: dict[str, Any] = {"k": args.k}
    if args.view == "evolution":
        arguments.update(period=args.period, query=args.query or "")
    if args.view == "recent":
        if not args.query and args.topic is None:
            raise InvalidArgument("--topic", "give --topic N or --query TEXT")
        arguments.update(query=args.query or "")
    if args.topic is not None and args.view in ("evolution", "recent"):
        arguments["topic_id"] = args.topic
    if args.view == "map":
        arguments["include_png"] = bool(args.png)
    url, token = _endpoint(args)
    async with connect(url, token) as client:
        for _ in range(int(args.wait / 0.5) + 1):
            result = await client.call_tool(tool, arguments)
            if result.is_error:
                raise InvalidArgument(tool, " ".join(getattr(c, "text", "") for c in result.content))
            body = result.structured_content or {}
            if body.get("status") != "computing":
                break
            await asyncio.sleep(0.5)
    if args.view == "map" and args.png:
        png = base64.b64decode(body.pop("png_base64", ""))
        Path(args.png).write_bytes(png)
        console.print(f"wrote {args.png} ({len(png)} bytes, {len(body.get('points', []))} documents)")
    if args.json:
        print(json.dumps(body, ensure_ascii=False, indent=2))
    else:
        text, _ = format_result(tool, body, Sources())
        print(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    def endpoint_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", default="", help="the RAGPipeline MCP endpoint (default: the running stack's)")
        p.add_argument("--token", default="", help="bearer token (default $NUCLEUS_API_KEY; none for a stack "
                                                   "without authentication)")
        p.add_argument("--rag-pipeline-target", dest="rag_pipeline_target", default="",
                       help="chat: the RAGPipeline gRPC address (default: the running stack's)")
        p.add_argument("--show-tools", action="store_true", help="after each answer, the tool calls and the "
                                                                 "results the model was shown")

    chat = sub.add_parser("chat", help="chat with a persona agent over the RAG tools (the stack's chat model)")
    chat.add_argument("--persona", default="", help="a persona id (nucleus persona put)")
    endpoint_args(chat)
    chat.set_defaults(func=cmd_chat)

    ask = sub.add_parser("ask", help="one answer from the persona agent (for scripts)")
    ask.add_argument("question")
    ask.add_argument("--persona", default="")
    ask.add_argument("--json", action="store_true", help="print the answer, sources and tool calls as JSON")
    endpoint_args(ask)
    ask.set_defaults(func=cmd_ask)

    topics = sub.add_parser("topics", help="topics of your documents: list, evolution, recent, map")
    topics.add_argument("view", nargs="?", default="list", choices=["list", "evolution", "recent", "map"])
    topics.add_argument("--k", type=int, default=0, help="number of topics (0 = automatic)")
    topics.add_argument("--period", default="year", choices=["month", "quarter", "year"])
    topics.add_argument("--topic", type=int, default=None, help="a topic id (evolution, recent)")
    topics.add_argument("--query", default="", help="the query's topic (evolution, recent)")
    topics.add_argument("--png", default="", help="map: write a PNG here")
    topics.add_argument("--json", action="store_true")
    topics.add_argument("--wait", type=float, default=120.0, help="seconds to wait while topics are computed")
    endpoint_args(topics)
    topics.set_defaults(func=cmd_topics)
