"""The federation's moving parts in one process, and its admin MCP tools.

    runtime = FederationRuntime.create(path, audit=audit)
    runtime.attach(mcp, principal_of)   # proxy tools + rag_sources_status / rag_sources_reload
    runtime.start()                     # watch the sources file, probe the sources
    ...
    await runtime.close()

`rag_sources_status` and `rag_sources_reload` are for admins only (the `admin` role of the
verified caller), and an admin is an admin of its own tenant: it sees the sources that name its
tenant, never another tenant's (nor another tenant's entry in a reload error). Anybody else gets
PermissionDenied, and sees no source they may not use.

The stack's id (`NUCLEUS_STACK_ID`, else one made once and kept in `<data dir>/stack_id`) goes on
the federation path of every outgoing query (identity.py), so a query that comes back to this
stack is answered from its own store only.
"""
from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from services.rag_pipeline.federation.admin import register_admin_tools
from services.rag_pipeline.federation.probe import DEFAULT_INTERVAL_S, SourceProber
from services.rag_pipeline.federation.proxy import ProxyTools
from services.rag_pipeline.federation.remote import RemotePool
from services.rag_pipeline.federation.assertion import StackSigner
from services.rag_pipeline.federation.identity import STACK_ID
from services.rag_pipeline.federation.sources import SourcesRegistry, is_admin, is_operator
from shared.audit import AuditLog
from shared.errors import PermissionDenied
from shared.identity import Principal
from shared.mcp_annotations import READ, REFRESH
from shared.mcp_errors import guarded
from shared.settings import StackSettings

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


def stack_id_for(data_dir: Path) -> str:
    """`NUCLEUS_STACK_ID`, else the id kept in `<data dir>/stack_id` (made once, at random)."""
    configured = StackSettings().stack_id.strip()
    if configured:
        if not STACK_ID.match(configured):
            raise SystemExit("NUCLEUS_STACK_ID: 1-64 characters, letters, digits, '_', '.', ':', '-'")
        return configured
    path = data_dir / "stack_id"
    try:
        found = path.read_text(encoding="utf-8").strip()
        if STACK_ID.match(found):
            return found
    except OSError:
        pass
    made = "stack-" + secrets.token_hex(6)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(made + "\n", encoding="utf-8")
    except OSError as err:
        log.warning("stack id not kept in %s (%s): this run uses %s", path, err, made)
    return made


class FederationRuntime:
    def __init__(self, registry: SourcesRegistry, pool: RemotePool, *, probe_interval_s: float = DEFAULT_INTERVAL_S,
                 stack_id: str = "", signer: Any = None) -> None:
        self.registry = registry
        self.pool = pool
        self.stack_id = stack_id
        self.signer = signer                # assertions to peer Nucleus stacks (assertion.py)
        self.proxy: ProxyTools | None = None
        self.prober = SourceProber(registry, pool, interval_s=probe_interval_s, on_tools=self._on_tools)

    @classmethod
    def create(cls, path: Path | None = None, *, audit: AuditLog | None = None,
               probe_interval_s: float = DEFAULT_INTERVAL_S, stack_tenants: Iterable[str] = ()
               ) -> "FederationRuntime":
        registry = SourcesRegistry(path, stack_tenants=stack_tenants)
        if registry.last_error:
            log.error("sources file: %s (no remote source is used until it is fixed)", registry.last_error)
        stack_id = stack_id_for(registry.path.parent)
        return cls(registry, RemotePool(audit=audit), probe_interval_s=probe_interval_s, stack_id=stack_id,
                   signer=StackSigner.load_or_create(registry.path.parent, stack_id))

    def _on_tools(self, source_id: str, tools: Any) -> None:
        if self.proxy is not None:
            self.proxy.update(source_id, tools)

    def attach(self, mcp: MCPServer, principal_of: Callable[[Any], Principal]) -> None:
        self.proxy = ProxyTools(self.registry, self.pool, principal_of, stack_id=self.stack_id, signer=self.signer)
        self.proxy.attach(mcp)
        register_sources_tools(mcp, self, principal_of)

    def start(self) -> None:
        self.registry.start_watching()
        self.prober.start()

    async def close(self) -> None:
        await self.prober.stop()
        await self.registry.stop()
        await self.pool.close()

    def status(self, principal: Any = None) -> SourcesStatusOut:
        """Every source (the operator, or `principal` None), else the sources of the caller's tenant."""
        config = self.registry.current()
        rows = []
        mine = config.sources if principal is None else config.of_tenant(principal)
        for s in mine:
            st = self.registry.status(s.id)
            rows.append(SourceStatusOut(
                id=s.id, kind=s.kind, endpoint=s.endpoint, enabled=s.enabled, groups=sorted(s.groups),
                compliance=s.compliance, reputation=s.reputation, timeout_s=s.timeout_s, state=st.state,
                contract=st.contract, tools=list(st.tools), last_error=st.last_error, last_probe=st.last_probe))
        return SourcesStatusOut(path=str(self.registry.path), version=config.version, loaded_at=config.loaded_at,
                                last_error=self._error_for(principal, self.registry.last_error), sources=rows)

    async def reload(self, principal: Any = None) -> SourcesReloadOut:
        result = self.registry.reload()
        if result.ok and result.changed:
            await self.prober.probe_now({sid for sid, st in self.registry.statuses().items() if st.last_probe == 0})
        count = result.sources if principal is None else len(self.registry.current().of_tenant(principal))
        return SourcesReloadOut(ok=result.ok, changed=result.changed, version=result.version,
                                error=self._error_for(principal, result.error), sources=count)

    def _error_for(self, principal: Any, error: str) -> str:
        """A reload error as a tenant admin may read it: on a stack of several tenants the file's
        problem may be another tenant's entry, so only the operator (or the CLI, reading the file)
        sees its details; the admin of a one-tenant stack sees them all."""
        stack = self.registry.stack_tenants
        if (not error or principal is None or is_operator(principal)
                or (len(stack) == 1 and principal.tenant_id in stack)):
            return error
        return "the sources file has an error; the stack keeps its last good configuration (the operator " \
               "sees the details with `nucleus sources list`)"


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
    @mcp.tool(annotations=READ, name="rag_sources_status", description=(
        "Admins only: the remote sources of the federation (sources file), each with its connection "
        "state, RAG contract, tools and last error, plus the last reload error."))
    async def rag_sources_status(ctx: Context) -> SourcesStatusOut:
        async def run() -> SourcesStatusOut:
            return runtime.status(_admin(principal_of, ctx))
        return await guarded(run)

    @mcp.tool(annotations=REFRESH, name="rag_sources_reload", description=(
        "Admins only: reload the sources file now. A broken file keeps the current configuration "
        "and the error names the file, entry and field."))
    async def rag_sources_reload(ctx: Context) -> SourcesReloadOut:
        async def run() -> SourcesReloadOut:
            return await runtime.reload(_admin(principal_of, ctx))
        return await guarded(run)

    register_admin_tools(mcp, runtime, principal_of)    # rag_sources_add|edit|remove|enable|disable (admin.py)
