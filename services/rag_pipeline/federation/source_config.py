"""A remote source and who may use it: the `Source` record (one entry of the sources file,
sources.py), the file's limits and accepted values, and `SourcesConfig`, one immutable
configuration with the visibility and tenant rules (`visible_to`, `of_tenant`, `is_admin`,
`is_operator`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from shared.identity import ADMIN, OPERATOR, Principal
from shared.settings import StackSettings

SOURCE_ID = re.compile(r"^[a-z0-9_]{1,32}$")
SOURCE_ID_RULE = "1-32 characters: lower-case letters, digits and '_'"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
GROUP = re.compile(r"^[A-Za-z0-9_.:@/-]{1,128}$")
KINDS = ("rag", "tools")
SourceKind = Literal["rag", "tools"]
SourceState = Literal["connected", "action_required", "locked", "error", "unknown"]
STATES: tuple[str, ...] = ("connected", "action_required", "locked", "error", "unknown")

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 120.0
DEFAULT_REPUTATION = 0.5
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
MAX_RESPONSE_BYTES_LIMIT = 64 * 1024 * 1024
MAX_SOURCES = 256
MAX_FILE_BYTES = 4 * 1024 * 1024
DEFAULT_COMPLIANCE = "unspecified"

#: Fields that would hold a secret inline: refused, with the accepted alternative.
INLINE_SECRET_FIELDS = ("credential", "token", "api_key", "apikey", "secret", "password", "bearer",
                        "authorization", "headers")
FIELDS = ("id", "kind", "url", "command", "credential_env", "credential_file", "groups", "compliance",
          "timeout_s", "reputation", "enabled", "allow_private_network", "max_response_bytes", "name",
          "description", "origin", "tenants", "identity", "trusted", "credential_header", "header_env",
          "credential_secret", "audience")
#: How the verified user travels to a source (docs/FEDERATION.md, "Identity to remotes"):
#:   username  seed-000 `username` argument, overwritten with the verified user (default)
#:   headers   seed-002 platform headers `x-user-id` / `x-session-tags` (trusted sources only)
#:   assertion a remote Nucleus: a signed on-behalf-of assertion whose audience is that stack
#:   none      the source is asked with its own credential only (a shared, caller-independent corpus)
IDENTITY_MODES = ("username", "headers", "assertion", "none")
#: Fields only the stack's operator may set (a tenant admin edits the others of its tenant's sources).
OPERATOR_FIELDS = ("command", "credential_env", "credential_file", "allow_private_network", "trusted",
                   "header_env", "max_response_bytes", "origin")
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
SECRET_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: Headers a source may never be given from `header_env` (identity and transport headers are ours).
RESERVED_HEADERS = frozenset({"host", "content-length", "content-type", "x-user-id", "x-session-tags",
                              "mcp-session-id", "mcp-protocol-version", "accept", "traceparent",
                              "x-nucleus-assertion"})


def default_sources_path() -> Path:
    """`NUCLEUS_SOURCES_FILE`, else `<data dir>/sources.json`."""
    stack = StackSettings()
    return stack.sources_file.expanduser().resolve() if stack.sources_file else stack.data_dir / "sources.json"


def status_path(sources_path: Path) -> Path:
    """Where the running service publishes the sources' status (read by the CLI)."""
    return sources_path.with_name(sources_path.name + ".status.json")


def reload_request_path(sources_path: Path) -> Path:
    """Touched by `nucleus sources reload`: the running service reloads on its next poll."""
    return sources_path.with_name(sources_path.name + ".reload")


class SourcesFileError(ValueError):
    """A sources file that cannot be used: names the file, the entry and the field."""

    def __init__(self, file: Path | str, message: str, *, entry: str = "", field_name: str = "") -> None:
        self.file, self.entry, self.field_name, self.reason = str(file), entry, field_name, message
        where = str(file) + (f": {entry}" if entry else "") + (f": field '{field_name}'" if field_name else "")
        super().__init__(f"{where}: {message}")


