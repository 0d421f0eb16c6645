"""MCP registries: browse them and import a server as a source (docs/FEDERATION.md).

The registries are listed in `registries.json` beside the sources file:

    {"registries": [{"name": "official", "url": "https://registry.modelcontextprotocol.io"},
                    {"name": "corp", "url": "https://mcp-registry.corp.example", "credential_env": "CORP_REG_TOKEN"}]}

A registry that needs a token names where it comes from (`credential_env`, an environment
variable, or `credential_file`, a file relative to the registries file); it is read at each
request, sent as `Authorization: Bearer`, registered with the redactor and never written,
printed or logged.

A registry speaks the MCP Registry API: `GET <url>/v0.1/servers?search=&limit=&cursor=`
(the frozen v0.1; `/v0/servers` is tried when v0.1 answers 404), answering

    {"servers": [{"server": {server.json: name, version, title, description, icons,
                             remotes: [{type, url, headers}], packages: [...]},
                  "_meta": {"io.modelcontextprotocol.registry/official": {status, updatedAt, ...}}}],
     "metadata": {"nextCursor": "...", "count": 30}}

(older v0 answers, with flat server objects, `transport_type` and `next_cursor`, are read too).
Several registries are asked independently: one failing gives partial results, each row
marked with its registry, and the failure named. Browsing one registry pages with its opaque
cursor (`BrowseResult.next_cursors`); `find(..., version=V)` pins a version (the registry's
`/servers/{name}/versions/{version}`, else the listing). Importing needs a `streamable-http` remote:
a server with only `packages[]` (npm, PyPI, OCI...) is refused with the reason, since Nucleus
runs no downloaded package; so is one with only an `sse` remote or a URL template.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

from services.rag_pipeline.federation.sources import (
    SOURCE_ID,
    SOURCE_ID_RULE,
    Source,
    SourcesFileError,
    credential_fields,
    check_tenants,
    check_url_syntax,
    load_sources,
    parse_source,
    write_json_atomically,
    write_sources,
)
from services.rag_pipeline.federation.source_config import read_credential
from shared.audit import AuditEvent, AuditLog
from shared.identity import Principal
from shared.redaction import register_secret

REGISTRY_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
REGISTRY_NAME_RULE = "1-32 characters: lower-case letters, digits, '_' and '-', starting with a letter or digit"
OFFICIAL_META = "io.modelcontextprotocol.registry/official"
API_VERSIONS = ("v0.1", "v0")
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
DEFAULT_TIMEOUT_S = 10.0
PAGE_LIMIT = 100
MAX_PAGES = 50


class RegistryError(Exception):
    """A registry that could not be asked, or answered something unreadable."""

    def __init__(self, registry: str, message: str) -> None:
        self.registry, self.message = registry, message
        super().__init__(f"registry {registry}: {message}")


VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$")
VERSION_RULE = "1-64 characters: letters, digits, '.', '+', '_', '-' (e.g. 1.2.0)"


@dataclass(frozen=True)
class Registry:
    name: str
    url: str
    credential_env: str | None = None       # where its token comes from, never the token
    credential_file: str | None = None
    base_dir: str = field(default="", repr=False)

    def credential(self) -> str | None:
        """The token, read now (None: none needed, or not available)."""
        value = read_credential(self.credential_env, self.credential_file, self.base_dir)
        if value:
            register_secret(value)
        return value

    @property
    def needs_credential(self) -> bool:
        return bool(self.credential_env or self.credential_file)

    def credential_source(self) -> str:
        """Where the token comes from, for display (never the token)."""
        return (f"env {self.credential_env}" if self.credential_env
                else f"file {self.credential_file}" if self.credential_file else "none")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "url": self.url}
        if self.credential_env:
            out["credential_env"] = self.credential_env
        if self.credential_file:
            out["credential_file"] = self.credential_file
        return out


@dataclass(frozen=True)
class Remote:
    type: str
    url: str
    headers: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RegistryServer:
    """One server of a registry listing."""

    registry: str
    name: str
    version: str = ""
    title: str = ""
    description: str = ""
    status: str = ""
    updated_at: str = ""
    icon: str = ""
    remotes: tuple[Remote, ...] = ()
    packages: tuple[str, ...] = ()           # "<registryType>:<identifier>"
    is_latest: bool | None = None

    def importable(self) -> tuple[Remote | None, str]:
        """(the remote to use, "") or (None, why it cannot be imported)."""
        usable = [r for r in self.remotes if r.type == "streamable-http"]
        for r in usable:
            if "{" in r.url:
                continue
            if check_url_syntax(r.url) is None:
                return r, ""
        if usable:
            return None, "its streamable-http remote URL is a template or not a valid http(s) URL"
        if self.remotes:
            kinds = ", ".join(sorted({r.type or "?" for r in self.remotes}))
            return None, f"no streamable-http remote (only {kinds}); Nucleus connects over streamable HTTP"
        if self.packages:
            return None, ("only packages[] (" + ", ".join(self.packages[:3]) + "): Nucleus imports remote "
                          "servers only and never installs or runs a downloaded package")
        return None, "neither remotes nor packages"

    def needs_secret_header(self) -> list[str]:
        names = []
        for r in self.remotes:
            for h in r.headers:
                if isinstance(h, dict) and (h.get("isSecret") or h.get("isRequired")):
                    names.append(str(h.get("name", "")))
        return names


@dataclass
class BrowseResult:
    servers: list[RegistryServer] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)       # registry -> what failed
    next_cursors: dict[str, str] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        return bool(self.errors)


# ---------------------------------------------------------------------------- registries file
def registries_path(sources_path: Path) -> Path:
    return sources_path.with_name("registries.json")


def load_registries(path: Path) -> list[Registry]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as err:
        raise SourcesFileError(path, f"cannot be read: {err}") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as err:
        raise SourcesFileError(path, f"is not valid JSON: {err.msg} at line {err.lineno}") from None
    raw = data.get("registries", []) if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise SourcesFileError(path, "must be an object with a list 'registries'", field_name="registries")
    out: list[Registry] = []
    for i, item in enumerate(raw):
        entry = f"registries[{i}]"
        if not isinstance(item, dict):
            raise SourcesFileError(path, "must be an object {name, url}", entry=entry)
        out.append(_registry_of(path, entry, item))
    return out


def _registry_of(path: Path, entry: str, item: dict[str, Any]) -> Registry:
    for key in item:
        if key not in REGISTRY_FIELDS:
            secret = str(key).lower() in ("token", "credential", "api_key", "bearer", "authorization", "secret")
            raise SourcesFileError(path, "a token is never written here; name an environment variable with "
                                   "'credential_env' or a file with 'credential_file'" if secret else
                                   f"unknown field; accepted: {', '.join(REGISTRY_FIELDS)}", entry=entry,
                                   field_name=str(key))
    name, url = item.get("name"), item.get("url")
    if not isinstance(name, str) or not REGISTRY_NAME.match(name):
        raise SourcesFileError(path, f"must be {REGISTRY_NAME_RULE}", entry=entry, field_name="name")
    problem = check_url_syntax(url) if isinstance(url, str) else "must be an http(s) URL"
    if problem:
        raise SourcesFileError(path, problem, entry=entry, field_name="url")
    cred_env, cred_file = credential_fields(item, file=path, entry=entry, what="token")
    return Registry(name, url.rstrip("/"), credential_env=cred_env, credential_file=cred_file,
                    base_dir=str(path.parent))


REGISTRY_FIELDS = ("name", "url", "credential_env", "credential_file")


def save_registries(path: Path, registries: list[Registry]) -> None:
    write_json_atomically(path, {"registries": [r.to_json() for r in registries]})


def add_registry(path: Path, name: str, url: str, *, credential_env: str | None = None,
                 credential_file: str | None = None) -> Registry:
    """Add (or replace) a registry; its token is named (env or file), never given."""
    item: dict[str, Any] = {"name": name, "url": url}
    if credential_env is not None:
        item["credential_env"] = credential_env
    if credential_file is not None:
        item["credential_file"] = credential_file
    try:
        registry = _registry_of(path, "registry", item)
    except SourcesFileError as err:
        raise SourcesFileError(path, f"registry {err.field_name or 'entry'} {err.reason}",
                               field_name=err.field_name) from None
    registries = [r for r in load_registries(path) if r.name != name]
    save_registries(path, [*registries, registry])
    return registry


# ---------------------------------------------------------------------------- parsing
def _text(value: Any, limit: int = 2_000) -> str:
    return value[:limit] if isinstance(value, str) else ""


def parse_server(registry: str, item: Any) -> RegistryServer | None:
    """One entry of a listing: v0.1 {"server": {...}, "_meta": {...}} or a flat v0 server."""
    if not isinstance(item, dict):
        return None
    server = item.get("server") if isinstance(item.get("server"), dict) else item
    name = server.get("name")
    if not isinstance(name, str) or not name:
        return None
    meta = item.get("_meta") if isinstance(item.get("_meta"), dict) else server.get("_meta")
    official = meta.get(OFFICIAL_META, {}) if isinstance(meta, dict) else {}
    official = official if isinstance(official, dict) else {}
    version = server.get("version")
    if not isinstance(version, str):
        detail = server.get("version_detail")
        version = detail.get("version", "") if isinstance(detail, dict) else ""
    remotes = []
    for r in server.get("remotes") or []:
        if isinstance(r, dict) and isinstance(r.get("url"), str):
            kind = r.get("type", r.get("transport_type", ""))
            headers = tuple(h for h in (r.get("headers") or []) if isinstance(h, dict))
            remotes.append(Remote(type=str(kind), url=r["url"], headers=headers))
    packages = []
    for p in server.get("packages") or []:
        if isinstance(p, dict):
            kind = p.get("registryType", p.get("registry_type", p.get("registry_name", "package")))
            ident = p.get("identifier", p.get("name", ""))
            packages.append(f"{kind}:{ident}")
    icons = server.get("icons")
    icon = icons[0].get("src", "") if isinstance(icons, list) and icons and isinstance(icons[0], dict) else ""
    return RegistryServer(
        registry=registry, name=name, version=_text(version, 64), title=_text(server.get("title"), 200),
        description=_text(server.get("description")), status=_text(official.get("status", server.get("status")), 32),
        updated_at=_text(official.get("updatedAt", official.get("publishedAt", "")), 64), icon=_text(icon, 2_000),
        remotes=tuple(remotes), packages=tuple(packages),
        is_latest=official.get("isLatest") if isinstance(official.get("isLatest"), bool) else None)


def parse_listing(registry: str, data: Any) -> tuple[list[RegistryServer], str]:
    """(servers, next cursor or "") of one page."""
    if not isinstance(data, dict) or not isinstance(data.get("servers"), list):
        raise RegistryError(registry, "the answer is not a server list ({\"servers\": [...]})")
    servers = [s for s in (parse_server(registry, item) for item in data["servers"]) if s is not None]
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    cursor = metadata.get("nextCursor", metadata.get("next_cursor", "")) or ""
    return servers, cursor if isinstance(cursor, str) else ""


# ---------------------------------------------------------------------------- fetching
class RegistryClient:
    """Reads one or more registries over HTTP (timeouts, size limit, no redirects off-origin)."""

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, transport: httpx.BaseTransport | None = None) -> None:
        self.timeout_s = timeout_s
        self._transport = transport
        self._api: dict[str, str] = {}          # registry url -> the API path prefix that answered

    def _get(self, registry: Registry, path: str, params: dict[str, Any]) -> httpx.Response:
        base = registry.url
        url = f"{base}{path}" + (f"?{urlencode(params)}" if params else "")
        headers = {"Accept": "application/json"}
        token = registry.credential()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif registry.needs_credential:
            raise RegistryError(registry.name, f"its token is missing ({registry.credential_source()} is not set "
                                "or empty)")
        with httpx.Client(timeout=self.timeout_s, follow_redirects=False, transport=self._transport) as client:
            with client.stream("GET", url, headers=headers) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise RegistryError(registry.name, f"answer larger than {MAX_RESPONSE_BYTES} bytes")
                response._content = bytes(body)      # noqa: SLF001 (read once, bounded)
                return response

    def page(self, registry: Registry, *, search: str = "", limit: int = 30, cursor: str = "") -> tuple[
            list[RegistryServer], str]:
        params: dict[str, Any] = {"limit": max(1, min(limit, PAGE_LIMIT))}
        if search:
            params["search"] = search
        if cursor:
            params["cursor"] = cursor
        base_path = urlsplit(registry.url).path.rstrip("/")
        versions = [""] if base_path.endswith(API_VERSIONS) else [f"/{v}" for v in API_VERSIONS]
        if registry.url in self._api:
            versions = [self._api[registry.url]]
        last = ""
        for version in versions:
            try:
                response = self._get(registry, f"{version}/servers", params)
            except httpx.HTTPError as err:
                raise RegistryError(registry.name, f"cannot be reached: {type(err).__name__}: {err}") from None
            if response.status_code == 404 and version != versions[-1]:
                last = "404"
                continue
            if response.status_code in (401, 403):
                raise RegistryError(registry.name, f"answered HTTP {response.status_code} for {version}/servers: "
                                    + ("its token was refused" if registry.needs_credential else
                                       "it needs a token; add the registry again with --credential-env or "
                                       "--credential-file"))
            if response.status_code != 200:
                raise RegistryError(registry.name, f"answered HTTP {response.status_code} for {version}/servers")
            try:
                data = json.loads(response.content)
            except ValueError:
                raise RegistryError(registry.name, "answered something that is not JSON") from None
            page = parse_listing(registry.name, data)
            self._api[registry.url] = version
            return page
        raise RegistryError(registry.name, f"no server list at /v0.1/servers or /v0/servers ({last})")

    def browse(self, registries: list[Registry], *, search: str = "", limit: int = 30,
               cursor: str = "") -> BrowseResult:
        """Up to `limit` servers from each registry, from `cursor` (one registry's opaque cursor,
        as given in `next_cursors`); a failing registry is named in `errors`."""
        if cursor and len(registries) != 1:
            raise RegistryError(",".join(r.name for r in registries) or "-",
                                "a cursor belongs to one registry: name it (--registry)")
        result = BrowseResult()
        start = cursor
        for registry in registries:
            try:
                found: list[RegistryServer] = []
                cursor = start
                for _ in range(MAX_PAGES):
                    servers, cursor = self.page(registry, search=search, limit=limit - len(found), cursor=cursor)
                    found.extend(servers)
                    if not cursor or len(found) >= limit or not servers:
                        break
                result.servers.extend(found[:limit])
                if cursor:
                    result.next_cursors[registry.name] = cursor
            except RegistryError as err:
                result.errors[registry.name] = err.message
        return result

    def version(self, registry: Registry, name: str, version: str) -> RegistryServer | None:
        """`GET <api>/servers/{name}/versions/{version}` (None: the registry has no such endpoint
        or no such version there)."""
        if registry.url not in self._api:
            self.page(registry, search=name, limit=1)              # learn which API version answers
        prefix = self._api.get(registry.url, "")
        path = f"{prefix}/servers/{quote(name, safe='')}/versions/{quote(version, safe='')}"
        try:
            response = self._get(registry, path, {})
        except httpx.HTTPError as err:
            raise RegistryError(registry.name, f"cannot be reached: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            return None
        try:
            server = parse_server(registry.name, json.loads(response.content))
        except ValueError:
            return None
        return server if server is not None and server.name == name and server.version == version else None

    def find(self, registry: Registry, name: str, version: str = "") -> RegistryServer:
        """The server named exactly `name`: its latest version listed, or exactly `version`
        (pinned), following every cursor."""
        if version and not VERSION.match(version):
            raise RegistryError(registry.name, f"--version must be {VERSION_RULE}, got {version!r}")
        if version:
            pinned = self.version(registry, name, version)
            if pinned is not None:
                return pinned
        cursor = ""
        matches: list[RegistryServer] = []
        for _ in range(MAX_PAGES):
            servers, cursor = self.page(registry, search=name, limit=PAGE_LIMIT, cursor=cursor)
            matches.extend(s for s in servers if s.name == name)
            if not cursor or not servers:
                break
        if not matches:
            raise RegistryError(registry.name, f"has no server named {name!r}")
        if version:
            exact = [m for m in matches if m.version == version]
            if not exact:
                listed = ", ".join(sorted({m.version for m in matches if m.version})[:12]) or "none"
                raise RegistryError(registry.name, f"has no version {version!r} of {name!r} (versions listed: "
                                    f"{listed})")
            return exact[0]
        active = [m for m in matches if m.status in ("", "active")] or matches
        marked = [m for m in active if m.is_latest]
        return marked[0] if marked else active[0]


# ---------------------------------------------------------------------------- import
def source_from_server(server: RegistryServer, *, slug: str, groups: list[str], kind: str = "rag",
                       credential_env: str | None = None, timeout_s: float = 5.0,
                       reputation: float = 0.5, tenants: list[str] | None = None) -> Source:
    """The sources-file entry for a registry server (refused with the reason when it cannot be)."""
    if not SOURCE_ID.match(slug):
        raise SourcesFileError("--slug", f"must be {SOURCE_ID_RULE}, got {slug!r}", field_name="id")
    remote, why = server.importable()
    if remote is None:
        raise RegistryError(server.registry, f"server {server.name!r} cannot be imported: {why}")
    raw: dict[str, Any] = {"id": slug, "kind": kind, "url": remote.url, "groups": groups, "timeout_s": timeout_s,
                           "reputation": reputation, "name": server.title or server.name,
                           "description": server.description[:1_000],
                           "origin": f"registry:{server.registry}/{server.name}@{server.version}"}
    if credential_env:
        raw["credential_env"] = credential_env
    if tenants:
        raw["tenants"] = tenants
    return parse_source(raw, file="import")


def import_server(sources_path: Path, server: RegistryServer, *, audit: AuditLog | None = None,
                  principal: Principal | None = None, stack_tenants: frozenset[str] | None = None,
                  **options: Any) -> Source:
    """Append the server to the sources file (under the file's lock, atomic write; the running
    service picks it up), with one audit line when `audit` is given."""
    from services.rag_pipeline.federation.admin import locked

    source = source_from_server(server, **options)
    with locked(sources_path):
        existing = list(load_sources(sources_path))
        if any(s.id == source.id for s in existing):
            raise SourcesFileError(sources_path, f"a source with id {source.id!r} already exists; choose another "
                                   "--slug", field_name="id")
        if stack_tenants is not None:
            check_tenants([source], stack_tenants, "--tenants")
        write_sources(sources_path, [*existing, source])
    if audit is not None:
        audit.record(AuditEvent.for_principal(principal, event="sources", decision="allow",
                                              tool="nucleus sources import", resources=[source.id],
                                              notes=[f"origin={source.origin}"]))
    return source
