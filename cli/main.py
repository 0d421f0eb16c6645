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
    nucleus chat [--persona P]       a persona agent: an OpenAI-compatible LLM calling the RAG MCP tools
    nucleus ask "question"           one answer of that agent (--json for scripts)
    nucleus topics [list|evolution|recent|map]   topics of your documents (map --png FILE)
    nucleus persona put|get|list     persona agents' settings (system prompt, tools, sources, model)

The CLI talks to the services over their internal gRPC interface (the trusted operator path);
agents use MCP, where the tenant comes from the verified identity.
Errors print one line and exit non-zero (code per error kind, see shared.errors).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.errors import InvalidArgument, NucleusError, Unavailable
from shared.settings import default_data_dir

ROOT = Path(__file__).resolve().parent.parent
DEMO_CORPUS = ROOT / "demo" / "corpus"
console = Console(width=None if sys.stdout.isatty() else 132)
err_console = Console(stderr=True)


def data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).resolve() if args.data_dir else default_data_dir()


def stack_state(args: argparse.Namespace) -> dict:
    state_file = data_dir(args) / "run" / "stack.json"
    if not state_file.exists():
        raise Unavailable(f"no running stack found ({state_file} missing); start it with `nucleus up`")
    return json.loads(state_file.read_text())


def credentials(args: argparse.Namespace, callee: str) -> list | None:
    """Sign calls to `callee` with the operator key when the stack requires authentication
    (the key pair `nucleus up` made in <data dir>/identity, or $NUCLEUS_IDENTITY_DIR)."""
    from cli.identity import identity_dir
    from shared.auth.service_auth import operator_interceptors

    return operator_interceptors(identity_dir(args), callee)


def tls_ca(args: argparse.Namespace) -> Path | None:
    """The CA of a stack started with NUCLEUS_TLS=1 (recorded in stack.json), else None."""
    try:
        ca = stack_state(args).get("tls_ca_file", "")
    except Unavailable:
        return None
    return Path(ca) if ca else None


def target(args: argparse.Namespace, service: str) -> str:
    explicit = getattr(args, f"{service}_target", None)
    if explicit:
        return explicit
    return stack_state(args)["services"][service]["grpc"]


# ---------------------------------------------------------------------------- up / down / status
def cmd_up(args: argparse.Namespace) -> int:
    from cli.supervisor import Supervisor
    from shared.healthcheck import health_ok

    ddir = data_dir(args)
    state_file = ddir / "run" / "stack.json"
    if state_file.exists():
        from cli.status import supervisor_alive

        state = json.loads(state_file.read_text())
        failed = [n for n, s in state.get("supervision", {}).items() if s.get("state") == "failed"]
        if supervisor_alive(state) and failed:     # the supervisor gives failed services another try
            os.kill(state["supervisor_pid"], signal.SIGHUP)
            console.print(f"[yellow]stack running; restarting the failed {', '.join(failed)}[/yellow] "
                          "(`nucleus status` shows how it goes)")
            return 0
        if all(health_ok(s["grpc"], ca_file=state.get("tls_ca_file") or None) for s in state["services"].values()):
            console.print("[green]stack already running[/green]")
            _print_addresses(state["services"])
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
        _print_addresses(state["services"])
        return 0
    supervisor = Supervisor(ddir, ephemeral_ports=args.ephemeral_ports, mode=_mode(args))
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGHUP, lambda *_: setattr(supervisor, "retry_requested", True))   # another try
    with console.status("starting services…"):
        addresses = supervisor.start()
    console.print("[green]stack healthy[/green] — Ctrl-C stops it")
    _print_addresses(addresses)
    supervisor.monitor(stop)
    supervisor.stop()
    return 0


def _mode(args: argparse.Namespace) -> str:
    """`--mode`, else $NUCLEUS_MODE, else the default deployment mode (cli/supervisor.py)."""
    from cli.supervisor import default_mode

    return getattr(args, "mode", None) or default_mode()


def _print_addresses(services: dict) -> None:
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


