"""`nucleus up` and `nucleus down`: start the three services under the local supervisor
(cli/supervisor.py), in the foreground or detached, and stop a detached stack."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from rich.table import Table

from cli.stack import ROOT, console, data_dir, err_console
from cli.status import supervisor_alive
from cli.supervisor import Supervisor, default_mode
from shared.healthcheck import health_ok
from shared.settings import cli_settings


def cmd_up(args: argparse.Namespace) -> int:
    ddir = data_dir(args)
    state_file = ddir / "run" / "stack.json"
    if state_file.exists():
        state = json.loads(state_file.read_text())
        failed = [n for n, s in state.get("supervision", {}).items() if s.get("state") == "failed"]
        if supervisor_alive(state) and failed:     # the supervisor gives failed services another try
            os.kill(state["supervisor_pid"], signal.SIGHUP)
            console.print(f"[yellow]stack running; restarting the failed {', '.join(failed)}[/yellow] "
                          "(`nucleus status` shows how it goes)")
            return 0
        if all(health_ok(s["grpc"], ca_file=state.get("tls_ca_file") or None)
               for s in state["services"].values()):
            console.print("[green]stack already running[/green]")
            print_addresses(state["services"])
            return 0
        if supervisor_alive(state):
            console.print("[yellow]stack running, some services are restarting[/yellow] (`nucleus status`)")
            return 0
        state_file.unlink()
    if args.detach:
        ddir.mkdir(parents=True, exist_ok=True)
        (ddir / "run").mkdir(exist_ok=True)
        log = open(ddir / "run" / "supervisor.log", "ab")
        cmd = [sys.executable, "-m", "cli.supervisor", "--data-dir", str(ddir), "--mode", _mode(args)]
        if args.ephemeral_ports:
            cmd.append("--ephemeral-ports")
        proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=str(ROOT))
        with console.status("starting LlmOrchestration, KnowledgeStore, RAGPipeline (loading the model)…"):
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    err_console.print(f"[red]stack failed to start[/red]; see {ddir / 'run' / 'supervisor.log'}")
                    return 1
                if state_file.exists():
                    break
                time.sleep(0.2)
            else:
                err_console.print("[red]timed out waiting for the stack[/red]")
                return 1
        state = json.loads(state_file.read_text())
        console.print("[green]stack healthy[/green] (supervisor pid %d; stop with `nucleus down`)" % proc.pid)
        print_addresses(state["services"])
        return 0
    supervisor = Supervisor(ddir, ephemeral_ports=args.ephemeral_ports, mode=_mode(args))
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGHUP, lambda *_: setattr(supervisor, "retry_requested", True))   # another try
    with console.status("starting services…"):
        addresses = supervisor.start()
    console.print("[green]stack healthy[/green] — Ctrl-C stops it")
    print_addresses(addresses)
    supervisor.monitor(stop)
    supervisor.stop()
    return 0


def _mode(args: argparse.Namespace) -> str:
    """`--mode`, else $NUCLEUS_MODE, else the default deployment mode (cli/supervisor.py)."""
    return getattr(args, "mode", None) or default_mode(cli_settings(args))


def print_addresses(services: dict) -> None:
    table = Table(title="Nucleus RAG services")
    for col in ("service", "gRPC", "MCP (streamable HTTP)", "pid"):
        table.add_column(col)
    for name, addr in services.items():
        table.add_row(name, addr["grpc"], addr.get("mcp", ""), str(addr.get("pid", "")))
    console.print(table)


def cmd_down(args: argparse.Namespace) -> int:
    state_file = data_dir(args) / "run" / "stack.json"
    if not state_file.exists():
        console.print("no stack running")
        return 0
    state = json.loads(state_file.read_text())
    pid = state["supervisor_pid"]
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state_file.unlink(missing_ok=True)
        console.print("stack was not running (stale state removed)")
        return 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and state_file.exists():
        time.sleep(0.2)
    console.print("stack stopped" if not state_file.exists() else "[yellow]stack still stopping[/yellow]")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser("up", help="start the three services and wait until healthy")
    up.add_argument("--detach", action="store_true", help="run in the background (stop with `nucleus down`)")
    up.add_argument("--ephemeral-ports", action="store_true", help="bind free ports instead of the defaults")
    up.add_argument("--timeout", type=float, default=240.0)
    up.add_argument("--mode", choices=("single", "split"),
                    help="single: the three services in one process; split: a process each "
                         "(default: $NUCLEUS_MODE, else single)")
    up.set_defaults(func=cmd_up)

    sub.add_parser("down", help="stop a detached stack").set_defaults(func=cmd_down)
