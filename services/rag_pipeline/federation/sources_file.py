"""Reading, checking and writing the sources file (its format: sources.py; the record: source_config.py).

`parse_source` / `parse_sources` check every entry field by field (an error names the file,
the entry and the field, and says what is accepted); `load_sources` reads the file,
`check_tenants` holds its entries to the tenants this stack serves, `write_sources` writes it
back atomically.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from services.rag_pipeline.federation.source_config import (
    DEFAULT_COMPLIANCE, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REPUTATION, DEFAULT_TIMEOUT_S, ENV_NAME, FIELDS, GROUP,
    HEADER_NAME, IDENTITY_MODES, INLINE_SECRET_FIELDS, KINDS, MAX_FILE_BYTES, MAX_RESPONSE_BYTES_LIMIT,
    MAX_SOURCES, MAX_TIMEOUT_S, RESERVED_HEADERS, SECRET_NAME, SOURCE_ID, SOURCE_ID_RULE, Source, SourcesFileError,
)
from shared.identity import TENANT_ID


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