def cmd_status(args: argparse.Namespace) -> int:
    from cli.supervisor import GRPC_NAMES
    from shared.healthcheck import health_ok

    from cli.status import service_table, store_lines, store_status

    state = stack_state(args)
    table, healthy = service_table(state, lambda name, addr: health_ok(
        addr["grpc"], GRPC_NAMES[name], ca_file=state.get("tls_ca_file") or None))
    console.print(table)
    ks = state["services"].get("knowledge_store")
    if ks and health_ok(ks["grpc"], GRPC_NAMES["knowledge_store"], ca_file=state.get("tls_ca_file") or None):
        try:
            status = asyncio.run(store_status(ks["grpc"], credentials(args, "knowledge_store"), tls_ca(args)))
            console.print("\n".join(store_lines(status)))
        except NucleusError as err:
            console.print(f"[dim]storage status unavailable: {escape(str(err))}[/dim]")
    from cli.sources import source_lines, sources_file

    console.print("\n".join(source_lines(sources_file(args))))
    if args.tenant:
        stats = asyncio.run(_stats(target(args, "knowledge_store"), args.tenant,
                                   credentials(args, "knowledge_store"), tls_ca(args)))
        t = Table(title=f"tenant {stats.tenant_id}: {stats.artifacts} artifacts, {stats.entries} entries, "
                        f"index {stats.index_kind}")
        for col in ("source", "type", "artifacts", "entries", "last indexed", "groups"):
            t.add_column(col)
        for s in stats.sources:
            t.add_row(s.source_id, s.source_type, str(s.artifacts), str(s.entries),
                      time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.last_indexed_unix)), ",".join(s.visibility_groups))
        console.print(t)
    return 0 if healthy else 6


async def _stats(ks_target: str, tenant: str, interceptors: list | None = None, ca: Path | None = None):
    from services.knowledge_store.client import KnowledgeStoreClient

    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    try:
        return await client.stats(tenant)
    finally:
        await client.close()


