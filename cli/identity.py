"""`nucleus identity`: the stack's service credentials (see shared/auth/service_identity.py).

    nucleus identity init              create the key pairs that are missing, and the trust bundle
    nucleus identity list              key ids, owners and creation times (never key material)
    nucleus identity rotate NAME       a new key for NAME; its old key stays trusted until revoked
    nucleus identity revoke KID        remove a public key from the trust bundle (services re-read
                                       it within a second; tokens signed with it are refused)
    nucleus identity token SERVICE [--tenant T]
                                       print an operator token for SERVICE (e.g. for an MCP client
                                       of the KnowledgeStore's /mcp; valid for an hour)

The directory is <data dir>/identity (what `nucleus up` uses when authentication is required),
or $NUCLEUS_IDENTITY_DIR, or --dir.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.auth.service_identity import (
    PRINCIPALS,
    SERVICES,
    ServiceSigner,
    ensure_identities,
    list_keys,
    revoke,
    rotate,
)
from shared.identity import OPERATOR
from shared.settings import cli_settings


def identity_dir(args: argparse.Namespace) -> Path:
    """The stack's identity directory: NUCLEUS_IDENTITY_DIR, else <data dir>/identity."""
    data = getattr(args, "data_dir", None)
    return cli_settings(args).resolved_identity_dir(Path(data).resolve() if data else None)


def _dir(args: argparse.Namespace) -> Path:
    return Path(args.dir).resolve() if args.dir else identity_dir(args)


def cmd_identity(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console()
    directory = _dir(args)
    if args.action == "init":
        ensure_identities(directory)
        console.print(f"identities ready in {directory}")
    elif args.action == "rotate":
        console.print(f"new key {rotate(directory, args.name)} for {args.name}; revoke the old one when every "
                      "process uses the new key")
    elif args.action == "revoke":
        revoke(directory, args.kid)
        console.print(f"revoked {args.kid}")
    elif args.action == "token":
        print(ServiceSigner.load(directory, OPERATOR).token(args.service, tenant=args.tenant))
    else:
        table = Table(title=f"trust bundle {directory}")
        for col in ("kid", "principal", "created"):
            table.add_column(col)
        for k in list_keys(directory):
            table.add_row(k["kid"], k["principal"], time.strftime("%Y-%m-%d %H:%M", time.gmtime(k["created_unix"])))
        console.print(table)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("identity", help="the stack's service credentials: init, list, rotate, revoke, token")
    p.add_argument("--dir", help="identity directory (default <data dir>/identity or $NUCLEUS_IDENTITY_DIR)")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("init", help="create missing key pairs and the trust bundle")
    actions.add_parser("list", help="list trusted keys")
    rot = actions.add_parser("rotate", help="new key for one principal (old key stays trusted until revoked)")
    rot.add_argument("name", choices=PRINCIPALS)
    rev = actions.add_parser("revoke", help="remove a key from the trust bundle")
    rev.add_argument("kid")
    tok = actions.add_parser("token", help="print an operator token for one service")
    tok.add_argument("service", choices=SERVICES)
    tok.add_argument("--tenant", default="", help="the tenant the token acts in (KnowledgeStore MCP tools)")
    p.set_defaults(func=cmd_identity)
