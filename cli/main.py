"""`nucleus`: the operator CLI.

    nucleus up [--detach] [--mode single|split]   start the three services (local supervisor; one
                                     process or one each), wait until healthy
    nucleus down                     stop a detached stack
    nucleus status                   health, supervisor state and addresses of the running stack, the
                                     KnowledgeStore's storage condition, tenant stats
    nucleus check --tenant T         full consistency check of a tenant, repairing derived rows
    nucleus ingest PATH --tenant T   ingest a file or folder of documents (PDF, Office, HTML, Markdown,
                                     text, JSONL): only new or changed files, a reason per rejected
                                     file; --sync removes gone files' artifacts, --watch keeps in sync
    nucleus search "q" --tenant T    ranked results with the four scores, answered as the local principal
                                     (auth off; --as-operator: every document) and saying so
    nucleus demo                     up --detach, ingest demo/corpus into tenant "demo", sample search
    nucleus chat [--persona P]       a persona agent: the stack's chat model (RAGPipeline.Chat) with the RAG tools
    nucleus ask "question"           one answer of that agent (--json for scripts)
    nucleus topics [list|evolution|recent|map]   topics of your documents (map --png FILE)
    nucleus persona put|get|list     persona agents' settings (system prompt, tools, sources, model)
    nucleus profile put|get|list     ranking profiles (weights, fusion, model re-ranking)
    nucleus tenant export|import     a tenant as a portable archive file (operators)
    nucleus top [--once]             live requests, errors and latency per service, method and stage
                                     (from the services' /metrics)

The CLI talks to the services over their internal gRPC interface (the trusted operator path);
agents use MCP, where the tenant comes from the verified identity.
Errors print one line and exit non-zero (code per error kind, see shared.errors).
"""
from __future__ import annotations

import argparse
import logging
import sys

from rich.markup import escape

from benchmarks.attacks.cli import register as register_attack
from benchmarks.cli import register as register_bench
from cli import (backup, chat, demo, identity, ingest, lifecycle, migrate, persona, profile, search, sources, status,
                 tenant, top, traces, tune)
from cli.stack import INTERRUPTED_EXIT, err_console
from shared.errors import NucleusError
from shared.settings import CliSettings, settings_from_env, warn_unknown_env

log = logging.getLogger("nucleus")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nucleus", description="Nucleus RAG operator CLI")
    parser.add_argument("--data-dir", help="local data directory (default .nucleus-data or $NUCLEUS_DATA_DIR)")
    sub = parser.add_subparsers(dest="command", required=True)
    lifecycle.register(sub)  # nucleus up, nucleus down
    status.register_status(sub)  # nucleus status
    ingest.register(sub)     # nucleus ingest
    search.register(sub)     # nucleus search
    demo.register(sub)       # nucleus demo
    register_bench(sub)      # nucleus bench
    register_attack(sub)     # nucleus attack
    traces.register(sub)     # nucleus traces
    top.register(sub)        # nucleus top
    status.register(sub)     # nucleus check
    identity.register(sub)   # nucleus identity
    chat.register(sub)       # nucleus chat, nucleus ask, nucleus topics
    persona.register(sub)    # nucleus persona
    profile.register(sub)    # nucleus profile
    sources.register(sub)    # nucleus sources
    migrate.register(sub)    # nucleus migrate
    backup.register(sub)     # nucleus backup, nucleus restore
    tenant.register(sub)     # nucleus tenant export, nucleus tenant import
    tune.register(sub)       # nucleus tune
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.settings = settings_from_env(CliSettings)    # read once here, passed down with the arguments
        warn_unknown_env(log)
        return args.func(args) or 0
    except NucleusError as err:
        return _report(err)
    except BaseExceptionGroup as group:    # raised inside a task group (e.g. the MCP client's)
        err = _only_error(group)
        if err is None:
            raise
        if isinstance(err, KeyboardInterrupt):
            return INTERRUPTED_EXIT
        return _report(err)
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT


def _report(err: NucleusError) -> int:
    """One line, no traceback: the error kind and message; the exit code of its kind."""
    err_console.print(f"[red]error[/red] {escape(err.kind)}: {escape(str(err))}")
    return err.exit_code


def _only_error(group: BaseExceptionGroup) -> NucleusError | KeyboardInterrupt | None:
    """The one error a task group ended with when every error in it is ours (or an interrupt):
    the first of them. None when anything else is inside (a bug: its traceback is shown)."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    if leaves and all(isinstance(e, (NucleusError, KeyboardInterrupt)) for e in leaves):
        ours = [e for e in leaves if isinstance(e, NucleusError)]
        return ours[0] if ours else leaves[0]
    return None


if __name__ == "__main__":
    sys.exit(main())
