"""`nucleus sources ...`: the federation's sources file, its live status, and MCP registries.

    nucleus sources list                    every source with its state (from the running service)
    nucleus sources show ID                 one source: endpoint, groups, contract, tools, last error
    nucleus sources reload                  check the file and make the running RAGPipeline reload it
    nucleus sources add ID --url U [...]    add a source (every field as an option); edit ID [--field ...]
                                            changes only the fields given; remove / enable / disable ID
    nucleus sources registry add NAME URL [--credential-env E | --credential-file F]
                                            remember an MCP registry (registries.json beside sources.json)
    nucleus sources registry list
    nucleus sources browse [QUERY] [--registry R --cursor C] [--limit N]
                                            servers of every registry (partial when one fails); prints
                                            each registry's next cursor
    nucleus sources import NAME --registry R --slug S [--version V] [--groups g1,g2]

add / edit / remove / enable / disable are the operator's (every field, every tenant): validated
as a reload validates, written atomically under the file's lock, one audit line each (who, what,
which source, the field names — never a value), then the running service is asked to reload.

The file is `--file`, else $NUCLEUS_SOURCES_FILE, else <data dir>/sources.json. The running
RAGPipeline publishes its view (version, last reload error, each source's probe) in
`<sources file>.status.json`; `reload` touches `<sources file>.reload`, which it polls.
Exit codes: 0 ok; 2 the file (or an argument) is invalid; 3 no registry answered / not found /
the id is taken; 4 not allowed.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

INVALID_EXIT = 2
UNREACHABLE_EXIT = 3


def sources_file(args: argparse.Namespace) -> Path:
    from cli.main import data_dir

    if getattr(args, "file", None):
        return Path(args.file).resolve()
    configured = os.environ.get("NUCLEUS_SOURCES_FILE", "").strip()
    return Path(configured).expanduser().resolve() if configured else data_dir(args) / "sources.json"


def _ago(unix: float) -> str:
    if not unix:
        return "never"
    secs = max(0.0, time.time() - unix)
    return f"{secs:.0f}s ago" if secs < 120 else f"{secs / 60:.0f}m ago" if secs < 7200 else f"{secs / 3600:.0f}h ago"


def _state_markup(state: str) -> str:
    colour = {"connected": "green", "action_required": "yellow", "locked": "yellow", "error": "red"}.get(state, "dim")
    return f"[{colour}]{escape(state)}[/{colour}]"


def _load(path: Path) -> tuple[list[Any], str]:
    from services.rag_pipeline.federation.sources import SourcesFileError, load_sources

    try:
        return list(load_sources(path)), ""
    except SourcesFileError as err:
        return [], str(err)


#: States that are a federation problem worth a line in `nucleus status` (a disabled source's
#: `locked` is the operator's choice, and `unknown` is not probed yet).
PROBLEM_STATES = ("error", "action_required", "locked")
MAX_PROBLEM_LINES = 20


def source_lines(path: Path) -> list[str]:
    """Lines for `nucleus status` (rich markup): one summary line, one line per failing source
    (its state and last error), and the last reload error."""
    from services.rag_pipeline.federation.sources import read_status_file

    published = read_status_file(path)
    sources, local_error = _load(path)
    if not sources and not (published or {}).get("sources") and not local_error:
        return [f"[dim]federation: no remote sources ({escape(str(path))} absent)[/dim]"
                if not path.exists() else f"[dim]federation: no remote sources ({escape(str(path))})[/dim]"]
    lines = []
    rows = (published or {}).get("sources") or [s.to_json() for s in sources]
    counts: dict[str, int] = {}
    failing: list[tuple[str, str, str]] = []
    for row in rows:
        status = row.get("status") or {}
        state = status.get("state", "unknown")
        counts[state] = counts.get(state, 0) + 1
        if state in PROBLEM_STATES and row.get("enabled", True):
            failing.append((str(row.get("id", "?")), state, str(status.get("last_error", ""))))
    summary = ", ".join(f"{n} {escape(s)}" for s, n in sorted(counts.items())) or "none"
    lines.append(f"federation: {len(rows)} remote sources ({summary}); file {escape(str(path))}")
    for sid, state, error in failing[:MAX_PROBLEM_LINES]:
        lines.append(f"  source {escape(sid)}: {_state_markup(state)}" + (f": {escape(error[:300])}" if error else ""))
    if len(failing) > MAX_PROBLEM_LINES:
        lines.append(f"  … {len(failing) - MAX_PROBLEM_LINES} more failing sources (`nucleus sources list`)")
    error = (published or {}).get("last_error") or local_error
    if error:
        kept = " (the service keeps its last good configuration)" if published else ""
        lines.append(f"  [red]sources file error[/red]{kept}: {escape(error)}")
    return lines


# ---------------------------------------------------------------------------- list / show / reload
def cmd_list(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.sources import read_status_file

    path = sources_file(args)
    sources, local_error = _load(path)
    published = read_status_file(path) or {}
    status_by_id = {row["id"]: row.get("status", {}) for row in published.get("sources", [])}
    if args.json:
        console.print_json(json.dumps({"path": str(path), "error": local_error or published.get("last_error", ""),
                                       "service": published or None,
                                       "sources": [{**s.to_json(), "status": status_by_id.get(s.id)}
                                                   for s in sources]}))
        return INVALID_EXIT if local_error else 0
    serving = bool(local_error and published.get("sources"))
    title = f"sources ({escape(str(path))})" + (": the configuration the service still serves" if serving else "")
    table = Table(title=title)
    for col in ("id", "kind", "endpoint", "groups", "state", "contract", "tools", "last probe", "last error"):
        table.add_column(col, overflow="fold")
    rows = published["sources"] if serving else [s.to_json() for s in sources]
    for row in rows:
        st = status_by_id.get(row["id"]) or {}
        state = st.get("state", "unknown") if published else "unknown"
        if not row.get("enabled", True):
            state = "locked"
        endpoint = row.get("url") or " ".join(row.get("command") or [])[:80]
        table.add_row(escape(row["id"]), row.get("kind", ""), escape(endpoint),
                      escape(",".join(row.get("groups") or []) or "(admins)"), _state_markup(state),
                      escape(st.get("contract", "")), str(len(st.get("tools", []))),
                      _ago(st.get("last_probe", 0.0)), escape(st.get("last_error", "")))
    if not sources and not local_error:
        table.caption = "no remote sources" + ("" if path.exists() else " (file absent)")
    console.print(table)
    if published:
        console.print(f"service: configuration version {published.get('version')}, loaded "
                      f"{_ago(published.get('loaded_at', 0.0))}")
    elif path.exists():
        console.print("[dim]no running RAGPipeline has published a status for this file[/dim]")
    service_error = published.get("last_error", "")
    if local_error or service_error:
        console.print(f"[red]sources file error[/red]: {escape(local_error or service_error)}")
        if published:
            console.print("[yellow]the running service keeps serving its last good configuration[/yellow]")
        return INVALID_EXIT
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.sources import read_status_file

    path = sources_file(args)
    sources, local_error = _load(path)
    if local_error:
        console.print(f"[red]sources file error[/red]: {escape(local_error)}")
        return INVALID_EXIT
    source = next((s for s in sources if s.id == args.id), None)
    if source is None:
        console.print(f"[red]no source {escape(args.id)!s}[/red]; known: {escape(', '.join(s.id for s in sources))}")
        return INVALID_EXIT
    published = read_status_file(path) or {}
    status = next((row.get("status", {}) for row in published.get("sources", []) if row["id"] == source.id), {})
    table = Table(title=f"source {source.id}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for key, value in source.to_json().items():
        table.add_row(key, escape(json.dumps(value) if not isinstance(value, str) else value))
    cred = (f"environment variable {source.credential_env}" if source.credential_env
            else f"file {source.credential_file}" if source.credential_file
            else f"tenant secret {source.credential_secret}" if source.credential_secret else "none")
    table.add_row("credential", escape(cred) + (" (present)" if source.credential() else
                                                 " (MISSING)" if source.needs_credential else ""))
    table.add_row("state", _state_markup(status.get("state", "unknown")))
    table.add_row("contract", escape(status.get("contract", "")))
    table.add_row("tools", escape(", ".join(status.get("tools", []))))
    table.add_row("last probe", _ago(status.get("last_probe", 0.0)))
    table.add_row("last error", escape(status.get("last_error", "")))
    console.print(table)
    return 0


def request_reload(path: Path, *, wait_s: float = 5.0) -> dict | None:
    """Ask the running service to reload: write a fresh token in the reload request file, which
    it polls, and wait until its status file says it answered that token. The service's status
    once it has (None: no running service answered within `wait_s`)."""
    from services.rag_pipeline.federation.sources import read_status_file, reload_request_path

    before = (read_status_file(path) or {}).get("reloads", -1)
    token = f"{time.time_ns()}-{secrets.token_hex(4)}"
    request = reload_request_path(path)
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(token)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        status = read_status_file(path)
        if status and (status.get("answered_request") == token
                       or ("answered_request" not in status and status.get("reloads", -1) > before)):
            return status
        time.sleep(0.05)
    return None


def cmd_reload(args: argparse.Namespace) -> int:
    from cli.main import console

    path = sources_file(args)
    sources, local_error = _load(path)
    if local_error:
        console.print(f"[red]sources file error[/red]: {escape(local_error)}")
    else:
        console.print(f"{escape(str(path))}: valid, {len(sources)} sources")
    status = request_reload(path, wait_s=args.wait)
    if status is None:
        console.print("[yellow]no running RAGPipeline reloaded it[/yellow] (it also reloads by itself when the "
                      "file changes)")
    elif status.get("last_error"):
        console.print(f"service kept configuration version {status.get('version')}: "
                      f"[red]{escape(status['last_error'])}[/red]")
    else:
        console.print(f"service reloaded: configuration version {status.get('version')}, "
                      f"{len(status.get('sources', []))} sources")
    return INVALID_EXIT if local_error or (status and status.get("last_error")) else 0


# ---------------------------------------------------------------------------- add / edit / remove / enable / disable
def _audit_path(args: argparse.Namespace) -> Path:
    """The audit file the RAGPipeline writes (NUCLEUS_RAG_AUDIT_LOG, else <data dir>/audit.jsonl)."""
    from cli.main import data_dir

    configured = os.environ.get("NUCLEUS_RAG_AUDIT_LOG", "").strip()
    return Path(configured).expanduser().resolve() if configured else data_dir(args) / "audit.jsonl"


def _editor(args: argparse.Namespace):
    """The operator's editor of the sources file: every field, every tenant; the tenant rule of
    the running stack when it has published its tenants."""
    from services.rag_pipeline.federation.admin import SourcesEditor
    from services.rag_pipeline.federation.sources import read_status_file
    from shared.audit import AuditLog

    path = sources_file(args)
    published = read_status_file(path) or {}
    tenants = published.get("stack_tenants")
    return SourcesEditor(path, stack_tenants=tenants if isinstance(tenants, list) else None,
                         audit=AuditLog(_audit_path(args)))


def _operator():
    import getpass

    from services.rag_pipeline.federation.admin import operator_principal

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return operator_principal(user)


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _fields_of(args: argparse.Namespace) -> dict[str, Any]:
    """The sources-file fields given on the command line (only those given)."""
    from shared.errors import InvalidArgument

    out: dict[str, Any] = {}
    for option, key in (("url", "url"), ("kind", "kind"), ("credential_env", "credential_env"),
                        ("credential_file", "credential_file"), ("credential_secret", "credential_secret"),
                        ("credential_header", "credential_header"), ("identity", "identity"),
                        ("timeout_s", "timeout_s"), ("reputation", "reputation"), ("compliance", "compliance"),
                        ("name", "name"), ("description", "description"),
                        ("max_response_bytes", "max_response_bytes"), ("trusted", "trusted"),
                        ("allow_private_network", "allow_private_network")):
        value = getattr(args, option, None)
        if value is not None:
            out[key] = value
    if getattr(args, "command_line", None) is not None:
        try:
            out["command"] = shlex.split(args.command_line)
        except ValueError as err:
            raise InvalidArgument("--command", f"a program and its arguments, shell-quoted ({err})") from None
    if getattr(args, "groups", None) is not None:
        out["groups"] = _split(args.groups)
    if getattr(args, "tenants", None) is not None:
        out["tenants"] = _split(args.tenants)
    if getattr(args, "header_env", None):
        headers: dict[str, str] = {}
        for item in args.header_env:
            header, sep, env = item.partition("=")
            if not sep or not header.strip() or not env.strip():
                raise InvalidArgument("--header-env", f"must be HEADER=ENV_VAR (the value is read from the "
                                      f"environment variable), got {item.split('=')[0]!r}…")
            headers[header.strip()] = env.strip()
        out["header_env"] = headers
    if getattr(args, "disabled", False):
        out["enabled"] = False
    return out


def _after_write(args: argparse.Namespace, message: str) -> int:
    """Print what was written, then make the running service reload it (when one runs)."""
    from cli.main import console

    console.print(message)
    if args.wait <= 0:
        return 0
    status = request_reload(sources_file(args), wait_s=args.wait)
    if status is None:
        console.print("[dim]no running RAGPipeline answered; it reads the file when it starts (and a running one "
                      "picks the change up by itself within a second)[/dim]")
        return 0
    if status.get("last_error"):
        console.print(f"service kept configuration version {status.get('version')}: "
                      f"[red]{escape(status['last_error'])}[/red]")
        return INVALID_EXIT
    console.print(f"service reloaded: configuration version {status.get('version')}, "
                  f"{len(status.get('sources', []))} sources")
    return 0


def _where(source: Any) -> str:
    return escape(source.url or " ".join(source.command or ()))


def cmd_add(args: argparse.Namespace) -> int:
    fields = {"id": args.id, **_fields_of(args)}
    source = _editor(args).add(_operator(), fields, tool="nucleus sources add")
    return _after_write(args, f"added source [bold]{escape(source.id)}[/bold] ({_where(source)}) to "
                              f"{escape(str(sources_file(args)))}")


def cmd_edit(args: argparse.Namespace) -> int:
    source = _editor(args).edit(_operator(), args.id, _fields_of(args), clear=args.clear or [],
                                tool="nucleus sources edit")
    changed = ", ".join(sorted({*_fields_of(args), *(args.clear or [])}))
    return _after_write(args, f"edited source [bold]{escape(source.id)}[/bold]: {escape(changed)}")


def cmd_remove(args: argparse.Namespace) -> int:
    source = _editor(args).remove(_operator(), args.id, tool="nucleus sources remove")
    return _after_write(args, f"removed source [bold]{escape(source.id)}[/bold] ({_where(source)})")


def cmd_enable(args: argparse.Namespace) -> int:
    enabled = args.sources_command == "enable"
    source = _editor(args).set_enabled(_operator(), args.id, enabled, tool=f"nucleus sources {args.sources_command}")
    return _after_write(args, f"{'enabled' if enabled else 'disabled'} source [bold]{escape(source.id)}[/bold]")


# ---------------------------------------------------------------------------- registries
def _registries(args: argparse.Namespace):
    from services.rag_pipeline.federation.registry import load_registries, registries_path

    path = registries_path(sources_file(args))
    return path, load_registries(path)


def cmd_registry_add(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.registry import add_registry, registries_path
    from services.rag_pipeline.federation.sources import SourcesFileError

    path = registries_path(sources_file(args))
    try:
        registry = add_registry(path, args.name, args.url, credential_env=args.credential_env,
                                credential_file=args.credential_file)
    except SourcesFileError as err:
        console.print(f"[red]{escape(str(err))}[/red]")
        return INVALID_EXIT
    token = "" if not registry.needs_credential else (
        f"; token from {escape(registry.credential_source())}" + ("" if registry.credential() else " (MISSING)"))
    console.print(f"registry {escape(registry.name)} = {escape(registry.url)} ({escape(str(path))}){token}")
    return 0


def cmd_registry_list(args: argparse.Namespace) -> int:
    from cli.main import console

    path, registries = _registries(args)
    table = Table(title=f"registries ({escape(str(path))})")
    table.add_column("name")
    table.add_column("url")
    table.add_column("token")
    for r in registries:
        token = r.credential_source() + ("" if not r.needs_credential else
                                         " (present)" if r.credential() else " (MISSING)")
        table.add_row(escape(r.name), escape(r.url), escape(token))
    console.print(table)
    return 0


def cmd_browse(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.registry import RegistryClient

    _, registries = _registries(args)
    if args.registry:
        registries = [r for r in registries if r.name == args.registry]
        if not registries:
            console.print(f"[red]no registry {escape(args.registry)}[/red] (add it with `nucleus sources registry add`)")
            return INVALID_EXIT
    if not registries:
        console.print("no registries configured; add one with `nucleus sources registry add NAME URL`")
        return INVALID_EXIT
    if args.cursor and len(registries) != 1:
        console.print("[red]--cursor: a cursor belongs to one registry; name it with --registry[/red]")
        return INVALID_EXIT
    if not 1 <= args.limit <= 100:
        console.print(f"[red]--limit: must be 1-100 servers per registry, got {args.limit}[/red]")
        return INVALID_EXIT
    result = RegistryClient(timeout_s=args.timeout).browse(registries, search=args.query or "", limit=args.limit,
                                                           cursor=args.cursor or "")
    if args.json:
        console.print_json(json.dumps({
            "servers": [{"registry": s.registry, "name": s.name, "version": s.version, "title": s.title,
                         "description": s.description, "status": s.status, "updatedAt": s.updated_at,
                         "icon": s.icon, "importable": s.importable()[0] is not None,
                         "reason": s.importable()[1]} for s in result.servers],
            "next_cursors": result.next_cursors, "errors": result.errors, "partial": result.partial}))
    else:
        table = Table(title="MCP registry servers" + (" (PARTIAL)" if result.partial else ""))
        for col in ("registry", "name", "version", "title", "status", "updated", "import"):
            table.add_column(col, overflow="fold")
        for s in result.servers:
            remote, why = s.importable()
            table.add_row(escape(s.registry), escape(s.name), escape(s.version), escape(s.title), escape(s.status),
                          escape(s.updated_at), "[green]yes[/green]" if remote else f"[yellow]no[/yellow]: {escape(why)}")
        console.print(table)
        for name, message in result.errors.items():
            console.print(f"[red]registry {escape(name)} failed[/red]: {escape(message)} (its servers are missing)")
        for name, cursor in result.next_cursors.items():
            query = f" {shlex.quote(args.query)}" if args.query else ""
            console.print(f"more in {escape(name)}: next cursor {escape(cursor)} — nucleus sources browse{escape(query)} "
                          f"--registry {escape(name)} --limit {args.limit} --cursor {escape(shlex.quote(cursor))}")
    return UNREACHABLE_EXIT if result.errors and len(result.errors) == len(registries) else 0


def cmd_import(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.registry import RegistryClient, RegistryError, import_server
    from services.rag_pipeline.federation.sources import SourcesFileError

    path, registries = _registries(args)
    registry = next((r for r in registries if r.name == args.registry), None)
    if registry is None:
        console.print(f"[red]no registry {escape(args.registry)}[/red]; known: "
                      f"{escape(', '.join(r.name for r in registries) or 'none')}")
        return INVALID_EXIT
    try:
        server = RegistryClient(timeout_s=args.timeout).find(registry, args.name, version=args.version or "")
        groups = [g for g in (args.groups or "").split(",") if g]
        editor = _editor(args)
        source = import_server(sources_file(args), server, slug=args.slug, groups=groups, kind=args.kind,
                               credential_env=args.credential_env, timeout_s=args.timeout_s,
                               reputation=args.reputation, tenants=_split(args.tenants or ""),
                               audit=editor.audit, principal=_operator(), stack_tenants=editor.stack_tenants)
    except SourcesFileError as err:
        console.print(f"[red]{escape(str(err))}[/red]")
        return INVALID_EXIT
    except RegistryError as err:
        console.print(f"[red]{escape(str(err))}[/red]")
        return UNREACHABLE_EXIT if "cannot be reached" in err.message or "answered" in err.message else INVALID_EXIT
    console.print(f"imported {escape(server.name)} {escape(server.version)} as source [bold]{source.id}[/bold] "
                  f"({escape(source.url or '')}), groups {escape(','.join(sorted(source.groups)) or '(admins only)')}")
    headers = server.needs_secret_header()
    if headers and not args.credential_env:
        console.print(f"[yellow]the server declares required header(s) {escape(', '.join(headers))}[/yellow]: "
                      "set --credential-env (a Bearer credential) and re-import, or edit the sources file")
    if args.wait <= 0:
        return 0
    status = request_reload(sources_file(args), wait_s=args.wait)
    if status is None:
        console.print("[dim]no running RAGPipeline: it will be probed when the service starts[/dim]")
        return 0
    end = time.monotonic() + args.wait
    row: dict = {}
    from services.rag_pipeline.federation.sources import read_status_file

    while time.monotonic() < end:
        published = read_status_file(sources_file(args)) or {}
        row = next((r.get("status", {}) for r in published.get("sources", []) if r["id"] == source.id), {})
        if row.get("last_probe"):
            break
        time.sleep(0.2)
    if row.get("last_probe"):
        console.print(f"probe: {_state_markup(row.get('state', 'unknown'))}, contract "
                      f"{escape(row.get('contract', '') or '-')}, {len(row.get('tools', []))} tools"
                      + (f", {escape(row['last_error'])}" if row.get("last_error") else ""))
    else:
        console.print("[dim]probe still running; see `nucleus sources list`[/dim]")
    return 0


# ---------------------------------------------------------------------------- parser
def _field_options(parser: argparse.ArgumentParser, *, adding: bool) -> None:
    """The sources-file fields as options (docs/FEDERATION.md, "The sources file"); an edit
    changes only the options given."""
    where = parser.add_mutually_exclusive_group(required=adding)
    where.add_argument("--url", help="streamable HTTP endpoint (http:// or https://)")
    where.add_argument("--command", dest="command_line", help="stdio server: the program and its arguments, shell-quoted")
    parser.add_argument("--kind", choices=("rag", "tools"))
    parser.add_argument("--groups", help="comma-separated groups allowed to use it ('' = admins only)")
    parser.add_argument("--tenants", help="comma-separated tenants allowed to use it (omitted: the stack's one tenant)")
    cred = parser.add_mutually_exclusive_group()
    cred.add_argument("--credential-env", help="environment variable holding its credential")
    cred.add_argument("--credential-file", help="file holding its credential (relative to the sources file)")
    cred.add_argument("--credential-secret", help="secret name in <sources dir>/secrets/<tenant>/ (one tenant)")
    parser.add_argument("--credential-header", help="send the credential in this header instead of "
                        "Authorization: Bearer")
    parser.add_argument("--header-env", action="append", metavar="HEADER=ENV_VAR",
                        help="a header whose value is read from an environment variable (repeatable)")
    parser.add_argument("--identity", choices=("username", "headers", "none"),
                        help="how the verified user travels to it")
    parser.add_argument("--trusted", action=argparse.BooleanOptionalAction, default=None,
                        help="the operator trusts it with platform identity headers")
    parser.add_argument("--allow-private-network", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--timeout-s", type=float, help="deadline of each call, 0.05-120 s")
    parser.add_argument("--reputation", type=float, help="Reputation prior of its hits, 0-1")
    parser.add_argument("--compliance", help="compliance level shown to operators")
    parser.add_argument("--name")
    parser.add_argument("--description")
    parser.add_argument("--max-response-bytes", type=int)
    if adding:
        parser.add_argument("--disabled", action="store_true", help="add it disabled")
    parser.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the service's reload (0: don't)")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sources", help="federation: remote MCP sources, their status, MCP registries")
    parser.add_argument("--file", help="the sources file (default $NUCLEUS_SOURCES_FILE or <data dir>/sources.json)")
    cmds = parser.add_subparsers(dest="sources_command", required=True)

    lst = cmds.add_parser("list", help="every source with its state and the last reload error")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_list)

    show = cmds.add_parser("show", help="one source in detail")
    show.add_argument("id")
    show.set_defaults(func=cmd_show)

    reload = cmds.add_parser("reload", help="check the file and make the running RAGPipeline reload it")
    reload.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the service (default 5)")
    reload.set_defaults(func=cmd_reload)

    add = cmds.add_parser("add", help="add a source to the file (validated, atomic, audited), then reload")
    add.add_argument("id", help="the source id and tool prefix ([a-z0-9_]{1,32})")
    _field_options(add, adding=True)
    add.set_defaults(func=cmd_add)

    edit = cmds.add_parser("edit", help="change only the given fields of a source, then reload")
    edit.add_argument("id")
    _field_options(edit, adding=False)
    edit.add_argument("--clear", action="append", metavar="FIELD",
                      help="reset a field to its default (repeatable), e.g. --clear credential_env")
    edit.set_defaults(func=cmd_edit)

    for name, text, func in (("remove", "remove a source from the file, then reload", cmd_remove),
                             ("enable", "enable a source, then reload", cmd_enable),
                             ("disable", "disable a source (kept in the file, used by nobody), then reload",
                              cmd_enable)):
        one = cmds.add_parser(name, help=text)
        one.add_argument("id")
        one.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the service's reload (0: don't)")
        one.set_defaults(func=func)

    registry = cmds.add_parser("registry", help="the MCP registries to browse and import from")
    reg_cmds = registry.add_subparsers(dest="registry_command", required=True)
    add = reg_cmds.add_parser("add", help="add (or replace) a registry")
    add.add_argument("name")
    add.add_argument("url", help="the registry's base URL, e.g. https://registry.modelcontextprotocol.io")
    token = add.add_mutually_exclusive_group()
    token.add_argument("--credential-env", help="environment variable holding its token (sent as Bearer)")
    token.add_argument("--credential-file", help="file holding its token (relative to the registries file)")
    add.set_defaults(func=cmd_registry_add)
    reg_cmds.add_parser("list", help="the configured registries").set_defaults(func=cmd_registry_list)

    browse = cmds.add_parser("browse", help="servers of the registries (official MCP Registry API)")
    browse.add_argument("query", nargs="?", default="")
    browse.add_argument("--registry", help="only this registry")
    browse.add_argument("--limit", type=int, default=30, help="servers per registry, 1-100 (default 30)")
    browse.add_argument("--cursor", help="continue one registry's listing from the cursor a previous browse printed")
    browse.add_argument("--timeout", type=float, default=10.0)
    browse.add_argument("--json", action="store_true")
    browse.set_defaults(func=cmd_browse)

    imp = cmds.add_parser("import", help="add a registry server (its streamable-http remote) as a source")
    imp.add_argument("name", help="the server's name in the registry, e.g. io.example/search")
    imp.add_argument("--registry", required=True)
    imp.add_argument("--version", help="pin this version of the server (default: its latest)")
    imp.add_argument("--slug", required=True, help="the source id and tool prefix ([a-z0-9_]{1,32})")
    imp.add_argument("--groups", default="", help="comma-separated groups allowed to use it (default: admins only)")
    imp.add_argument("--tenants", default="", help="comma-separated tenants allowed to use it (default: the "
                     "stack's one tenant)")
    imp.add_argument("--kind", choices=("rag", "tools"), default="rag")
    imp.add_argument("--credential-env", help="environment variable holding its Bearer credential")
    imp.add_argument("--timeout-s", type=float, default=5.0)
    imp.add_argument("--reputation", type=float, default=0.5)
    imp.add_argument("--timeout", type=float, default=10.0, help="registry request timeout")
    imp.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the service's probe (0: don't)")
    imp.set_defaults(func=cmd_import)


__all__ = ["register", "source_lines", "sources_file"]
