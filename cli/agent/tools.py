"""The RAGPipeline's MCP tools as the agent's tools, through the official MCP client.

    connect(url, token)     an MCP client over streamable HTTP with the user's bearer token
    McpToolbox.specs()      the allowed tools in OpenAI function-calling format (the MCP
                            tools' own descriptions and input schemas)
    McpToolbox.call()       one call: (compact text for the model, ok, sources it cited)

Tool results are formatted compactly for the model (`format_result`): one line per segment,
topic, period or document, long texts cut, citations numbered [n] across the conversation so
the answer can cite them. A failing tool (a tool error, an unknown or disallowed tool, a
transport error) comes back as a one-line "error: ..." the model can read.
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared.redaction import Redactor

if TYPE_CHECKING:
    from mcp import Client

# The tools offered to the model unless a persona says otherwise: retrieval and the topic tools.
DEFAULT_TOOLS = ("rag_search", "rag_topics", "rag_topic_evolution", "rag_recent_developments", "rag_topic_map")
# Arguments the model never sets (identity comes from the bearer token; PNGs are for humans).
HIDDEN_ARGUMENTS = {"username", "user_token", "include_png"}
TEXT_CHARS = 360
RESULT_CHARS = 6_000


@contextlib.asynccontextmanager
async def connect(url: str, token: str = "") -> AsyncIterator[Client]:
    """An MCP client of the RAGPipeline at `url` (…/mcp), authenticated by `token` if given."""
    from mcp import Client           # here, not at the top: the CLI's other commands never load the MCP SDK
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))) as client:
        yield client


@dataclass(frozen=True)
class Source:
    """A document a tool result showed the model, numbered for citations."""
    n: int
    title: str
    url: str


class Sources:
    """Citation numbers of one conversation: one number per link (or title)."""

    def __init__(self) -> None:
        self.by_key: dict[str, Source] = {}

    def add(self, title: str, url: str) -> int:
        key = url.split("?", 1)[0] or title       # one number per document, however often it is signed
        found = self.by_key.get(key)
        if found is None:
            found = self.by_key[key] = Source(len(self.by_key) + 1, title or url, url)
        return found.n


def _cut(text: str | None, n: int = TEXT_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def format_result(name: str, body: dict[str, Any], sources: Sources) -> tuple[str, list[int]]:
    """A compact text of a tool's structured result for the model, and the citation numbers in it."""
    cited: list[int] = []

    def cite(title: str, url: str) -> str:
        n = sources.add(title, url)
        cited.append(n)
        return f"[{n}]"

    if body.get("status") == "computing":
        return (f"The topics are still being computed (progress {body.get('progress', 0):.0%}); "
                "try the tool again in a moment.", cited)
    lines: list[str] = []
    if name == "rag_search":
        segs = body.get("segments", [])
        lines.append(f"{len(segs)} passages:" if segs else "No passage matched.")
        for s in segs:
            title = s.get("headline") or s.get("source_file_name") or s.get("segment_uid", "")
            lines.append(f"{cite(title, s.get('source_url') or '')} {_cut(title, 90)}: "
                         f"{_cut(s.get('raw_text') or s.get('segment_summary'))}")
    elif name == "rag_topics":
        lines.append(f"{len(body.get('topics', []))} topics over {body.get('documents', 0)} documents "
                     f"({body.get('criterion', '')}):")
        for t in body.get("topics", []):
            span = t.get("date_span") or {}
            examples = "; ".join(_cut(d.get("title"), 60) for d in t.get("representative_documents", [])[:3])
            period = f"{span.get('from') or '?'}..{span.get('to') or '?'}"
            lines.append(f"topic {t['topic_id']} ({t['size']} docs, {period}): "
                         f"{', '.join(x['term'] for x in t.get('terms', [])[:8])} | e.g. {examples}")
    elif name == "rag_topic_evolution":
        lines.append(f"Documents per {body.get('period')} ({body.get('date_field')} date), {body.get('selection')}:")
        for t in body.get("topics", []):
            counts = ", ".join(f"{p}: {c}" for p, c in t.get("counts", {}).items())
            lines.append(f"topic {t['topic_id']} [{t.get('label', '')}] total {t.get('total', 0)}: {counts}")
    elif name == "rag_recent_developments":
        lines.append(f"Newest documents of topic {body.get('topic_id')} [{body.get('label', '')}], "
                     f"{body.get('ranking', '')}:")
        for d in body.get("documents", []):
            dated = d.get("modified") or d.get("created") or "undated"
            lines.append(f"{cite(d.get('title', ''), d.get('uri') or '')} {dated} "
                         f"{_cut(d.get('title'), 90)}: {_cut(d.get('snippet'), 240)}")
    elif name == "rag_topic_map":
        counts: dict[int, int] = {}
        for p in body.get("points", []):
            counts[p["topic_id"]] = counts.get(p["topic_id"], 0) + 1
        lines.append(f"Map of {len(body.get('points', []))} documents ({body.get('projection', '')}); "
                     "points per topic:")
        for t in body.get("topics", []):
            lines.append(f"topic {t['topic_id']} [{t.get('label', '')}]: {counts.get(t['topic_id'], 0)} points")
    elif name == "rag_get_synthesized_results":
        res = body.get("results", {})
        if res.get("error"):
            return f"error: {res['error'].get('code')}: {res['error'].get('message')}", cited
        marks = " ".join(cite(c.get("title", ""), c.get("uri", "")) for c in res.get("citations", []))
        lines.append(f"{_cut(res.get('answer'), 2_000)} Sources: {marks}")
    else:
        lines.append(_cut(json.dumps(body, ensure_ascii=False), RESULT_CHARS))
    text = "\n".join(lines)
    return (text if len(text) <= RESULT_CHARS else text[: RESULT_CHARS - 1] + "…"), cited


