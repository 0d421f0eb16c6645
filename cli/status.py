"""What `nucleus status` and `nucleus check` show an operator about a running stack.

    service_table   each service: gRPC address, health (SERVING / DOWN), what the supervisor
                    says about it (running; restarting, with the last exit and the back-off;
                    FAILED, with why), and once it has exited its last exit (e.g. "killed by
                    SIGKILL") and where its log is; MCP address
    store_lines     the KnowledgeStore's storage: ok, or degraded with each tenant's problem
                    (corrupted, rows failing their checksums, lost commits, read-only, disk
                    full, inconsistent) naming the path and the newest backup; the scrub's last pass
    nucleus check   the full consistency check of one tenant (repairs by default)

Exit codes: `status` 0 when every service serves (storage problems are shown, and do not
fail it), 6 when a service is down or failed; `check`: CHECK_EXIT_CODES (0 when the tenant is
consistent after the repair, 8 when problems remain, else its error's; also in its --help and
docs/OPERATIONS.md).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from cli.sources_file import source_lines, sources_file
from cli.stack import INTERRUPTED_EXIT, USAGE_EXIT, console, credentials, stack_state, target, tls_ca
from cli.supervisor import GRPC_NAMES
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.disk import human_bytes
from services.knowledge_store.models import StoreStatus, TenantCheck
from shared import errors
from shared.errors import NucleusError
from shared.healthcheck import health_ok

CONSISTENT_EXIT, INCONSISTENT_EXIT = 0, 8
#: Every exit code of `nucleus check` and what it means (its --help epilog; docs/OPERATIONS.md,
#: "Consistency of vectors and keyword rows", lists the same).
CHECK_EXIT_CODES = {
    CONSISTENT_EXIT: "the tenant is consistent (after the repair)",
    errors.NucleusError.exit_code: "internal error (the KnowledgeStore's INTERNAL, or a bug: its traceback is shown)",
    USAGE_EXIT: "bad arguments or tenant id",
    errors.NotFound.exit_code: "not found",
    errors.Unauthenticated.exit_code: "the operator credential was refused (unauthenticated, permission denied)",
    errors.ResourceExhausted.exit_code: "rate limited, or no space left in the data directory",
    errors.Unavailable.exit_code: "no running stack, or the KnowledgeStore is unreachable or did not answer in time",
    errors.FailedPrecondition.exit_code: "the tenant cannot be checked until an operator acts "
                                         "(read-only data directory, corrupted database)",
    INCONSISTENT_EXIT: "problems remain: damaged, missing or orphaned rows, or indexes disagreeing with "
                       "SQLite; on qdrant, entries gone, changed vectors or keyword statistics off (with --no-repair: "
                       "found, not repaired)",
    errors.Unimplemented.exit_code: "the KnowledgeStore does not serve CheckTenant (UNIMPLEMENTED: an older version)",
    INTERRUPTED_EXIT: "interrupted (Ctrl-C)",
}


def supervisor_alive(state: dict) -> bool:
    pid = state.get("supervisor_pid")
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _supervision_text(entry: dict | None, log_file: str) -> str:
    """What the supervisor says about one service: its state; once it has exited, the last exit
    and where its log is (README: "each service's state, its last exit and where its log is")."""
    if not entry:
        return ""
    state, reason = entry.get("state", ""), escape(entry.get("reason", ""))
    restarts = entry.get("restarts", 0)
    last_exit = escape(entry.get("last_exit", ""))
    log = escape(log_file)
    counted = f"{restarts} restart{'s' if restarts != 1 else ''}"
    if state == "running":
        if not restarts and not last_exit:
            return "running"
        return f"running ({counted}); last exit: {last_exit or 'unknown'}; log {log}"
    if state == "failed":
        return f"[red]FAILED[/red]: {reason}; log {log}"
    if state == "waiting":
        due = entry.get("next_start_unix")
        wait = f", next try in {max(0.0, due - time.time()):.0f}s" if due else ""
        return f"[yellow]restarting[/yellow]: {reason}{wait}; log {log}"
    if state == "starting":
        return f"[yellow]starting[/yellow] (restart {restarts}); last exit: {last_exit or 'unknown'}; log {log}"
    return escape(state)


def service_table(state: dict, healthy: Callable[[str, dict], bool]) -> tuple[Table, bool]:
    """(the table of services, whether every one of them serves)."""
    table = Table(title="Nucleus RAG status")
    for col in ("service", "gRPC", "health", "supervisor", "MCP"):
        table.add_column(col)
    alive = supervisor_alive(state)
    supervision = state.get("supervision", {})
    run_dir = os.path.join(state.get("data_dir", ""), "run")
    all_ok = True
    for name, address in state.get("services", {}).items():
        ok = healthy(name, address)
        all_ok &= ok
        entry = supervision.get(name)
        log_file = (entry or {}).get("log_file") or os.path.join(run_dir, f"{name}.log")
        note = (_supervision_text(entry, log_file) if alive
                else "[red]supervisor not running[/red] (stale state; `nucleus up` starts the stack)")
        if entry and entry.get("state") == "failed":
            all_ok = False
        table.add_row(name, address.get("grpc", ""), "[green]SERVING[/green]" if ok else "[red]DOWN[/red]", note,
                      address.get("mcp", ""))
    if state.get("restart_policy"):
        table.caption = f"restarts: {state['restart_policy']}"
    return table, all_ok


OPEN_TENANTS_SHOWN = 10


def store_lines(status: StoreStatus) -> list[str]:
    """The KnowledgeStore's storage condition, one line per fact (rich markup)."""

    space = f"data directory {escape(status.data_dir)}, {human_bytes(status.free_bytes)} free"
    if status.read_only:
        space += ", read-only"
    head = ("[green]storage ok[/green]" if status.state == "ok"
            else f"[yellow]storage DEGRADED[/yellow] ({len(status.problems)} problem"
                 f"{'s' if len(status.problems) != 1 else ''})")
    budget = f" of {human_bytes(status.memory_budget_bytes)} budget" if status.memory_budget_bytes else ""
    lines = [f"{head}: {space}; {status.open_tenants} tenants open "
             f"({human_bytes(status.open_tenant_bytes)}{budget}), {status.repaired_rows} rows repaired"]
    if status.tenants:
        shown = ", ".join(f"{escape(t)} {human_bytes(b)}" for t, b in status.tenants[:OPEN_TENANTS_SHOWN])
        more = len(status.tenants) - OPEN_TENANTS_SHOWN
        lines.append(f"  open tenants, most recently used first: {shown}" + (f" and {more} more" if more > 0 else ""))
    for p in status.problems:
        lines.append(f"  tenant [bold]{escape(p.tenant_id)}[/bold] {p.kind}: {escape(p.message)}")
    if status.scrub:
        lines.append(f"  {escape(status.scrub)}")
    return lines


