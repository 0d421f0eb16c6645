"""The federation's moving parts in one process, and its admin MCP tools.

    runtime = FederationRuntime.create(path, audit=audit)
    runtime.attach(mcp, principal_of)   # proxy tools + rag_sources_status / rag_sources_reload
    runtime.start()                     # watch the sources file, probe the sources
    ...
    await runtime.close()

`rag_sources_status` and `rag_sources_reload` are for admins only (the `admin` role of the
verified caller); anybody else gets PermissionDenied, and sees no source they may not use.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from services.rag_pipeline.federation.probe import DEFAULT_INTERVAL_S, SourceProber
from services.rag_pipeline.federation.proxy import ProxyTools
from services.rag_pipeline.federation.remote import RemotePool
from services.rag_pipeline.federation.sources import SourcesRegistry, is_admin
from shared.audit import AuditLog
from shared.errors import PermissionDenied
from shared.identity import Principal
from shared.mcp_errors import guarded

log = logging.getLogger(__name__)


class SourceStatusOut(BaseModel):
    id: str
    kind: str
    endpoint: str
    enabled: bool
    groups: list[str]
    compliance: str
    reputation: float
    timeout_s: float
    state: str
    contract: str
    tools: list[str]
    last_error: str
    last_probe: float


class SourcesStatusOut(BaseModel):
    path: str
    version: int
    loaded_at: float
    last_error: str
    sources: list[SourceStatusOut]


class SourcesReloadOut(BaseModel):
    ok: bool
    changed: bool
    version: int
    error: str
    sources: int


class FederationRuntime:
    def __init__(self, registry: SourcesRegistry, pool: RemotePool, *, probe_interval_s: float = DEFAULT_INTERVAL_S
                 ) -> None:
        self.registry = registry
        self.pool = pool
        self.proxy: ProxyTools | None = None
        self.prober = SourceProber(registry, pool, interval_s=probe_interval_s, on_tools=self._on_tools)

    @classmethod
    def create(cls, path: Path | None = None, *, audit: AuditLog | None = None,
               probe_interval_s: float = DEFAULT_INTERVAL_S) -> "FederationRuntime":
        registry = SourcesRegistry(path)
        if registry.last_error:
            log.error("sources file: %s (no remote source is used until it is fixed)", registry.last_error)
        return cls(registry, RemotePool(audit=audit), probe_interval_s=probe_interval_s)

    def _on_tools(self, source_id: str, tools: Any) -> None:
        if self.proxy is not None:
            self.proxy.update(source_id, tools)

    def attach(self, mcp: MCPServer, principal_of: Callable[[Any], Principal]) -> None:
        self.proxy = ProxyTools(self.registry, self.pool, principal_of)
        self.proxy.attach(mcp)
        register_sources_tools(mcp, self, principal_of)

    def start(self) -> None:
        self.registry.start_watching()
        self.prober.start()

    async def close(self) -> None:
        await self.prober.stop()
        await self.registry.stop()
        await self.pool.close()

    def status(self) -> SourcesStatusOut:
        config = self.registry.current()
        rows = []
        for s in config.sources:
            st = self.registry.status(s.id)
            rows.append(SourceStatusOut(
                id=s.id, kind=s.kind, endpoint=s.endpoint, enabled=s.enabled, groups=sorted(s.groups),
                compliance=s.compliance, reputation=s.reputation, timeout_s=s.timeout_s, state=st.state,
                contract=st.contract, tools=list(st.tools), last_error=st.last_error, last_probe=st.last_probe))
        return SourcesStatusOut(path=str(self.registry.path), version=config.version, loaded_at=config.loaded_at,
                                last_error=self.registry.last_error, sources=rows)

    async def reload(self) -> SourcesReloadOut:
        result = self.registry.reload()
        if result.ok and result.changed:
            await self.prober.probe_now({sid for sid, st in self.registry.statuses().items() if st.last_probe == 0})
        return SourcesReloadOut(ok=result.ok, changed=result.changed, version=result.version, error=result.error,
                                sources=result.sources)


def request_headers(ctx: Any) -> Any:
    """The HTTP headers of a tool context or a middleware request context (None over stdio)."""
    if ctx is None:
        return None
    try:
        headers = ctx.headers
    except (ValueError, AttributeError):
        headers = None
    if headers is None:
        headers = getattr(getattr(ctx, "request", None), "headers", None)
    return headers


def _admin(principal_of: Callable[[Any], Principal], ctx: Any) -> Principal:
    who = principal_of(ctx)
    if not is_admin(who):
        raise PermissionDenied("managing the federation's sources needs the admin role")
    return who


def register_sources_tools(mcp: MCPServer, runtime: FederationRuntime,
                           principal_of: Callable[[Any], Principal]) -> None:
    @mcp.tool(name="rag_sources_status", description=(
        "Admins only: the remote sources of the federation (sources file), each with its connection "
        "state, RAG contract, tools and last error, plus the last reload error."))
    async def rag_sources_status(ctx: Context) -> SourcesStatusOut:
        async def run() -> SourcesStatusOut:
            _admin(principal_of, ctx)
            return runtime.status()
        return await guarded(run)

    @mcp.tool(name="rag_sources_reload", description=(
        "Admins only: reload the sources file now. A broken file keeps the current configuration "
        "and the error names the file, entry and field."))
    async def rag_sources_reload(ctx: Context) -> SourcesReloadOut:
        async def run() -> SourcesReloadOut:
            _admin(principal_of, ctx)
            return await runtime.reload()
        return await guarded(run)