def read_credential(env: str | None, file: str | None, base_dir: str = "") -> str | None:
    """A token read now from environment variable `env`, else from `file` (relative to
    `base_dir`); None when neither is set, or the value is missing or empty. Sources and
    registries read their credentials this one way."""
    if env:
        return os.environ.get(env, "").strip() or None
    if file:
        path = Path(file).expanduser()
        if not path.is_absolute() and base_dir:
            path = Path(base_dir) / path
        try:
            return path.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
    return None


@dataclass(frozen=True)
class Source:
    """One remote MCP server. Holds where the credential comes from, never the credential."""

    id: str
    kind: SourceKind = "rag"
    url: str | None = None
    command: tuple[str, ...] | None = None
    credential_env: str | None = None
    credential_file: str | None = None
    groups: frozenset[str] = frozenset()
    compliance: str = DEFAULT_COMPLIANCE
    timeout_s: float = DEFAULT_TIMEOUT_S
    reputation: float = DEFAULT_REPUTATION
    enabled: bool = True
    allow_private_network: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    name: str = ""
    description: str = ""
    origin: str = ""                    # "registry:<registry>/<server name>" when imported
    tenants: frozenset[str] = frozenset()    # who may use it; empty = the stack's one tenant (SourcesConfig)
    identity: str = "username"          # how the verified user travels (IDENTITY_MODES)
    trusted: bool = False               # operator's word: may receive platform identity headers
    credential_header: str = ""         # the credential in this header instead of `Authorization: Bearer`
    header_env: tuple[tuple[str, str], ...] = ()   # (header, environment variable) sent on every call
    credential_secret: str = ""         # `<data dir>/secrets/<tenant>/<name>`: a tenant admin's own secret
    audience: str = ""                  # identity `assertion`: the remote stack's id
    base_dir: str = field(default="", compare=True, repr=False)   # credential_file relative to this

    def credential(self) -> str | None:
        """The credential, read now from its environment variable or file (None: none needed,
        or not available — the caller reports `action_required`)."""
        if self.credential_secret:
            tenant = next(iter(self.tenants), "")
            path = Path(self.base_dir or ".") / "secrets" / tenant / self.credential_secret
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError:
                return None
            return value or None
        return read_credential(self.credential_env, self.credential_file, self.base_dir)

    @property
    def needs_credential(self) -> bool:
        return bool(self.credential_env or self.credential_file or self.credential_secret)

    def auth_headers(self, credential: str | None) -> dict[str, str]:
        """The headers every call carries: the credential (`Authorization: Bearer`, or as is in
        `credential_header`) and the `header_env` headers, read now (an unset variable is left out)."""
        out: dict[str, str] = {}
        if credential:
            if self.credential_header:
                out[self.credential_header] = credential
            else:
                out["Authorization"] = f"Bearer {credential}"
        for header, env in self.header_env:
            value = os.environ.get(env, "").strip()
            if value:
                out[header] = value
        return out

    def user_for(self, tenant_id: str, user_id: str, tenants: frozenset[str] = frozenset()) -> str:
        """The user id this source receives: tenant-qualified (`user@tenant`) when the source
        serves several tenants, so alice of t1 and alice of t2 are never one user there."""
        if not user_id:
            return ""
        return f"{user_id}@{tenant_id}" if len(self.tenants or tenants) > 1 else user_id

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    @property
    def endpoint(self) -> str:
        """Where it is, for display (the command's program, not its arguments)."""
        return self.url or (self.command[0] if self.command else "")

    def __repr__(self) -> str:      # never the credential: only where it comes from
        cred = (f"env:{self.credential_env}" if self.credential_env
                else f"file:{self.credential_file}" if self.credential_file else "none")
        return (f"Source(id={self.id!r}, kind={self.kind!r}, endpoint={self.endpoint!r}, credential={cred}, "
                f"groups={sorted(self.groups)!r}, enabled={self.enabled})")

    __str__ = __repr__

    def to_json(self) -> dict[str, Any]:
        """The entry as written in the sources file (defaults omitted except the essentials)."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        if self.url:
            out["url"] = self.url
        if self.command:
            out["command"] = list(self.command)
        for key in ("credential_env", "credential_file"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        out["groups"] = sorted(self.groups)
        out["compliance"] = self.compliance
        out["timeout_s"] = self.timeout_s
        out["reputation"] = self.reputation
        out["enabled"] = self.enabled
        if self.allow_private_network:
            out["allow_private_network"] = True
        if self.max_response_bytes != DEFAULT_MAX_RESPONSE_BYTES:
            out["max_response_bytes"] = self.max_response_bytes
        for key in ("name", "description", "origin"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.tenants:
            out["tenants"] = sorted(self.tenants)
        if self.identity != "username":
            out["identity"] = self.identity
        if self.trusted:
            out["trusted"] = True
        if self.credential_header:
            out["credential_header"] = self.credential_header
        if self.header_env:
            out["header_env"] = dict(self.header_env)
        if self.credential_secret:
            out["credential_secret"] = self.credential_secret
        if self.audience:
            out["audience"] = self.audience
        return out


def is_admin(principal: Principal | None) -> bool:
    return principal is not None and (principal.has_role(ADMIN) or is_operator(principal))


def is_operator(principal: Principal | None) -> bool:
    """The stack's operator (the CLI's own key): every tenant's sources, and the operator-only
    fields. A tenant admin is an admin of its own tenant only."""
    return principal is not None and principal.has_role(OPERATOR)


@dataclass(frozen=True)
class SourcesConfig:
    """One immutable version of the sources file."""

    sources: tuple[Source, ...] = ()
    version: int = 0                    # increases with each successful change
    loaded_at: float = 0.0
    path: str = ""
    default_tenants: frozenset[str] = frozenset()   # a source naming no tenants serves these

    def get(self, source_id: str) -> Source | None:
        for s in self.sources:
            if s.id == source_id:
                return s
        return None

    def tenants_of(self, source: Source) -> frozenset[str]:
        """The tenants that may use `source` (its own list, else the stack's one tenant)."""
        return source.tenants or self.default_tenants

    def of_tenant(self, principal: Principal | None) -> list[Source]:
        """Every source (enabled or not) an admin of the caller's tenant manages; the operator
        manages them all."""
        if principal is None:
            return []
        if is_operator(principal) and not principal.tenant_id:
            return list(self.sources)
        return [s for s in self.sources if principal.tenant_id in self.tenants_of(s)]

    def visible_to(self, principal: Principal | None, tenant_id: str | None = None) -> list[Source]:
        """Enabled sources the caller may use: tenant first (the source names the caller's
        tenant), then groups (they intersect the source's); an admin sees every enabled source of
        its tenant; a source with no groups is for admins only. `principal` None (authentication
        off: a trusted network acting on `tenant_id`) = every enabled source of `tenant_id`."""
        enabled = [s for s in self.sources if s.enabled]
        if principal is None:
            return [s for s in enabled if tenant_id is not None and tenant_id in self.tenants_of(s)]
        tenant = principal.tenant_id or (tenant_id or "")
        if is_operator(principal) and not principal.tenant_id and tenant_id is None:
            return enabled
        mine = [s for s in enabled if tenant in self.tenants_of(s)]
        if is_admin(principal):
            return mine
        groups = set(principal.groups)
        return [s for s in mine if s.groups & groups]

    def visible(self, principal: Principal | None, source_id: str, tenant_id: str | None = None) -> Source | None:
        for s in self.visible_to(principal, tenant_id):
            if s.id == source_id:
                return s
        return None


EMPTY = SourcesConfig()
