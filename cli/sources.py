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
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from cli.sources_edit import cmd_add, cmd_edit, cmd_enable, cmd_remove, field_options
from cli.sources_file import INVALID_EXIT, ago, load, read_status_file, request_reload, sources_file, state_markup
from cli.sources_registry import cmd_browse, cmd_import, cmd_registry_add, cmd_registry_list
from cli.stack import console


# ---------------------------------------------------------------------------- list / show / reload
def cmd_list(args: argparse.Namespace) -> int:
    path = sources_file(args)
    sources, local_error = load(path)
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
                      escape(",".join(row.get("groups") or []) or "(admins)"), state_markup(state),
                      escape(st.get("contract", "")), str(len(st.get("tools", []))),
                      ago(st.get("last_probe", 0.0)), escape(st.get("last_error", "")))
    if not sources and not local_error:
        table.caption = "no remote sources" + ("" if path.exists() else " (file absent)")
    console.print(table)
    if published:
        console.print(f"service: configuration version {published.get('version')}, loaded "
                      f"{ago(published.get('loaded_at', 0.0))}")
    elif path.exists():
        console.print("[dim]no running RAGPipeline has published a status for this file[/dim]")
    service_error = published.get("last_error", "")
    if local_error or service_error:
        console.print(f"[red]sources file error[/red]: {escape(local_error or service_error)}")
        if published:
            console.print("[yellow]the running service keeps serving its last good configuration[/yellow]")
        return INVALID_EXIT
    return 0


def _load_reporting(args: argparse.Namespace) -> tuple[Path, list[Any], str]:
    """The sources file, its sources and its error ("" when valid), an error printed."""
    path = sources_file(args)
    sources, local_error = load(path)
    if local_error:
        console.print(f"[red]sources file error[/red]: {escape(local_error)}")
    return path, sources, local_error


def cmd_show(args: argparse.Namespace) -> int:
    path, sources, local_error = _load_reporting(args)
    if local_error:
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
    table.add_row("state", state_markup(status.get("state", "unknown")))
    table.add_row("contract", escape(status.get("contract", "")))
    table.add_row("tools", escape(", ".join(status.get("tools", []))))
    table.add_row("last probe", ago(status.get("last_probe", 0.0)))
    table.add_row("last error", escape(status.get("last_error", "")))
    if status.get("vectors"):                  # a trusted remote Nucleus: its model fingerprint compared
        table.add_row("vectors", escape(status["vectors"]))
    console.print(table)
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    path, sources, local_error = _load_reporting(args)
    if not local_error:
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

    add = cmds.add_parser("add", help="add a source to the file (validated, atomic, audited), then reload")
    add.add_argument("id", help="the source id and tool prefix ([a-z0-9_]{1,32})")
    field_options(add, adding=True)
    add.set_defaults(func=cmd_add)

    edit = cmds.add_parser("edit", help="change only the given fields of a source, then reload")
    edit.add_argument("id")
    field_options(edit, adding=False)
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


__all__ = ["register"]
