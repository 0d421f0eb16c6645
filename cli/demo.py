"""`nucleus demo`: `up --detach`, ingest demo/corpus into tenant "demo", one sample search, and
a closing line of commands that reach this stack."""
from __future__ import annotations

import argparse
import shlex

from cli.ingest import cmd_ingest
from cli.lifecycle import cmd_up
from cli.search import cmd_search
from cli.stack import DEMO_CORPUS, ROOT, console
from shared.settings import cli_settings


def cmd_demo(args: argparse.Namespace) -> int:
    args.detach = True
    if cmd_up(args) != 0:
        return 1
    args.path, args.tenant, args.persona, args.batch = str(DEMO_CORPUS), "demo", "", 16
    args.no_manifest = True
    cmd_ingest(args)
    queries = (ROOT / "demo" / "sample_queries.txt")
    sample = queries.read_text().splitlines()[0].strip() if queries.exists() else "latest firmware update procedure"
    args.query, args.top_k, args.profile, args.expand, args.rerank, args.json = sample, 5, "", False, False, False
    args.as_operator = cli_settings(args).local_tenant != "demo"   # the local principal's view
    cmd_search(args)
    console.print(demo_hint(args.data_dir))
    return 0


def demo_hint(data_dir: str | None) -> str:
    """`nucleus demo`'s closing line: commands that reach this stack, on --data-dir if it has one."""
    where = f" --data-dir {shlex.quote(data_dir)}" if data_dir else ""      # a stack elsewhere
    stop = f".venv/bin/nucleus{where} down" if where else "make down"
    return (f"\nThe stack keeps running. Try: [bold].venv/bin/nucleus{where} search \"travel expense limits\" "
            f"--tenant demo[/bold] — stop it with [bold]{stop}[/bold].")


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="start the stack, ingest the demo corpus, run a sample search")
    demo.add_argument("--ephemeral-ports", action="store_true")
    demo.add_argument("--timeout", type=float, default=240.0)
    demo.add_argument("--mode", choices=("single", "split"), help="as for `nucleus up`")
    demo.set_defaults(func=cmd_demo)