def check_table(check: TenantCheck) -> Table:
    table = Table(title=f"tenant {check.tenant_id}: " + ("[green]consistent[/green]" if check.consistent
                                                       else "[red]inconsistent[/red]"))
    table.add_column("rows")
    table.add_column("stored", justify="right")
    table.add_column("indexed", justify="right")
    table.add_column("missing", justify="right")
    table.add_column("orphaned", justify="right")
    table.add_column("repaired", justify="right")
    table.add_row("entries", str(check.entries), "", "", str(check.entries_without_artifact) + " w/o artifact", "")
    table.add_row("vectors", str(check.vectors), str(check.vectors_indexed),
                  f"{check.missing_vectors} (+{check.malformed_vectors} malformed)", str(check.orphan_vectors),
                  str(check.repaired_vectors))
    table.add_row("keyword rows", str(check.keyword_rows), str(check.keyword_rows_indexed),
                  str(check.missing_keyword_rows), str(check.orphan_keyword_rows), str(check.repaired_keyword_rows))
    table.caption = f"orphan rows removed: {check.removed_orphans}; SQLite quick_check: " + (
        "ok" if not check.integrity_errors else escape("; ".join(check.integrity_errors))) + (
        f"; row checksums: {check.corrupt_rows} corrupt, {check.unverified_rows} unverified") + (
        f"; qdrant: {check.missing_entries} entries gone (re-ingest or re-import them), {check.changed_vectors} "
        f"vectors changed, {check.keyword_stats_off} keyword statistics off"
        if check.missing_entries or check.changed_vectors or check.keyword_stats_off else "")
    return table


# ---------------------------------------------------------------------------- nucleus check
def cmd_check(args: argparse.Namespace) -> int:
    check = asyncio.run(_check(target(args, "knowledge_store"), args.tenant, not args.no_repair,
                               credentials(args, "knowledge_store"), tls_ca(args)))
    console.print(check_table(check))
    if check.deferred:
        console.print(f"[yellow]waiting:[/yellow] {escape(check.deferred)}")
    return CONSISTENT_EXIT if check.consistent else INCONSISTENT_EXIT


async def _check(ks_target: str, tenant: str, repair: bool, interceptors: list | None, ca) -> TenantCheck:
    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    try:
        return await client.check_tenant(tenant, repair=repair)
    finally:
        await client.close()


async def store_status(ks_target: str, interceptors: list | None, ca) -> StoreStatus:
    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    try:
        return await client.store_status()
    finally:
        await client.close()


# ---------------------------------------------------------------------------- nucleus status
def cmd_status(args: argparse.Namespace) -> int:
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
                      time.strftime("%Y-%m-%d %H:%M", time.gmtime(s.last_indexed_unix)),
                      ",".join(s.visibility_groups))
        console.print(t)
    return 0 if healthy else 6


async def _stats(ks_target: str, tenant: str, interceptors: list | None = None, ca: Path | None = None):
    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    try:
        return await client.stats(tenant)
    finally:
        await client.close()


def register_status(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser("status", help="health, addresses and (with --tenant) tenant stats")
    status.add_argument("--tenant", default="")
    status.set_defaults(func=cmd_status)


def register(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser("check", help="full consistency check of a tenant; rebuilds missing derived rows",
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog="exit codes:\n" + "".join(f"  {code:<4} {meaning}\n"
                                                            for code, meaning in CHECK_EXIT_CODES.items()))
    check.add_argument("--tenant", required=True)
    check.add_argument("--no-repair", action="store_true", help="only report, change nothing")
    check.add_argument("--knowledge-store-target", dest="knowledge_store_target")
    check.set_defaults(func=cmd_check)


__all__ = ["CHECK_EXIT_CODES", "cmd_check", "cmd_status", "register", "register_status", "service_table",
           "store_lines", "store_status", "supervisor_alive"]
