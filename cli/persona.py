"""`nucleus persona put|get|list`: persona agents' settings through the RAGPipeline API (gRPC),
stored by the KnowledgeStore beside the persona's ranking profiles (docs/AGENTS.md).

    nucleus persona put analyst --tenant demo --prompt "You are a fleet analyst." \\
        --tools rag_search,rag_topics --model gpt-4o-mini
    nucleus persona get analyst --tenant demo
    nucleus persona list --tenant demo

As `nucleus search`: as the user of $NUCLEUS_API_KEY when set (writing needs the admin role),
else with the operator credential of the local stack.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from cli.stack import call_pipeline, put_get_list_parser
from nucleus.v1 import common_pb2 as pb
from shared.errors import InvalidArgument


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()] if text else []


def _show(p) -> dict:
    return {"persona_id": p.persona_id, "tenant_id": p.tenant_id, "display_name": p.display_name,
            "system_prompt": p.system_prompt, "allowed_tools": list(p.allowed_tools),
            "tools_disabled": p.tools_disabled, "allowed_sources": list(p.allowed_sources),
            "llm_model": p.llm_model,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p.updated_unix)) if p.updated_unix else ""}


def cmd_persona(args: argparse.Namespace) -> int:
    if args.action == "put":
        if not args.persona_id:
            raise InvalidArgument("persona_id", "is required: nucleus persona put ID --tenant T ...")
        prompt = args.prompt
        if args.prompt_file:
            prompt = Path(args.prompt_file).read_text()
        request = pb.Persona(tenant_id=args.tenant, persona_id=args.persona_id, display_name=args.name,
                             system_prompt=prompt, allowed_tools=_list(args.tools), tools_disabled=args.no_tools,
                             allowed_sources=_list(args.sources), llm_model=args.model)
        print(json.dumps(_show(asyncio.run(call_pipeline(args, "PutPersona", request))), indent=2))
    elif args.action == "get":
        if not args.persona_id:
            raise InvalidArgument("persona_id", "is required: nucleus persona get ID --tenant T")
        found = asyncio.run(call_pipeline(args, "GetPersona", pb.GetPersonaRequest(tenant_id=args.tenant,
                                                                                 persona_id=args.persona_id)))
        print(json.dumps(_show(found), indent=2))
    else:
        found = asyncio.run(call_pipeline(args, "ListPersonas", pb.ListPersonasRequest(tenant_id=args.tenant)))
        print(json.dumps([_show(p) for p in found.personas], indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    persona = put_get_list_parser(sub, "persona", "persona_id", "persona agents' settings: put, get, list")
    persona.add_argument("--name", default="", help="display name")
    persona.add_argument("--prompt", default="", help="system prompt added to the agent's base prompt")
    persona.add_argument("--prompt-file", default="", help="read the system prompt from this file")
    persona.add_argument("--tools", default="", help="comma-separated MCP tools the agent may call (default set "
                                                     "when empty)")
    persona.add_argument("--no-tools", action="store_true", help="the agent calls no tools at all")
    persona.add_argument("--sources", default="", help="comma-separated source ids the persona consults")
    persona.add_argument("--model", default="", help="LLM model (default NUCLEUS_LLM_CHAT_MODEL)")
    persona.set_defaults(func=cmd_persona)
