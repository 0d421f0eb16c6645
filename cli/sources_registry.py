"""`nucleus sources registry add | list`, `browse` and `import`: the MCP registries beside the
sources file (registries.json), their servers, and importing one as a source.
"""
from __future__ import annotations

import argparse
import json
import shlex
import time

from rich.markup import escape
from rich.table import Table

from cli.sources_edit import cli_operator, sources_editor, split_list
from cli.sources_file import (INVALID_EXIT, UNREACHABLE_EXIT, SourcesFileError, read_status_file, request_reload,
                              sources_file, state_markup)
from cli.stack import console
from services.rag_pipeline.federation.registry import (RegistryClient, RegistryError, add_registry, import_server,
                                                       load_registries, registries_path)


def _registries(args: argparse.Namespace):
    path = registries_path(sources_file(args))
    return path, load_registries(path)


def cmd_registry_add(args: argparse.Namespace) -> int:
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
    _, registries = _registries(args)
    if args.registry:
        registries = [r for r in registries if r.name == args.registry]
        if not registries:
            console.print(f"[red]no registry {escape(args.registry)}[/red] "
                          "(add it with `nucleus sources registry add`)")
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
                          escape(s.updated_at),
                          "[green]yes[/green]" if remote else f"[yellow]no[/yellow]: {escape(why)}")
        console.print(table)
        for name, message in result.errors.items():
            console.print(f"[red]registry {escape(name)} failed[/red]: {escape(message)} (its servers are missing)")
        for name, cursor in result.next_cursors.items():
            query = f" {shlex.quote(args.query)}" if args.query else ""
            console.print(f"more in {escape(name)}: next cursor {escape(cursor)} — "
                          f"nucleus sources browse{escape(query)} "
                          f"--registry {escape(name)} --limit {args.limit} --cursor {escape(shlex.quote(cursor))}")
    return UNREACHABLE_EXIT if result.errors and len(result.errors) == len(registries) else 0


def cmd_import(args: argparse.Namespace) -> int:
    path, registries = _registries(args)
    registry = next((r for r in registries if r.name == args.registry), None)
    if registry is None:
        console.print(f"[red]no registry {escape(args.registry)}[/red]; known: "
                      f"{escape(', '.join(r.name for r in registries) or 'none')}")
        return INVALID_EXIT
    try:
        server = RegistryClient(timeout_s=args.timeout).find(registry, args.name, version=args.version or "")
        groups = [g for g in (args.groups or "").split(",") if g]
        edit = sources_editor(args)
        source = import_server(sources_file(args), server, slug=args.slug, groups=groups, kind=args.kind,
                               credential_env=args.credential_env, timeout_s=args.timeout_s,
                               reputation=args.reputation, tenants=split_list(args.tenants or ""),
                               audit=edit.audit, principal=cli_operator(), stack_tenants=edit.stack_tenants)
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
    while time.monotonic() < end:
        published = read_status_file(sources_file(args)) or {}
        row = next((r.get("status", {}) for r in published.get("sources", []) if r["id"] == source.id), {})
        if row.get("last_probe"):
            break
        time.sleep(0.2)
    if row.get("last_probe"):
        console.print(f"probe: {state_markup(row.get('state', 'unknown'))}, contract "
                      f"{escape(row.get('contract', '') or '-')}, {len(row.get('tools', []))} tools"
                      + (f", {escape(row['last_error'])}" if row.get("last_error") else ""))
    else:
        console.print("[dim]probe still running; see `nucleus sources list`[/dim]")
    return 0
