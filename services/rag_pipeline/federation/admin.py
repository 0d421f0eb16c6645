"""Writing the sources file: add, edit, remove, enable and disable a source (docs/FEDERATION.md,
"Editing sources").

    editor = SourcesEditor(path, stack_tenants={"acme"}, audit=audit)
    editor.add(principal, {"id": "legal", "url": "https://legal.example.com/mcp", "groups": ["legal"]})
    editor.edit(principal, "legal", {"reputation": 0.7}, clear=["credential_secret"])
    editor.set_enabled(principal, "legal", False)
    editor.remove(principal, "legal")

One editor serves both writers: `nucleus sources add|edit|remove|enable|disable` (the operator,
who may set every field) and the admin MCP tools `rag_sources_add|edit|remove|enable|disable`
(`register_admin_tools`), which a tenant admin may call for its own tenant's sources only:

* it manages only the sources whose tenants are exactly its own tenant (a source naming no
  tenant belongs to a one-tenant stack's tenant); another tenant's source is answered exactly
  as an unknown id, and adding an id another tenant uses is answered exactly as any id taken;
* it may set the fields of `TENANT_ADMIN_FIELDS`: `url` (https, not a loopback / private /
  link-local address), `groups`, `timeout_s`, `reputation`, `enabled`, `name`, `description`,
  `compliance`, `identity` (`username` or `none`), `credential_secret` (a secret name in its
  tenant's own namespace), `credential_header`, and `tenants` only as its own tenant; every
  field of `OPERATOR_FIELDS`, `identity: headers`, another tenant, and moving the `url` of a
  source that carries an operator's credential or trust are PermissionDenied naming the field.

Every change is made under a lock (a `flock` on `<sources file>.lock`, so the CLI and the
service never interleave) that re-reads the file, applies the change, checks the whole file
(the same `parse_source` rules as a reload, and the tenant rule of the stack) and writes it
atomically: two concurrent writers keep each other's changes, and a refused change writes
nothing. Each attempt leaves one audit line (`"event": "sources"`): who, which tool, which
source, the field names changed — never a value — and allow / deny with the reason.
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from services.rag_pipeline.federation.sources import (
    FIELDS,
    OPERATOR_FIELDS,
    Source,
    SourcesFileError,
    check_tenants,
    is_admin,
    is_operator,
    load_sources,
    parse_source,
    write_sources,
)
from shared.audit import AuditEvent, AuditLog
from shared.errors import AlreadyExists, InvalidArgument, NotFound, NucleusError, PermissionDenied
from shared.identity import Principal
from shared.mcp_annotations import ADD, DELETE, OVERWRITE
from shared.mcp_errors import guarded

#: What a tenant admin may set on its tenant's sources (every other field is the operator's).
TENANT_ADMIN_FIELDS = tuple(f for f in FIELDS if f not in OPERATOR_FIELDS)
#: How a tenant admin's source may receive the user (platform headers need the operator's trust).
TENANT_ADMIN_IDENTITIES = ("username", "none")
#: The fields an edit replaces together: giving one drops the others of its group.
EXCLUSIVE = (("url", "command"), ("credential_env", "credential_file", "credential_secret"))
#: An operator's credential or trust on a source: a tenant admin may not move its `url` elsewhere.
OPERATOR_HELD = ("command", "credential_env", "credential_file", "header_env", "trusted", "allow_private_network")
MAX_SOURCE_JSON_FIELDS = 64

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def lock_path(sources_path: Path) -> Path:
    return sources_path.with_name(sources_path.name + ".lock")


@contextlib.contextmanager
def locked(sources_path: Path) -> Iterator[None]:
    """Exclusive access to the sources file for one read-modify-write, across threads and
    processes (the CLI and the running service)."""
    with _thread_locks_guard:
        thread_lock = _thread_locks.setdefault(str(sources_path), threading.Lock())
    with thread_lock:
        target = lock_path(sources_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def operator_principal(user: str = "") -> Principal:
    """The `nucleus` CLI writing the file directly: the operator (every tenant, every field)."""
    from shared.identity import OPERATOR

    return Principal(tenant_id="", user_id=user or os.environ.get("USER", "") or "operator", roles=(OPERATOR,),
                     auth_method="cli")


def _private_host(host: str) -> bool:
    """A host a tenant admin may not point a source at: localhost, or an address literal that
    is loopback, private, link-local, reserved or unspecified. (A name is resolved and checked at
    each connection by the remote client; this refuses the obvious internal targets up front.)"""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(name)
    except ValueError:
        try:                            # the legacy forms a resolver also accepts: 127.1, 2130706433, 0x7f.1
            address = ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return False
    return not address.is_global


def _masked(source: Source, operator: bool) -> dict[str, Any]:
    """The entry as its writer may read it back: a tenant admin sees that an operator-only field
    is set, not its value (variable names, file paths, commands)."""
    entry = source.to_json()
    if operator:
        return entry
    return {k: ("(set by the operator)" if k in OPERATOR_FIELDS else v) for k, v in entry.items()}


class SourcesEditor:
    """Validated, locked, atomic, audited changes to one sources file (module docstring)."""

    def __init__(self, path: Path | str, *, stack_tenants: Iterable[str] | None = None,
                 audit: AuditLog | None = None) -> None:
        self.path = Path(path)
        #: The tenants the stack serves (None: not known — the tenant rule is then the running
        #: service's to check at reload). A one-tenant stack lets a source omit `tenants`.
        self.stack_tenants = frozenset(stack_tenants) if stack_tenants is not None else None
        self.audit = audit

    # -- the four changes
    def add(self, principal: Principal | None, raw: Mapping[str, Any], *, tool: str = "sources add") -> Source:
        def change(sources: list[Source]) -> tuple[list[Source], Source]:
            entry = self._entry(raw)
            sid = entry.get("id")
            if not self._operator(principal):
                self._check_tenant_admin(principal, entry, keys=list(entry), existing=None)
                entry["tenants"] = [principal.tenant_id]
            if isinstance(sid, str) and any(s.id == sid for s in sources):
                raise AlreadyExists(f"a source with id {sid!r} already exists; choose another id")
            source = self._parse(entry, len(sources))
            return [*sources, source], source

        return self._write(principal, tool, str(raw.get("id", "")) if isinstance(raw, Mapping) else "",
                           change, fields=list(raw) if isinstance(raw, Mapping) else [])

    def edit(self, principal: Principal | None, source_id: str, changes: Mapping[str, Any],
             clear: Sequence[str] = (), *, tool: str = "sources edit") -> Source:
        def change(sources: list[Source]) -> tuple[list[Source], Source]:
            updates = self._entry(changes, what="changes")
            cleared = [str(c) for c in clear]
            if not updates and not cleared:
                raise InvalidArgument("changes", "give at least one field to change (or to clear)")
            if "id" in updates and updates["id"] != source_id or "id" in cleared:
                raise InvalidArgument("id", "a source's id cannot be changed (it is its tool prefix); remove "
                                      "the source and add it under the new id")
            for name in cleared:
                if name not in FIELDS:
                    raise InvalidArgument("clear", f"unknown field {name!r}; accepted: {', '.join(FIELDS)}")
            index, old = self._managed(principal, sources, source_id)
            if not self._operator(principal):
                self._check_tenant_admin(principal, updates, keys=[*updates, *cleared], existing=old)
            entry = old.to_json()
            for group in EXCLUSIVE:
                if any(k in updates for k in group):
                    for k in group:
                        if k not in updates:
                            entry.pop(k, None)
            entry.update(updates)
            for name in cleared:
                entry.pop(name, None)
            source = self._parse(entry, index)
            return [*sources[:index], source, *sources[index + 1:]], source

        return self._write(principal, tool, source_id, change,
                           fields=[*(changes if isinstance(changes, Mapping) else []), *clear])

    def set_enabled(self, principal: Principal | None, source_id: str, enabled: bool, *, tool: str = "") -> Source:
        return self.edit(principal, source_id, {"enabled": enabled},
                         tool=tool or f"sources {'enable' if enabled else 'disable'}")

    def remove(self, principal: Principal | None, source_id: str, *, tool: str = "sources remove") -> Source:
        def change(sources: list[Source]) -> tuple[list[Source], Source]:
            index, old = self._managed(principal, sources, source_id)
            return [*sources[:index], *sources[index + 1:]], old

        return self._write(principal, tool, source_id, change, fields=[])

    def readable(self, principal: Principal | None, source: Source) -> dict[str, Any]:
        """`source` as the writer may read it back (operator-only values masked for a tenant admin)."""
        return _masked(source, self._operator(principal))

    # -- rules
    @staticmethod
    def _operator(principal: Principal | None) -> bool:
        return principal is None or is_operator(principal)

    def _tenants_of(self, source: Source) -> frozenset[str]:
        stack = self.stack_tenants or frozenset()
        return source.tenants or (stack if len(stack) == 1 else frozenset())

    def _managed(self, principal: Principal | None, sources: list[Source], source_id: str) -> tuple[int, Source]:
        """(index, source) of `source_id` if the caller manages it; another tenant's source is
        answered exactly as an unknown id."""
        operator = self._operator(principal)
        for i, s in enumerate(sources):
            if s.id != source_id:
                continue
            if operator:
                return i, s
            tenants = self._tenants_of(s)
            if tenants == {principal.tenant_id}:
                return i, s
            if principal.tenant_id in tenants:
                raise PermissionDenied(f"source {source_id!r} is shared with other tenants: only the operator "
                                       "changes it")
            break
        known = ""
        if operator:
            known = "; known: " + (", ".join(s.id for s in sources) or "none")
        raise NotFound(f"no source {source_id!r}" + (known if operator else " among your tenant's sources"))

    def _check_tenant_admin(self, principal: Principal, entry: Mapping[str, Any], *, keys: list[str],
                            existing: Source | None) -> None:
        """A tenant admin's change: operator-only fields, identity, tenants and url refused."""
        tenant = principal.tenant_id
        if not tenant:
            raise PermissionDenied("a tenant admin without a tenant cannot manage sources")
        for key in keys:
            if key in OPERATOR_FIELDS:
                raise PermissionDenied(f"field '{key}' is operator-only: a tenant admin may set "
                                       f"{', '.join(f for f in TENANT_ADMIN_FIELDS if f != 'id')}")
        if "tenants" in keys:
            value = entry.get("tenants")
            if value is not None and value != [tenant]:
                raise PermissionDenied(f"field 'tenants' is operator-only beyond your own tenant: a tenant "
                                       f"admin's sources belong to its tenant only (give [{tenant!r}] or omit it)")
        if "identity" in entry and entry["identity"] not in TENANT_ADMIN_IDENTITIES:
            if entry["identity"] == "headers":
                raise PermissionDenied("field 'identity': 'headers' (platform identity headers x-user-id / "
                                       "x-session-tags) is operator-only: it needs a source the operator trusts")
        if "url" in keys and "url" in entry:
            url = entry["url"]
            if isinstance(url, str):
                parts = urlsplit(url)
                if parts.scheme.lower() != "https":
                    raise InvalidArgument("url", "a tenant admin's source must be an https:// URL (plain http "
                                          "and stdio commands are operator-only)")
                try:
                    host = parts.hostname or ""
                except ValueError:
                    host = ""
                if host and _private_host(host):
                    raise PermissionDenied("field 'url': a loopback, private or link-local address is "
                                           "operator-only; a tenant admin's source must be a public host")
            if existing is not None:
                held = [f for f in OPERATOR_HELD if getattr(existing, f)]
                if held:
                    raise PermissionDenied(f"field 'url': this source carries settings the operator made "
                                           f"({', '.join(held)}); only the operator changes where it points")

    # -- the locked read-modify-write
    def _entry(self, raw: Any, what: str = "source") -> dict[str, Any]:
        if not isinstance(raw, Mapping):
            raise InvalidArgument(what, "must be an object of sources-file fields, e.g. {\"id\": \"legal\", "
                                  "\"url\": \"https://…\"}")
        if len(raw) > MAX_SOURCE_JSON_FIELDS:
            raise InvalidArgument(what, f"at most {MAX_SOURCE_JSON_FIELDS} fields")
        return {str(k): v for k, v in raw.items()}

    def _parse(self, entry: dict[str, Any], index: int) -> Source:
        try:
            return parse_source(entry, file=self.path, index=index, base_dir=str(self.path.parent))
        except SourcesFileError as err:
            sid = entry.get("id")
            where = f" (source {sid!r})" if isinstance(sid, str) and sid else ""
            raise InvalidArgument(err.field_name or "source", err.reason + where) from None

    def _load(self, principal: Principal | None) -> list[Source]:
        try:
            return list(load_sources(self.path))
        except SourcesFileError as err:
            detail = str(err) if self._operator(principal) or len(self.stack_tenants or ()) == 1 else (
                "the operator sees the details with `nucleus sources list`")
            raise InvalidArgument("sources file", "has an error, so no change is written until it is fixed: "
                                  + detail) from None

    def _write(self, principal: Principal | None, tool: str, source_id: str,
               change: Callable[[list[Source]], tuple[list[Source], Source]], *, fields: Sequence[str]) -> Source:
        names = sorted({str(f) for f in fields})[:32]
        try:
            if principal is not None and not is_admin(principal):
                raise PermissionDenied("managing the federation's sources needs the admin role")
            with locked(self.path):
                sources, source = change(self._load(principal))
                if self.stack_tenants is not None:
                    try:
                        check_tenants(sources, self.stack_tenants, self.path)
                    except SourcesFileError as err:
                        if not self._operator(principal):      # never another tenant's entry (a tenant
                            raise InvalidArgument(              # admin's own always names its tenant)
                                "sources file", "an entry breaks the stack's tenant rule, so no change is "
                                "written until it is fixed; the operator sees the details with "
                                "`nucleus sources list`") from None
                        raise InvalidArgument(err.field_name, err.reason + f" ({err.entry})") from None
                try:
                    write_sources(self.path, sources)
                except SourcesFileError as err:
                    raise InvalidArgument(err.field_name or "source", err.reason) from None
        except NucleusError as err:
            self._audit(principal, tool, source_id, "deny", f"{err.kind}: {err.message}", names)
            raise
        self._audit(principal, tool, source_id, "allow", "", names)
        return source

    def _audit(self, principal: Principal | None, tool: str, source_id: str, decision: str, reason: str,
               fields: list[str]) -> None:
        if self.audit is None:
            return
        notes = [f"fields={','.join(fields)}"] if fields else []
        self.audit.record(AuditEvent.for_principal(principal, event="sources", decision=decision, tool=tool,
                                                   reason=reason, resources=[source_id] if source_id else [],
                                                   notes=notes))