# ---------------------------------------------------------------------------- ingest
def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest a file or folder, each file with its own outcome (cli/ingest.py)."""
    return asyncio.run(_ingest(args, target(args, "knowledge_store"), credentials(args, "knowledge_store"),
                               tls_ca(args)))


async def _ingest(args: argparse.Namespace, ks_target: str, interceptors: list | None = None,
                  ca: Path | None = None) -> int:
    from cli.ingest import run
    from services.knowledge_store.client import KnowledgeStoreClient

    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    try:
        return await run(args, client, data_dir(args), console)
    finally:
        await client.close()


# ---------------------------------------------------------------------------- search
def cmd_search(args: argparse.Namespace) -> int:
    check_top_k(args.top_k)
    return asyncio.run(_search(args))


def check_top_k(top_k: int) -> None:
    """`--top-k` as the service accepts it: 0 is not "the default" here (leave the flag out for
    that), it is refused like 101 is."""
    from shared.settings import RagPipelineSettings

    fields = RagPipelineSettings.model_fields
    limit, default = fields["max_top_k_final"].default, fields["default_top_k_final"].default
    if top_k < 1:
        raise InvalidArgument("--top-k", f"must be between 1 and {limit} (leave it out for {default}), got {top_k}")


async def _search(args: argparse.Namespace) -> int:
    """SearchAndRank as one principal, named in the output: with authentication off, the local
    principal — the tenant, user and groups RAGPipeline's MCP endpoint gives a local caller —
    unless `--as-operator` (every document of any tenant); with it on, the user of
    $NUCLEUS_API_KEY, else the operator (the CLI's own key)."""
    import grpc

    from nucleus.v1 import common_pb2 as pb
    from nucleus.v1 import rag_pipeline_pb2 as rag_pb
    from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
    from shared.grpc_client import aio_channel
    from shared.grpc_errors import from_grpc_error
    from shared.identity import ANSWERED_AS_METADATA, LOCAL_PRINCIPAL_METADATA

    request = rag_pb.SearchAndRankRequest(
        tenant_id=args.tenant, persona_id=args.persona, user_query_text=args.query, top_k_final_rank=args.top_k,
        expand_query_with_llm=args.expand,
        ranking_prefs=pb.RankingPreferences(profile_name=args.profile, explain=True, rerank=args.rerank))
    key = os.environ.get("NUCLEUS_API_KEY", "")   # search as that user when the pipeline requires auth,
    signing = None if key else credentials(args, "rag_pipeline")   # else as the operator (public documents)
    # Authentication off (nothing verifies a key, no operator key): as the local principal, unless
    # --as-operator. With it on, RAGPipeline answers as the verified caller and ignores the ask.
    as_local = signing is None and not args.as_operator
    metadata = [("authorization", f"Bearer {key}")] if key else []
    if as_local:
        metadata.append(LOCAL_PRINCIPAL_METADATA)
    async with aio_channel(target(args, "rag_pipeline"), signing, tls_ca_file=tls_ca(args)) as channel:
        pending = rag_grpc.RagPipelineStub(channel).SearchAndRank(request, timeout=30.0,
                                                                  metadata=tuple(metadata) or None)
        try:
            response = await pending
            answered = dict(await pending.initial_metadata() or ()).get(ANSWERED_AS_METADATA, "")
        except grpc.RpcError as err:
            failure = from_grpc_error(err, service="RAGPipeline")
            if as_local and not key and failure.kind == "permission_denied":
                failure.message += (" (`nucleus search` acts as the stack's local principal, the tenant MCP "
                                    "gives a local caller: NUCLEUS_LOCAL_TENANT when the stack started; "
                                    "--as-operator searches any tenant as the operator)")
            raise failure from None
    answered = answered or ("the local principal" if as_local and not key else "the operator")
    if args.json:
        from google.protobuf.json_format import MessageToDict
        console.print_json(json.dumps({**MessageToDict(response), "answeredAs": answered}))
        return 0
    title = f"“{args.query}” — tenant {args.tenant}, profile {response.profile_name}@v{response.profile_version}"
    if response.temporal_intent:
        title += " [temporal intent: recency on]"
    table = Table(title=title, show_lines=False)
    for col, just in (("#", "right"), ("overall", "right"), ("relev.", "right"), ("recency", "right"),
                      ("richness", "right"), ("reput.", "right"), ("title", "left"), ("source", "left"),
                      ("modified", "left")):
        table.add_column(col, justify=just)
    for i, r in enumerate(response.results, 1):
        s = r.individual_scores
        a = r.associated_artifact
        table.add_row(str(i), f"{r.overall_rank_score:.3f}", f"{s.relevancy:.3f}", f"{s.recency:.3f}",
                      f"{s.richness:.3f}", f"{s.reputation:.3f}", a.title[:48], a.source_type,
                      time.strftime("%Y-%m-%d", time.gmtime(a.modified_unix)) if a.modified_unix else "-")
    console.print(table)
    if response.results:
        top = response.results[0]
        console.print(f"[bold]top snippet[/bold] ({top.persona_knowledge_entry_id}): {top.snippet}")
    if response.degraded:
        console.print(f"[yellow]degraded:[/yellow] {'; '.join(response.degraded_reasons)}")
    timings = ", ".join(f"{t.stage} {t.ms:.1f}ms" for t in response.timings)
    console.print(f"[dim]{timings}[/dim]")
    console.print(f"answered as {escape(answered)}" + (" — --as-operator: every document of the tenant"
                                                       if answered.startswith("local principal") else ""))
    return 0


# ---------------------------------------------------------------------------- demo
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
    args.as_operator = os.environ.get("NUCLEUS_LOCAL_TENANT", "demo") != "demo"   # the local principal's view
    cmd_search(args)
    console.print(demo_hint(args.data_dir))
    return 0


def demo_hint(data_dir: str | None) -> str:
    """`nucleus demo`'s closing line: commands that reach this stack, on --data-dir if it has one."""
    where = f" --data-dir {shlex.quote(data_dir)}" if data_dir else ""      # a stack elsewhere
    stop = f".venv/bin/nucleus{where} down" if where else "make down"
    return (f"\nThe stack keeps running. Try: [bold].venv/bin/nucleus{where} search \"travel expense limits\" "
            f"--tenant demo[/bold] — stop it with [bold]{stop}[/bold].")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nucleus", description="Nucleus RAG operator CLI")
    parser.add_argument("--data-dir", help="local data directory (default .nucleus-data or $NUCLEUS_DATA_DIR)")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start the three services and wait until healthy")
    up.add_argument("--detach", action="store_true", help="run in the background (stop with `nucleus down`)")
    up.add_argument("--ephemeral-ports", action="store_true", help="bind free ports instead of the defaults")
    up.add_argument("--timeout", type=float, default=240.0)
    up.add_argument("--mode", choices=("single", "split"),
                    help="single: the three services in one process; split: a process each "
                         "(default: $NUCLEUS_MODE, else single)")
    up.set_defaults(func=cmd_up)

    sub.add_parser("down", help="stop a detached stack").set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="health, addresses and (with --tenant) tenant stats")
    status.add_argument("--tenant", default="")
    status.set_defaults(func=cmd_status)

    from cli.ingest import add_arguments as ingest_arguments

    ingest = sub.add_parser("ingest", help="ingest a file or folder (PDF, DOCX, PPTX, XLSX, HTML, Markdown, text, "
                                           "JSONL), only new or changed files")
    ingest_arguments(ingest)
    ingest.set_defaults(func=cmd_ingest)

    search = sub.add_parser("search", help="SearchAndRank and print a table of ranked results")
    search.add_argument("query")
    search.add_argument("--tenant", required=True)
    search.add_argument("--persona", default="")
    search.add_argument("--top-k", type=int, default=10)
    search.add_argument("--profile", default="")
    search.add_argument("--expand", action="store_true")
    search.add_argument("--rerank", action="store_true")
    search.add_argument("--json", action="store_true", help="print the raw response as JSON")
    search.add_argument("--as-operator", action="store_true",
                        help="authentication off: search as the operator (every document of any tenant) "
                             "instead of as the local principal that MCP callers get")
    search.add_argument("--rag-pipeline-target", dest="rag_pipeline_target")
    search.set_defaults(func=cmd_search)

    demo = sub.add_parser("demo", help="start the stack, ingest the demo corpus, run a sample search")
    demo.add_argument("--ephemeral-ports", action="store_true")
    demo.add_argument("--timeout", type=float, default=240.0)
    demo.add_argument("--mode", choices=("single", "split"), help="as for `nucleus up`")
    demo.set_defaults(func=cmd_demo)

    from benchmarks.attacks.cli import register as register_attack
    from benchmarks.cli import register as register_bench
    from cli.identity import register as register_identity
    from cli.sources import register as register_sources
    from cli.status import register as register_status
    from cli.traces import register as register_traces

    register_bench(sub)      # nucleus bench
    register_attack(sub)     # nucleus attack
    register_traces(sub)     # nucleus traces
    register_status(sub)     # nucleus check
    register_identity(sub)   # nucleus identity

    from cli.chat import register as register_chat
    from cli.persona import register as register_persona

    register_chat(sub)       # nucleus chat, nucleus ask, nucleus topics
    register_persona(sub)    # nucleus persona
    register_sources(sub)    # nucleus sources
    from cli.migrate import register as register_migrate

    register_migrate(sub)    # nucleus migrate
    from cli.backup import register as register_backup

    register_backup(sub)     # nucleus backup, nucleus restore
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except NucleusError as err:
        return _report(err)
    except BaseExceptionGroup as group:    # raised inside a task group (e.g. the MCP client's)
        err = _only_error(group)
        if err is None:
            raise
        if isinstance(err, KeyboardInterrupt):
            return 130
        return _report(err)
    except KeyboardInterrupt:
        return 130


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
