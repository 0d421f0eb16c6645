"""`nucleus sources ...`: the federation's sources file, its live status, and MCP registries.

    nucleus sources list                    every source with its state (from the running service)
    nucleus sources show ID                 one source: endpoint, groups, contract, tools, last error
    nucleus sources reload                  check the file and make the running RAGPipeline reload it
    nucleus sources registry add NAME URL   remember an MCP registry (registries.json beside sources.json)
    nucleus sources registry list
    nucleus sources browse [QUERY]          servers of every registry (partial when one fails)
    nucleus sources import NAME --registry R --slug S [--groups g1,g2]

The file is `--file`, else $NUCLEUS_SOURCES_FILE, else <data dir>/sources.json. The running
RAGPipeline publishes its view (version, last reload error, each source's probe) in
`<sources file>.status.json`; `reload` touches `<sources file>.reload`, which it polls.
Exit codes: 0 ok; 2 the file (or an argument) is invalid; 3 no registry answered / not found.
"""
from __future__ import annotations

import argparse
import json
import os
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


def source_lines(path: Path) -> list[str]:
    """Short lines for `nucleus status`: the sources and the last reload error (rich markup)."""
    from services.rag_pipeline.federation.sources import read_status_file

    published = read_status_file(path)
    sources, local_error = _load(path)
    if not sources and not published and not local_error:
        return [f"[dim]federation: no remote sources ({escape(str(path))} absent)[/dim]"]
    lines = []
    rows = (published or {}).get("sources") or [s.to_json() for s in sources]
    counts: dict[str, int] = {}
    for row in rows:
        state = (row.get("status") or {}).get("state", "unknown")
        counts[state] = counts.get(state, 0) + 1
    summary = ", ".join(f"{n} {escape(s)}" for s, n in sorted(counts.items())) or "none"
    lines.append(f"federation: {len(rows)} remote sources ({summary}); file {escape(str(path))}")
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
            else f"file {source.credential_file}" if source.credential_file else "none")
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
    """Touch the reload request file; the service's status once it has reloaded (None: no
    running service answered within `wait_s`)."""
    from services.rag_pipeline.federation.sources import read_status_file, reload_request_path

    before = (read_status_file(path) or {}).get("reloads", -1)
    request = reload_request_path(path)
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(str(time.time_ns()))
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        status = read_status_file(path)
        if status and status.get("reloads", -1) > before:
            return status
        time.sleep(0.1)
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


# ---------------------------------------------------------------------------- registries
def _registries(args: argparse.Namespace):
    from services.rag_pipeline.federation.registry import load_registries, registries_path

    path = registries_path(sources_file(args))
    return path, load_registries(path)


def cmd_registry_add(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.registry import add_registry, registries_path

    path = registries_path(sources_file(args))
    registry = add_registry(path, args.name, args.url)
    console.print(f"registry {escape(registry.name)} = {escape(registry.url)} ({escape(str(path))})")
    return 0


def cmd_registry_list(args: argparse.Namespace) -> int:
    from cli.main import console

    path, registries = _registries(args)
    table = Table(title=f"registries ({escape(str(path))})")
    table.add_column("name")
    table.add_column("url")
    for r in registries:
        table.add_row(escape(r.name), escape(r.url))
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
    result = RegistryClient(timeout_s=args.timeout).browse(registries, search=args.query or "", limit=args.limit)
    if args.json:
        console.print_json(json.dumps({
            "servers": [{"registry": s.registry, "name": s.name, "version": s.version, "title": s.title,
                         "description": s.description, "status": s.status, "updatedAt": s.updated_at,
                         "icon": s.icon, "importable": s.importable()[0] is not None,
                         "reason": s.importable()[1]} for s in result.servers],
            "errors": result.errors, "partial": result.partial}))
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
    return UNREACHABLE_EXIT if result.errors and len(result.errors) == len(registries) else 0


def cmd_import(args: argparse.Namespace) -> int:
    from cli.main import console
    from services.rag_pipeline.federation.registry import RegistryClient, RegistryError, import_server

    path, registries = _registries(args)
    registry = next((r for r in registries if r.name == args.registry), None)
    if registry is None:
        console.print(f"[red]no registry {escape(args.registry)}[/red]; known: "
                      f"{escape(', '.join(r.name for r in registries) or 'none')}")
        return INVALID_EXIT
    try:
        server = RegistryClient(timeout_s=args.timeout).find(registry, args.name)
        groups = [g for g in (args.groups or "").split(",") if g]
        source = import_server(sources_file(args), server, slug=args.slug, groups=groups, kind=args.kind,
                               credential_env=args.credential_env, timeout_s=args.timeout_s,
                               reputation=args.reputation)
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

    registry = cmds.add_parser("registry", help="the MCP registries to browse and import from")
    reg_cmds = registry.add_subparsers(dest="registry_command", required=True)
    add = reg_cmds.add_parser("add", help="add (or replace) a registry")
    add.add_argument("name")
    add.add_argument("url", help="the registry's base URL, e.g. https://registry.modelcontextprotocol.io")
    add.set_defaults(func=cmd_registry_add)
    reg_cmds.add_parser("list", help="the configured registries").set_defaults(func=cmd_registry_list)

    browse = cmds.add_parser("browse", help="servers of the registries (official MCP Registry API)")
    browse.add_argument("query", nargs="?", default="")
    browse.add_argument("--registry", help="only this registry")
    browse.add_argument("--limit", type=int, default=30, help="servers per registry (default 30)")
    browse.add_argument("--timeout", type=float, default=10.0)
    browse.add_argument("--json", action="store_true")
    browse.set_defaults(func=cmd_browse)

    imp = cmds.add_parser("import", help="add a registry server (its streamable-http remote) as a source")
    imp.add_argument("name", help="the server's name in the registry, e.g. io.example/search")
    imp.add_argument("--registry", required=True)
    imp.add_argument("--slug", required=True, help="the source id and tool prefix ([a-z0-9_]{1,32})")
    imp.add_argument("--groups", default="", help="comma-separated groups allowed to use it (default: admins only)")
    imp.add_argument("--kind", choices=("rag", "tools"), default="rag")
    imp.add_argument("--credential-env", help="environment variable holding its Bearer credential")
    imp.add_argument("--timeout-s", type=float, default=5.0)
    imp.add_argument("--reputation", type=float, default=0.5)
    imp.add_argument("--timeout", type=float, default=10.0, help="registry request timeout")
    imp.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the service's probe (0: don't)")
    imp.set_defaults(func=cmd_import)


__all__ = ["register", "source_lines", "sources_file"]
