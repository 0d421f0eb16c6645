"""`nucleus attack` / `python -m benchmarks.attacks`: run the attack suite and report it.

    nucleus attack                          # all families, a table per family; exit 1 on any failure
    nucleus attack --json attack.json       # also write the figures
    nucleus attack --families ab --stack-dir attack-stack   # some families, keep the stack's logs
    nucleus --data-dir D attack --use-running   # the secure stack in D, started by benchmarks.secure_stack
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

# benchmarks.attacks.run (the suite, its stack and clients) is imported when the command runs: every
# other `nucleus` command starts without it.


def _families(text: str) -> str:
    from benchmarks.attacks.run import FAMILIES

    chosen = "".join(dict.fromkeys(text.replace(",", "").strip().lower()))
    if not chosen or set(chosen) - set(FAMILIES):
        raise argparse.ArgumentTypeError(f"families are letters of {''.join(FAMILIES)}, got {text!r}")
    return chosen


def add_arguments(p: argparse.ArgumentParser, *, data_dir: bool = True) -> None:
    from benchmarks.stack import add_running_arguments

    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures (per family, per check) as JSON")
    p.add_argument("--families", type=_families, default="abcdfg",
                   help="which families to run: a = ports, b = principal matrix, c = low findings, "
                        "d = hostile documents and malformed links, f = federation, g = web console "
                        "(default abcdfg)")
    p.add_argument("--stack-dir", type=Path, help="data directory of the stack it starts, kept afterwards "
                                                   "(logs, audit trail); default a temporary one, removed")
    p.add_argument("--start-timeout", type=float, default=240.0, help="seconds for the stack to start (default 240)")
    add_running_arguments(p, data_dir=data_dir)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "attack", help="attack a freshly started secure stack (every port, a principal matrix, the low findings)",
        description="Start a stack with authentication on every port in a temporary data directory (or, with "
                    "--use-running, take the secure stack running in the data directory), attack it as a process "
                    "on the same host would, and print calls, refusals, leaks and failures per family. Exits 1 if "
                    "anything leaked or an expected refusal did not happen.")
    add_arguments(p, data_dir=False)
    p.set_defaults(func=cmd_attack)


def cmd_attack(args: argparse.Namespace) -> int:
    from benchmarks.attacks.run import Options, run_suite
    from benchmarks.stack import running_data_dir

    options = Options(families=args.families, timeout_s=args.start_timeout,
                      stack_dir=args.stack_dir.resolve() if args.stack_dir else None,
                      running_data_dir=running_data_dir(args) if args.use_running else None)
    report = run_suite(options, say=lambda line: print(line, flush=True))
    print()
    print("\n".join(report.lines()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.figures(), indent=2))
        print(f"figures written to {args.json}")
    return report.exit_code()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attacks", description=(
        "The attack suite: a secure stack attacked port by port, principal by principal (docs/SECURITY.md)."))
    add_arguments(parser)
    return cmd_attack(parser.parse_args(argv))