class McpToolbox:
    """The allowed MCP tools of one client session, callable by name."""

    def __init__(self, client: Client, allowed: tuple[str, ...] | None = None, *, secrets: tuple[str, ...] = (),
                 sources: tuple[str, ...] = ()) -> None:
        self.client = client
        self.allowed = tuple(allowed) if allowed is not None else DEFAULT_TOOLS
        self.only_sources = tuple(sources)     # a persona's sources: the tools that take `sources` get them
        self.sources = Sources()
        self._schemas: dict[str, dict[str, Any]] = {}
        self._redactor = Redactor(secrets)

    async def specs(self) -> list[dict[str, Any]]:
        """The allowed tools the server offers, as OpenAI function tools."""
        listed = (await self.client.list_tools()).tools
        out = []
        for tool in listed:
            if tool.name not in self.allowed:
                continue
            schema = json.loads(json.dumps(tool.input_schema or {"type": "object", "properties": {}}))
            for hidden in HIDDEN_ARGUMENTS:
                schema.get("properties", {}).pop(hidden, None)
                if hidden in schema.get("required", []):
                    schema["required"].remove(hidden)
            self._schemas[tool.name] = schema
            out.append({"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                                         "parameters": schema}})
        return out

    async def call(self, name: str, arguments: dict[str, Any], *, check: bool = True) -> tuple[str, bool, list[int]]:
        """(compact text for the model, ok, citation numbers) of one tool call; `check`: only
        the allowed tools the server offers (the model's calls)."""
        if check and (name not in self.allowed or (self._schemas and name not in self._schemas)):
            return f"error: tool '{name}' is not available; available tools: {', '.join(self._schemas)}", False, []
        args = {k: v for k, v in arguments.items() if k not in HIDDEN_ARGUMENTS}
        if name in ("rag_get_synthesized_results", "rag_get_raw_results", "rag_discover_resources"):
            args.setdefault("username", "")
        if self.only_sources and name in ("rag_get_synthesized_results", "rag_get_raw_results"):
            args["sources"] = list(self.only_sources)
        try:
            result = await self.client.call_tool(name, args)
        except Exception as err:            # transport or protocol error: the model reads it
            return self._redactor.redact(f"error: {name} failed: {_cut(str(err), 300)}"), False, []
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            return self._redactor.redact(f"error: {_cut(text, 500)}"), False, []
        body = result.structured_content
        if body is None:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            try:
                body = json.loads(text)
            except ValueError:
                return _cut(text, RESULT_CHARS), True, []
        text, cited = format_result(name, body, self.sources)
        return text, True, cited


async def load_persona(client: Client, persona_id: str) -> dict[str, Any]:
    """A persona's settings through the rag_get_persona tool (the caller's tenant)."""
    from shared.errors import NotFound, Unavailable

    result = await client.call_tool("rag_get_persona", {"persona_id": persona_id})
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise NotFound(text.removeprefix("not_found: ")) if text.startswith("not_found") else Unavailable(text)
    return result.structured_content or {}
