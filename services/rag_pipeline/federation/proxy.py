"""The remote sources' tools on RAGPipeline's MCP server, as `<source id>__<tool>`.

Every tool the probe found on a source is listed with the remote's own input schema to the
callers who may see that source (sources.py `visible_to`): a caller outside the source's
groups neither lists nor calls its tools (a call is answered exactly as for an unknown tool,
so nothing about the source leaks). A call goes out with the SOURCE's credential (remote.py),
never the caller's token, and on behalf of the verified caller:

  * a `username` argument (when the remote tool takes one, or the caller sent one) is
    overwritten with the verified user id;
  * the sensitive parameters (`user_token`, `api_key`, `bearer`, `oauth_token`,
    `capability_token`, at any depth) are passed to the remote, and their values are removed
    from everything that comes back (result, errors) and never logged, traced or audited;
  * one audit line per call (remote.py): user, source, tool, status, latency.

The listing follows the sources file and the probes: after a change every connected client is
sent `notifications/tools/list_changed` (and, on 2026-07-28 connections, the ToolsListChanged
event of the server's subscription bus).
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer

from services.rag_pipeline.federation.hits import Caller
from services.rag_pipeline.federation.identity import INCOMING_PATH, loop_reason, outgoing, path_from_meta
from services.rag_pipeline.federation.remote import RemoteError, RemotePool, ToolInfo
from services.rag_pipeline.federation.sources import Source, SourcesConfig, SourcesRegistry
from shared.identity import Principal, acting_for
from shared.redaction import REDACTED, Redactor

log = logging.getLogger(__name__)

SEPARATOR = "__"
SENSITIVE_PARAMS = frozenset({"user_token", "api_key", "bearer", "oauth_token", "capability_token"})
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MAX_TOOLS_PER_SOURCE = 200


def proxy_name(source_id: str, tool: str) -> str:
    return f"{source_id}{SEPARATOR}{tool}"


def split_proxy_name(name: str) -> tuple[str, str] | None:
    if SEPARATOR not in name:
        return None
    sid, tool = name.split(SEPARATOR, 1)
    return (sid, tool) if sid and tool else None


def sensitive_values(value: Any) -> list[str]:
    """Every string under a sensitive key, at any depth."""
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            if str(k).lower() in SENSITIVE_PARAMS:
                if isinstance(v, str):
                    out.append(v)
                else:
                    out.extend(s for s in _strings(v))
            else:
                out.extend(sensitive_values(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(sensitive_values(v))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def scrubbed(value: Any) -> Any:
    """A copy with every sensitive parameter's value replaced by [REDACTED] (for display)."""
    if isinstance(value, Mapping):
        return {k: (REDACTED if str(k).lower() in SENSITIVE_PARAMS else scrubbed(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    return value


def _redact_deep(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.redact(value)
    if isinstance(value, Mapping):
        return {k: _redact_deep(v, redactor) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_deep(v, redactor) for v in value]
    return value


class ProxyTools:
    """Lists and calls the remote sources' tools for the verified caller (see the module docstring)."""

    def __init__(self, registry: SourcesRegistry, pool: RemotePool,
                 principal_of: Callable[[Any], Principal], *, stack_id: str = "", signer: Any = None) -> None:
        self.registry = registry
        self.stack_id = stack_id
        self.signer = signer
        self.pool = pool
        self.principal_of = principal_of
        self._tools: dict[str, dict[str, ToolInfo]] = {}
        self._connections: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._mcp: MCPServer | None = None
        self._pending: set[asyncio.Task] = set()
        self.notifications_sent = 0
        registry.subscribe(self._config_changed)

    # -- what is listed
    def update(self, source_id: str, tools: list[ToolInfo] | None) -> bool:
        """The probe's latest tool list of a source (None: unreachable, nothing to list)."""
        new = {t.name: t for t in (tools or [])[:MAX_TOOLS_PER_SOURCE]
               if TOOL_NAME.match(proxy_name(source_id, t.name))}
        if self.registry.current().get(source_id) is None:
            new = {}
        old = self._tools.get(source_id, {})
        if new == old:
            return False
        if new:
            self._tools[source_id] = new
        else:
            self._tools.pop(source_id, None)
        self._schedule_notify()
        return True

    def _config_changed(self, config: SourcesConfig) -> None:
        for sid in [s for s in self._tools if config.get(s) is None]:
            self._tools.pop(sid)
        self._schedule_notify()             # visibility (groups, enabled) may have changed too

    def tools_for(self, principal: Principal | None) -> list[Any]:
        """The proxy tools `principal` may see, as MCP tool definitions."""
        from mcp_types import Tool

        from shared.mcp_annotations import PROXIED

        out = []
        for source in self.registry.current().visible_to(principal):
            for tool in self._tools.get(source.id, {}).values():
                schema = tool.input_schema if tool.input_schema.get("type") == "object" else {
                    "type": "object", "properties": {}}
                out.append(Tool(name=proxy_name(source.id, tool.name), title=tool.title or None,
                                description=f"[{source.id}] {tool.description}".strip(), input_schema=schema,
                                annotations=PROXIED))
        return out

    def resolve(self, principal: Principal | None, name: str) -> tuple[Source, ToolInfo] | None:
        parts = split_proxy_name(name)
        if parts is None:
            return None
        source = self.registry.current().visible(principal, parts[0])
        if source is None:
            return None
        tool = self._tools.get(source.id, {}).get(parts[1])
        return (source, tool) if tool is not None else None

    # -- calls
    async def call(self, principal: Principal, source: Source, tool: ToolInfo, arguments: Mapping[str, Any]) -> Any:
        from mcp_types import CallToolResult, TextContent

        args = dict(arguments)
        caller = Caller(principal.tenant_id, principal.user_id, principal.groups, principal.session_tags)
        send = outgoing(source, caller, self.registry.current().tenants_of(source), path=INCOMING_PATH.get(),
                        stack_id=self.stack_id, signer=self.signer)
        if tool.takes("username") or "username" in args:
            args["username"] = send.username           # the verified user, whatever was sent
        redactor = Redactor(sensitive_values(args))
        with acting_for(principal):
            try:
                result = await self.pool.get(source).call_tool(tool.name, args, deadline_s=source.timeout_s,
                                                                headers=send.headers, meta=send.meta)
            except RemoteError as err:
                text = redactor.redact(f"source {source.id}: {err.kind}: {err.message}")
                return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        data = _redact_deep(result.data, redactor)
        if isinstance(data, Mapping):
            text = json.dumps(data, ensure_ascii=False)
            return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(data))
        text = redactor.redact(result.text) if result.text else json.dumps(data, ensure_ascii=False)
        return CallToolResult(content=[TextContent(type="text", text=text)])

    # -- MCP wiring
    def attach(self, mcp: MCPServer) -> None:
        """Serve the proxy tools on `mcp` (a middleware on tools/list and tools/call)."""
        self._mcp = mcp
        mcp.middleware.append(self._middleware)

    async def _middleware(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        method = getattr(ctx, "method", None)
        if method not in ("tools/list", "tools/call"):
            return await call_next(ctx)
        self._remember(ctx)
        if method == "tools/call":
            params = ctx.params or {}
            name = params.get("name")
            if isinstance(name, str) and SEPARATOR in name:
                try:
                    principal = self.principal_of(ctx)
                except Exception:
                    principal = None
                found = self.resolve(principal, name) if principal is not None else None
                if found is not None:
                    arguments = params.get("arguments") or {}
                    if not isinstance(arguments, Mapping):
                        arguments = {}
                    path = path_from_meta(params.get("_meta"))
                    loop = loop_reason(path, self.stack_id)
                    if loop:
                        from mcp_types import CallToolResult, TextContent

                        return CallToolResult(content=[TextContent(type="text", text=loop)], is_error=True)
                    token = INCOMING_PATH.set(path)
                    try:
                        return await self.call(principal, found[0], found[1], arguments)
                    finally:
                        INCOMING_PATH.reset(token)
            return await call_next(ctx)     # ours, or unknown/invisible: answered as any unknown tool
        result = await call_next(ctx)
        try:
            principal = self.principal_of(ctx)
        except Exception:
            return result
        extra = self.tools_for(principal)
        if not extra:
            return result
        if isinstance(result, Mapping):
            tools = list(result.get("tools", [])) + [t.model_dump(by_alias=True, exclude_none=True) for t in extra]
            return {**result, "tools": tools}
        try:
            return result.model_copy(update={"tools": list(result.tools) + extra})
        except AttributeError:
            return result

    def _remember(self, ctx: Any) -> None:
        conn = getattr(getattr(ctx, "session", None), "_connection", None)
        if conn is not None:
            try:
                self._connections.add(conn)
            except TypeError:
                pass

    def _schedule_notify(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self.notify_changed())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def notify_changed(self) -> None:
        """notifications/tools/list_changed to every connected client."""
        self.notifications_sent += 1
        for conn in list(self._connections):
            try:
                await asyncio.wait_for(conn.send_tool_list_changed(), 2.0)
            except Exception as err:          # a closed session: forget it
                log.debug("tools/list_changed not delivered: %s", err)
                self._connections.discard(conn)
        bus = getattr(self._mcp, "_subscriptions", None) if self._mcp is not None else None
        if bus is not None:
            try:
                from mcp.shared.subscriptions import ToolsListChanged

                await bus.publish(ToolsListChanged())
            except Exception as err:
                log.debug("ToolsListChanged not published: %s", err)