# ---------------------------------------------------------------------------- admin MCP tools
class SourceChangeOut(BaseModel):
    action: str = Field(description="added, edited, enabled, disabled or removed")
    id: str
    source: dict[str, Any] | None = Field(default=None, description="the entry as written (None once removed); "
                                          "operator-only values are shown as '(set by the operator)'")
    version: int = Field(description="the configuration version serving after the reload")
    reloaded: bool = Field(description="the running configuration now includes the change")
    error: str = ""


def runtime_editor(runtime: Any) -> SourcesEditor:
    """The editor of a running federation's sources file (the admin MCP tools' and the console's)."""
    registry = runtime.registry
    return SourcesEditor(registry.path, stack_tenants=registry.stack_tenants,
                         audit=getattr(runtime.pool, "audit", None))


def register_admin_tools(mcp: Any, runtime: Any, principal_of: Callable[[Any], Principal]) -> None:
    """`rag_sources_add|edit|remove|enable|disable` on RAGPipeline's MCP server (admins only)."""
    def editor() -> SourcesEditor:
        return runtime_editor(runtime)

    async def apply(ctx: Any, action: str, work: Callable[[SourcesEditor, Principal], Source]) -> SourceChangeOut:
        who = principal_of(ctx)
        ed = editor()                   # refuses (and audits) a caller without the admin role
        source = await asyncio.to_thread(work, ed, who)
        reloaded = await runtime.reload(who)
        current = runtime.registry.current().get(source.id)
        return SourceChangeOut(action=action, id=source.id,
                               source=None if action == "removed" else ed.readable(who, current or source),
                               version=reloaded.version,
                               reloaded=reloaded.ok and ((current is None) == (action == "removed")),
                               error=reloaded.error)

    @mcp.tool(annotations=ADD, name="rag_sources_add", description=(
        "Admins only: add a remote source to the sources file (fields as in the file: id, url, kind, groups, "
        "timeout_s, reputation, enabled, name, description, compliance, identity, credential_secret). A tenant "
        "admin adds sources of its own tenant only, https URLs only; operator-only fields are refused."))
    async def rag_sources_add(source: dict[str, Any], ctx: Context) -> SourceChangeOut:
        return await guarded(lambda: apply(ctx, "added", lambda ed, who: ed.add(who, source, tool="rag_sources_add")))

    @mcp.tool(annotations=OVERWRITE, name="rag_sources_edit", description=(
        "Admins only: change the given fields of a source (others stay); `clear` resets fields to their "
        "default. A tenant admin edits its own tenant's sources only; operator-only fields are refused."))
    async def rag_sources_edit(id: str, ctx: Context, changes: dict[str, Any] | None = None,
                               clear: list[str] | None = None) -> SourceChangeOut:
        return await guarded(lambda: apply(ctx, "edited", lambda ed, who: ed.edit(
            who, id, changes or {}, clear or (), tool="rag_sources_edit")))

    @mcp.tool(name="rag_sources_remove", annotations=DELETE,
              description="Admins only: remove a source of your tenant from the "
              "sources file.")
    async def rag_sources_remove(id: str, ctx: Context) -> SourceChangeOut:
        return await guarded(lambda: apply(ctx, "removed", lambda ed, who: ed.remove(who, id,
                                                                                     tool="rag_sources_remove")))

    @mcp.tool(name="rag_sources_enable", annotations=OVERWRITE,
              description="Admins only: enable a source of your tenant.")
    async def rag_sources_enable(id: str, ctx: Context) -> SourceChangeOut:
        return await guarded(lambda: apply(ctx, "enabled", lambda ed, who: ed.set_enabled(
            who, id, True, tool="rag_sources_enable")))

    @mcp.tool(name="rag_sources_disable", annotations=OVERWRITE,
              description="Admins only: disable a source of your tenant (kept in "
              "the file, used by nobody).")
    async def rag_sources_disable(id: str, ctx: Context) -> SourceChangeOut:
        return await guarded(lambda: apply(ctx, "disabled", lambda ed, who: ed.set_enabled(
            who, id, False, tool="rag_sources_disable")))
