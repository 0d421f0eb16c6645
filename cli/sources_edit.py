"""`nucleus sources add | edit | remove | enable | disable`: the operator's edits of the sources
file (every field, every tenant): validated as a reload validates, written atomically under the
file's lock, one audit line each (who, what, which source, the field names — never a value),
then the running service is asked to reload.
"""
from __future__ import annotations

import argparse
import getpass
import shlex
from pathlib import Path
from typing import Any

from rich.markup import escape

from cli.sources_file import INVALID_EXIT, read_status_file, request_reload, sources_file
from cli.stack import console, data_dir
from shared.audit import AuditLog
from shared.errors import InvalidArgument
from shared.settings import RagPipelineSettings


def _audit_path(args: argparse.Namespace) -> Path:
    """The audit file the RAGPipeline writes (NUCLEUS_RAG_AUDIT_LOG, else <data dir>/audit.jsonl)."""
    rag = RagPipelineSettings()            # the pipeline's own file, as it reads it
    if "audit_log" in rag.model_fields_set:
        return rag.audit_log.expanduser().resolve()
    return data_dir(args) / "audit.jsonl"


def sources_editor(args: argparse.Namespace):
    """The operator's editor of the sources file: every field, every tenant; the tenant rule of
    the running stack when it has published its tenants."""
    from services.rag_pipeline.federation.admin import SourcesEditor   # here: it loads the MCP SDK

    path = sources_file(args)
    published = read_status_file(path) or {}
    tenants = published.get("stack_tenants")
    return SourcesEditor(path, stack_tenants=tenants if isinstance(tenants, list) else None,
                         audit=AuditLog(_audit_path(args)))


def cli_operator():
    from services.rag_pipeline.federation.admin import operator_principal

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return operator_principal(user)


def split_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _fields_of(args: argparse.Namespace) -> dict[str, Any]:
    """The sources-file fields given on the command line (only those given)."""
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
        out["groups"] = split_list(args.groups)
    if getattr(args, "tenants", None) is not None:
        out["tenants"] = split_list(args.tenants)
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
    source = sources_editor(args).add(cli_operator(), fields, tool="nucleus sources add")
    return _after_write(args, f"added source [bold]{escape(source.id)}[/bold] ({_where(source)}) to "
                              f"{escape(str(sources_file(args)))}")


def cmd_edit(args: argparse.Namespace) -> int:
    source = sources_editor(args).edit(cli_operator(), args.id, _fields_of(args), clear=args.clear or [],
                                tool="nucleus sources edit")
    changed = ", ".join(sorted({*_fields_of(args), *(args.clear or [])}))
    return _after_write(args, f"edited source [bold]{escape(source.id)}[/bold]: {escape(changed)}")


def cmd_remove(args: argparse.Namespace) -> int:
    source = sources_editor(args).remove(cli_operator(), args.id, tool="nucleus sources remove")
    return _after_write(args, f"removed source [bold]{escape(source.id)}[/bold] ({_where(source)})")


def cmd_enable(args: argparse.Namespace) -> int:
    enabled = args.sources_command == "enable"
    source = sources_editor(args).set_enabled(cli_operator(), args.id, enabled,
                                              tool=f"nucleus sources {args.sources_command}")
    return _after_write(args, f"{'enabled' if enabled else 'disabled'} source [bold]{escape(source.id)}[/bold]")


def field_options(parser: argparse.ArgumentParser, *, adding: bool) -> None:
    """The sources-file fields as options (docs/FEDERATION.md, "The sources file"); an edit
    changes only the options given."""
    where = parser.add_mutually_exclusive_group(required=adding)
    where.add_argument("--url", help="streamable HTTP endpoint (http:// or https://)")
    where.add_argument("--command", dest="command_line",
                       help="stdio server: the program and its arguments, shell-quoted")
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
