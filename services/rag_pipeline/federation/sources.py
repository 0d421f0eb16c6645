"""The sources file: which remote MCP servers this RAGPipeline federates, and who may use them.

`<data dir>/sources.json` (or `NUCLEUS_SOURCES_FILE`); a missing file means no remote sources.

    {"sources": [
       {"id": "legal", "kind": "rag", "url": "https://legal.example.com/mcp",
        "credential_env": "LEGAL_RAG_TOKEN", "groups": ["legal"], "compliance": "internal",
        "timeout_s": 3, "reputation": 0.7, "enabled": true},
       {"id": "tickets", "kind": "tools", "command": ["ticket-mcp", "--stdio"],
        "credential_file": "secrets/tickets.token", "groups": ["support"]}]}

Every entry is checked field by field; an error names the file, the entry (index and id) and
the field, and says what is accepted. Secrets are never written in the file: `credential_env`
names an environment variable, `credential_file` a file (relative paths are relative to the
sources file); the value is read when a call goes out, never kept in a `Source` or shown.

`SourcesRegistry` holds the live configuration: `current()` is an immutable snapshot (a query
keeps the snapshot it started with, so a reload never changes a query in flight), `reload()`
replaces it only when the new file is valid (a broken edit keeps the last good configuration
and records the error), `start_watching()` polls the file, and `subscribe()` tells the proxy
tools when the configuration changed. The registry also holds each source's runtime status
(set by the background probe) and writes it, with the last reload error, to
`<sources file>.status.json` for `nucleus sources list` / `nucleus status`.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from shared.identity import ADMIN, OPERATOR, TENANT_ID, Principal
from shared.settings import default_data_dir

log = logging.getLogger(__name__)

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
    configured = os.environ.get("NUCLEUS_SOURCES_FILE", "").strip()
    return Path(configured).expanduser().resolve() if configured else default_data_dir() / "sources.json"


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
        if self.credential_env:
            value = os.environ.get(self.credential_env, "").strip()
            return value or None
        if self.credential_file:
            path = Path(self.credential_file).expanduser()
            if not path.is_absolute() and self.base_dir:
                path = Path(self.base_dir) / path
            try:
                value = path.read_text(encoding="utf-8").strip()
            except OSError:
                return None
            return value or None
        return None

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


# ---------------------------------------------------------------------------- validation
def check_url_syntax(url: str) -> str | None:
    """Why `url` is not acceptable as a source URL (None: it is)."""
    if len(url) > 2_048:
        return "must be at most 2048 characters"
    try:
        parts = urlsplit(url)
        parts.port         # noqa: B018  (raises on a bad port)
    except ValueError as err:
        return f"is not a valid URL ({err})"
    if parts.scheme not in ("http", "https"):
        return f"must be an http:// or https:// URL (streamable HTTP), got scheme {parts.scheme or 'none'!r}"
    if not parts.hostname:
        return "must name a host"
    if parts.username or parts.password:
        return "must not carry credentials (user:password@); use credential_env or credential_file"
    if parts.fragment:
        return "must not have a #fragment"
    return None


def _entry_name(index: int, raw: Any) -> str:
    sid = raw.get("id") if isinstance(raw, Mapping) else None
    return f"sources[{index}]" + (f" (id {sid!r})" if isinstance(sid, str) and sid else "")


def _number(value: Any, *, file: Path | str, entry: str, name: str, lo: float, hi: float,
            integer: bool = False) -> float:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise SourcesFileError(file, f"must be {kind} in [{lo:g}, {hi:g}], got {value!r}", entry=entry,
                               field_name=name)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise SourcesFileError(file, f"must be {kind} in [{lo:g}, {hi:g}], got {value!r}", entry=entry,
                               field_name=name)
    return value


def _text(value: Any, *, file: Path | str, entry: str, name: str, max_chars: int = 1_000) -> str:
    if not isinstance(value, str) or len(value) > max_chars:
        raise SourcesFileError(file, f"must be a string of at most {max_chars} characters", entry=entry,
                               field_name=name)
    return value


def credential_fields(raw: Mapping, *, file: Path | str, entry: str, what: str = "credential"
                      ) -> tuple[str | None, str | None]:
    """An entry's `credential_env` / `credential_file` (at most one; a variable name, a path),
    checked; `what` names the secret in the messages ("credential", "token")."""
    cred_env, cred_file = raw.get("credential_env"), raw.get("credential_file")
    if cred_env is not None and cred_file is not None:
        raise SourcesFileError(file, "give at most one of 'credential_env' and 'credential_file'", entry=entry,
                               field_name="credential_file")
    if cred_env is not None and (not isinstance(cred_env, str) or not ENV_NAME.match(cred_env)):
        raise SourcesFileError(file, "must be the name of an environment variable (letters, digits, '_'), "
                               f"not the {what} itself", entry=entry, field_name="credential_env")
    if cred_file is not None and (not isinstance(cred_file, str) or not cred_file.strip() or "\x00" in cred_file):
        raise SourcesFileError(file, f"must be the path of a file holding the {what}", entry=entry,
                               field_name="credential_file")
    return cred_env, cred_file


def parse_source(raw: Any, *, file: Path | str = "sources.json", index: int = 0, base_dir: str = "") -> Source:
    """One entry of the sources file, checked field by field."""
    entry = _entry_name(index, raw)
    if not isinstance(raw, Mapping):
        raise SourcesFileError(file, f"must be an object, got {type(raw).__name__}", entry=entry)
    for key in raw:
        if str(key).lower() in INLINE_SECRET_FIELDS:
            raise SourcesFileError(file, "secrets are never written in the sources file; name an environment "
                                   "variable with 'credential_env' or a file with 'credential_file'",
                                   entry=entry, field_name=str(key))
        if key not in FIELDS:
            raise SourcesFileError(file, f"unknown field; accepted: {', '.join(FIELDS)}", entry=entry,
                                   field_name=str(key))
    sid = raw.get("id")
    if not isinstance(sid, str) or not SOURCE_ID.match(sid):
        raise SourcesFileError(file, f"must be {SOURCE_ID_RULE} (it is also the tool prefix), got {sid!r}",
                               entry=entry, field_name="id")
    kind = raw.get("kind", "rag")
    if kind not in KINDS:
        raise SourcesFileError(file, f"must be one of {', '.join(KINDS)}, got {kind!r}", entry=entry,
                               field_name="kind")
    url, command = raw.get("url"), raw.get("command")
    if (url is None) == (command is None):
        raise SourcesFileError(file, "exactly one of 'url' (streamable HTTP) and 'command' (stdio) is required",
                               entry=entry, field_name="url" if url is None else "command")
    cmd: tuple[str, ...] | None = None
    if url is not None:
        if not isinstance(url, str):
            raise SourcesFileError(file, "must be an http(s) URL string", entry=entry, field_name="url")
        problem = check_url_syntax(url)
        if problem:
            raise SourcesFileError(file, problem, entry=entry, field_name="url")
    else:
        if (not isinstance(command, list) or not command or len(command) > 64
                or not all(isinstance(c, str) and c and "\x00" not in c for c in command)):
            raise SourcesFileError(file, "must be a non-empty list of strings (the program and its arguments)",
                                   entry=entry, field_name="command")
        cmd = tuple(command)
    cred_env, cred_file = credential_fields(raw, file=file, entry=entry)
    groups = raw.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) and GROUP.match(g) for g in groups):
        raise SourcesFileError(file, "must be a list of group names (empty = admins only)", entry=entry,
                               field_name="groups")
    compliance = _text(raw.get("compliance", DEFAULT_COMPLIANCE), file=file, entry=entry, name="compliance",
                       max_chars=64)
    timeout_s = float(_number(raw.get("timeout_s", DEFAULT_TIMEOUT_S), file=file, entry=entry, name="timeout_s",
                              lo=0.05, hi=MAX_TIMEOUT_S))
    reputation = float(_number(raw.get("reputation", DEFAULT_REPUTATION), file=file, entry=entry,
                               name="reputation", lo=0.0, hi=1.0))
    max_bytes = int(_number(raw.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES), file=file, entry=entry,
                            name="max_response_bytes", lo=1024, hi=MAX_RESPONSE_BYTES_LIMIT, integer=True))
    flags = {}
    for name, default in (("enabled", True), ("allow_private_network", False)):
        value = raw.get(name, default)
        if not isinstance(value, bool):
            raise SourcesFileError(file, f"must be true or false, got {value!r}", entry=entry, field_name=name)
        flags[name] = value
    texts = {name: _text(raw.get(name, ""), file=file, entry=entry, name=name)
             for name in ("name", "description", "origin")}
    tenants = raw.get("tenants", [])
    if (not isinstance(tenants, list) or len(tenants) > 256
            or not all(isinstance(t, str) and TENANT_ID.match(t) for t in tenants)):
        raise SourcesFileError(file, "must be a list of tenant ids (omitted = the stack's one tenant)",
                               entry=entry, field_name="tenants")
    identity = raw.get("identity", "username")
    if identity not in IDENTITY_MODES:
        raise SourcesFileError(file, f"must be one of {', '.join(IDENTITY_MODES)}, got {identity!r}",
                               entry=entry, field_name="identity")
    trusted = raw.get("trusted", False)
    if not isinstance(trusted, bool):
        raise SourcesFileError(file, f"must be true or false, got {trusted!r}", entry=entry, field_name="trusted")
    if identity == "headers" and not trusted:
        raise SourcesFileError(file, "identity 'headers' (x-user-id / x-session-tags) is only for sources the "
                               "operator marks \"trusted\": true", entry=entry, field_name="identity")
    cred_header = raw.get("credential_header", "")
    if not isinstance(cred_header, str) or (cred_header and (not HEADER_NAME.match(cred_header)
                                                             or cred_header.lower() in RESERVED_HEADERS)):
        raise SourcesFileError(file, "must be an HTTP header name (letters, digits, '-'), not an identity or "
                               "transport header", entry=entry, field_name="credential_header")
    header_env = raw.get("header_env", {})
    if (not isinstance(header_env, Mapping) or len(header_env) > 16
            or not all(isinstance(h, str) and HEADER_NAME.match(h) and h.lower() not in RESERVED_HEADERS
                       and h.lower() != "authorization" and isinstance(v, str) and ENV_NAME.match(v)
                       for h, v in header_env.items())):
        raise SourcesFileError(file, "must map header names to environment variable names (the values are "
                               "read from the environment, never written here)", entry=entry,
                               field_name="header_env")
    secret = raw.get("credential_secret", "")
    if not isinstance(secret, str) or (secret and not SECRET_NAME.match(secret)):
        raise SourcesFileError(file, "must be a secret name (letters, digits, '_', '.', '-') in the tenant's "
                               "secrets folder", entry=entry, field_name="credential_secret")
    if secret and (cred_env is not None or cred_file is not None):
        raise SourcesFileError(file, "give one of 'credential_secret', 'credential_env' and 'credential_file'",
                               entry=entry, field_name="credential_secret")
    if secret and len(tenants) != 1:
        raise SourcesFileError(file, "a tenant secret needs exactly one tenant in 'tenants'", entry=entry,
                               field_name="credential_secret")
    audience = raw.get("audience", "")
    if not isinstance(audience, str) or (audience and not re.match(r"^[A-Za-z0-9_.:-]{1,64}$", audience)):
        raise SourcesFileError(file, "must be the remote stack's id (its NUCLEUS_STACK_ID)", entry=entry,
                               field_name="audience")
    if identity == "assertion" and not audience:
        raise SourcesFileError(file, "identity 'assertion' needs the remote stack's id in 'audience'", entry=entry,
                               field_name="audience")
    if cmd is not None and identity in ("headers", "assertion"):
        raise SourcesFileError(file, "identity 'headers' needs an http(s) url", entry=entry, field_name="identity")
    return Source(id=sid, kind=kind, url=url, command=cmd, credential_env=cred_env, credential_file=cred_file,
                  groups=frozenset(groups), compliance=compliance, timeout_s=timeout_s, reputation=reputation,
                  enabled=flags["enabled"], allow_private_network=flags["allow_private_network"],
                  max_response_bytes=max_bytes, base_dir=base_dir, tenants=frozenset(tenants), identity=identity,
                  trusted=trusted, credential_header=cred_header,
                  header_env=tuple(sorted(header_env.items())), credential_secret=secret, audience=audience,
                  **texts)


def parse_sources(data: Any, *, file: Path | str = "sources.json", base_dir: str = "") -> tuple[Source, ...]:
    """The entries of a parsed sources file (an object with a "sources" list)."""
    if not isinstance(data, Mapping):
        raise SourcesFileError(file, 'must be a JSON object {"sources": [...]}')
    unknown = [k for k in data if k not in ("sources", "$schema", "comment")]
    if unknown:
        raise SourcesFileError(file, "unknown top-level field; accepted: sources", field_name=str(unknown[0]))
    entries = data.get("sources", [])
    if not isinstance(entries, list):
        raise SourcesFileError(file, "must be a list of source objects", field_name="sources")
    if len(entries) > MAX_SOURCES:
        raise SourcesFileError(file, f"at most {MAX_SOURCES} sources", field_name="sources")
    out: list[Source] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(entries):
        source = parse_source(raw, file=file, index=i, base_dir=base_dir)
        if source.id in seen:
            raise SourcesFileError(file, f"duplicate id (also sources[{seen[source.id]}])",
                                   entry=_entry_name(i, raw), field_name="id")
        seen[source.id] = i
        out.append(source)
    return tuple(out)


def check_tenants(sources: Iterable[Source], stack_tenants: frozenset[str], file: Path | str) -> None:
    """Every source says which tenants may use it, unless the stack serves exactly one tenant."""
    if len(stack_tenants) == 1:
        return
    for i, s in enumerate(sources):
        if not s.tenants:
            known = f" ({', '.join(sorted(stack_tenants)[:8])})" if stack_tenants else ""
            raise SourcesFileError(file, f"required: this stack serves several tenants{known}; name the "
                                   "tenants that may use this source", entry=f"sources[{i}] (id {s.id!r})",
                                   field_name="tenants")


def load_sources(path: Path) -> tuple[Source, ...]:
    """Read and check a sources file; a missing file is no sources."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return ()
    except OSError as err:
        raise SourcesFileError(path, f"cannot be read: {err.strerror or err}") from None
    if size > MAX_FILE_BYTES:
        raise SourcesFileError(path, f"is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as err:
        raise SourcesFileError(path, f"cannot be read: {err}") from None
    if not text.strip():
        return ()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SourcesFileError(path, f"is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") \
            from None
    return parse_sources(data, file=path, base_dir=str(path.parent))


def write_sources(path: Path, sources: Iterable[Source]) -> None:
    """Write a sources file atomically (temporary file + rename): a reader never sees half of it."""
    data = {"sources": [s.to_json() for s in sources]}
    parse_sources(json.loads(json.dumps(data)), file=path)          # never write what we would refuse
    write_json_atomically(path, data)


def write_json_atomically(path: Path, data: Any) -> None:
    """`data` as indented JSON in `path` (temporary file + rename): a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------- runtime status
@dataclass
class SourceStatus:
    """What the probe last saw of a source (mutable; replaced as a whole under the registry lock)."""

    state: SourceState = "unknown"
    last_probe: float = 0.0
    contract: str = ""                  # e.g. "seed000+seed002", "seed002", "tools"
    tools: tuple[str, ...] = ()
    last_error: str = ""
    latency_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "last_probe": self.last_probe, "contract": self.contract,
                "tools": list(self.tools), "last_error": self.last_error, "latency_ms": round(self.latency_ms, 1)}


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    changed: bool
    version: int
    error: str = ""
    sources: int = 0


Callback = Callable[[SourcesConfig], Any]


class SourcesRegistry:
    """The live sources configuration of one process (see the module docstring)."""

    def __init__(self, path: Path | str | None = None, *, poll_s: float = 1.0, publish_status: bool = True,
                 stack_tenants: Iterable[str] = ()) -> None:
        self.path = Path(path).resolve() if path is not None else default_sources_path()
        #: The tenants this stack serves, when known (the auth config's, or the local one). A stack
        #: with exactly one lets a source omit `tenants`; with several every source must name its own.
        self.stack_tenants = frozenset(stack_tenants)
        self.poll_s = poll_s
        self.publish_status = publish_status
        self._lock = threading.Lock()
        self._config = replace(EMPTY, path=str(self.path))
        self._fingerprint: tuple | None = None
        self._text_hash: int | None = None
        self._last_error = ""
        self._last_error_at = 0.0
        self._reloads = 0
        self._status: dict[str, SourceStatus] = {}
        self._subscribers: list[Callback] = []
        self._task: asyncio.Task | None = None
        self._reload_request_mtime = self._mtime(reload_request_path(self.path))
        self._answered_request = ""     # the token of the last reload request answered (`nucleus sources reload`)
        self.reload()

    # -- configuration
    def current(self) -> SourcesConfig:
        return self._config

    @property
    def default_tenants(self) -> frozenset[str]:
        return self.stack_tenants if len(self.stack_tenants) == 1 else frozenset()

    @property
    def last_error(self) -> str:
        return self._last_error

    def reload(self) -> ReloadResult:
        """Read the file again. Valid and different: becomes current, subscribers are told.
        Invalid: the last good configuration stays and `last_error` says what is wrong."""
        with self._lock:
            self._reloads += 1
            fingerprint = self._fingerprint_of(self.path)
            try:
                raw = self.path.read_bytes() if self.path.exists() else b""
                sources = load_sources(self.path)
                check_tenants(sources, self.stack_tenants, self.path)
            except SourcesFileError as err:
                self._fingerprint = fingerprint
                self._last_error, self._last_error_at = str(err), time.time()
                log.error("sources file not loaded, keeping the previous configuration (version %d): %s",
                          self._config.version, err)
                result = ReloadResult(False, False, self._config.version, str(err), len(self._config.sources))
                self._write_status_locked()
                return result
            except OSError as err:
                self._last_error, self._last_error_at = f"{self.path}: cannot be read: {err}", time.time()
                result = ReloadResult(False, False, self._config.version, self._last_error, len(self._config.sources))
                self._write_status_locked()
                return result
            self._fingerprint = fingerprint
            self._last_error = ""
            digest = hash(raw)
            if digest == self._text_hash and self._config.version > 0:
                self._write_status_locked()
                return ReloadResult(True, False, self._config.version, "", len(self._config.sources))
            self._text_hash = digest
            new = SourcesConfig(sources=sources, version=self._config.version + 1, loaded_at=time.time(),
                                path=str(self.path), default_tenants=self.default_tenants)
            changed = new.sources != self._config.sources
            old_config, old_status = self._config, self._status
            self._config = new
            self._status = {}
            for s in sources:          # an unchanged entry keeps its status; a changed one is probed again
                if not s.enabled:
                    self._status[s.id] = SourceStatus(state="locked", last_error="disabled in the sources file")
                elif old_config.get(s.id) == s and s.id in old_status:
                    self._status[s.id] = old_status[s.id]
                else:
                    self._status[s.id] = SourceStatus()
            self._write_status_locked()
            subscribers = list(self._subscribers)
        log.info("sources file %s: version %d, %d sources", self.path, new.version, len(new.sources))
        if changed:
            for callback in subscribers:
                try:
                    result = callback(new)
                    if asyncio.iscoroutine(result):
                        _spawn(result)
                except Exception:      # a subscriber's failure never undoes the reload
                    log.exception("sources subscriber failed")
        return ReloadResult(True, changed, new.version, "", len(new.sources))

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """Call `callback(config)` after each successful change; returns an unsubscribe function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    # -- runtime status
    def status(self, source_id: str) -> SourceStatus:
        return self._status.get(source_id, SourceStatus())

    def statuses(self) -> dict[str, SourceStatus]:
        return dict(self._status)

    def set_status(self, source_id: str, **changes: Any) -> None:
        with self._lock:
            if self._config.get(source_id) is None:
                return                  # removed meanwhile
            current = self._status.get(source_id, SourceStatus())
            self._status[source_id] = replace(current, **changes)
            self._write_status_locked()

    def snapshot(self) -> dict[str, Any]:
        """Configuration + status as JSON (the status file, `rag_sources_status`)."""
        config = self._config
        return {
            "path": str(self.path), "version": config.version, "loaded_at": config.loaded_at,
            "last_error": self._last_error, "last_error_at": self._last_error_at, "reloads": self._reloads,
            "updated_at": time.time(), "answered_request": self._answered_request,
            "stack_tenants": sorted(self.stack_tenants),
            "sources": [{**s.to_json(), "status": self._status.get(s.id, SourceStatus()).to_json()}
                        for s in config.sources],
        }

    def _write_status_locked(self, *, answer: bool = False) -> None:
        if not self.publish_status:
            return
        target = status_path(self.path)
        if not answer and not self.path.exists() and not target.exists():
            return                      # no sources file, nothing ever published: leave the data dir alone
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.snapshot(), f, indent=1)
            os.replace(tmp, target)
        except OSError as err:
            log.warning("sources status not written to %s: %s", target, err)

    # -- watching
    @staticmethod
    def _mtime(path: Path) -> int | None:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return None

    @staticmethod
    def _fingerprint_of(path: Path) -> tuple | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def check_for_changes(self) -> ReloadResult | None:
        """Reload if the file (or the reload request file) changed since the last look."""
        request = self._mtime(reload_request_path(self.path))
        if request != self._reload_request_mtime:
            self._reload_request_mtime = request
            self._text_hash = None if request is not None else self._text_hash
            result = self.reload()
            if request is not None:
                # Answer the request even when there is no sources file yet (a fresh stack): the
                # CLI waits for this token in the status file (`nucleus sources reload`).
                try:
                    token = reload_request_path(self.path).read_text(encoding="utf-8")[:128].strip()
                except (OSError, UnicodeDecodeError):
                    token = ""
                with self._lock:
                    self._answered_request = token
                    self._write_status_locked(answer=True)
            return result
        if self._fingerprint_of(self.path) != self._fingerprint:
            return self.reload()
        return None

    def start_watching(self) -> None:
        """Poll the file every `poll_s` seconds in this event loop (atomic renames, editors that
        rewrite in place and network file systems are all seen; no inotify needed)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="sources-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                self.check_for_changes()
            except Exception:
                log.exception("sources watch failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass


_background: set[asyncio.Task] = set()


def _spawn(coro: Any) -> None:
    try:
        task = asyncio.get_running_loop().create_task(coro)
    except RuntimeError:            # no loop in this thread: run it to completion here
        asyncio.run(coro)
        return
    _background.add(task)
    task.add_done_callback(_background.discard)


def read_status_file(sources_path: Path) -> dict[str, Any] | None:
    """What the running service last published about its sources (None: never published)."""
    try:
        return json.loads(status_path(sources_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
