"""`nucleus ingest PATH --tenant T [--strict] [--sync] [--watch]`: the terminal side of a
folder ingest (folder_ingest.py does the work) — a progress bar of files and bytes, one line
per rejected or truncated file, a summary table, and the exit code (2 when any file was
rejected; with --strict a truncated file is rejected).

The manifest of (tenant, folder) lives in `<data dir>/ingest/<tenant>/`; `--no-manifest`
ingests every file regardless of it.
"""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn,
                           TransferSpeedColumn)
from rich.table import Table

from cli.folder_ingest import FAILED, INGESTED, REMOVED, TRUNCATED, UNCHANGED, FolderIngest, RunSummary, watch
from cli.stack import console as stack_console
from cli.stack import credentials, data_dir, target, tls_ca
from services.knowledge_store.client import KnowledgeStoreClient
from shared.documents import iter_files
from shared.documents.manifest import Manifest, manifest_path
from shared.errors import InvalidArgument
from shared.ingest_runs import record_run

FAILED_EXIT = InvalidArgument.exit_code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--persona", default="")
    parser.add_argument("--batch", type=int, default=32, help="documents per request")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first rejected file; a file a limit cut short (truncated) is rejected")
    parser.add_argument("--sync", action="store_true",
                        help="also delete the artifacts of files that are gone since the last run")
    parser.add_argument("--watch", action="store_true",
                        help="keep the folder in sync as files change (implies --sync); Ctrl-C stops")
    parser.add_argument("--no-manifest", action="store_true",
                        help="ingest every file, ignoring (and not updating) the folder manifest")
    parser.add_argument("--base-url", dest="base_url", default=None,
                        help="http(s) URL the folder is published at: each file's citable source_uri is "
                             "<base-url>/<its path in the folder> (remembered for the next run)")
    parser.add_argument("--knowledge-store-target", dest="knowledge_store_target")


def print_summary(console: Console, summary: RunSummary, tenant: str) -> None:
    for o in summary.failed:
        console.print(f"[red]rejected[/red] {escape(o.reason)}: {escape(o.detail or o.path)}")
    for o in summary.outcomes:
        if o.status == TRUNCATED:
            console.print(f"[yellow]truncated[/yellow] {escape(o.detail or o.path)}")
    table = Table(title=f"ingest into tenant '{tenant}'")
    for column in ("outcome", "files", "documents", "entries", "MB", "pages"):
        table.add_column(column, justify="left" if column == "outcome" else "right")
    for status in (INGESTED, TRUNCATED, UNCHANGED, REMOVED, FAILED):
        rows = [o for o in summary.outcomes if o.status == status]
        if rows:
            table.add_row(status, str(len(rows)), str(sum(o.documents for o in rows)),
                          str(sum(o.entries for o in rows)), f"{sum(o.size for o in rows) / 1e6:.2f}",
                          str(sum(o.pages for o in rows)))
    console.print(table)
    console.print(f"{summary.seconds:.1f}s (converting {summary.convert_seconds:.1f}s, "
                  f"embedding {summary.embed_seconds:.1f}s, committing {summary.commit_seconds:.1f}s)")


def watch_lines(summary: RunSummary, root: Path) -> list[str]:
    """What a --watch pass prints (rich markup): each file it ingested, removed or rejected, by
    its path under the folder as given, then how many files the folder holds now."""
    lines = []
    for o in summary.outcomes:
        if o.status == UNCHANGED:
            continue
        colour = {FAILED: "red", TRUNCATED: "yellow"}.get(o.status, "green")
        why = {FAILED: f" — {o.reason}: {o.detail}", TRUNCATED: f" — {o.detail}"}.get(o.status, "")
        lines.append(f"[{colour}]{o.status}[/{colour}] {escape(o.path)}{escape(why)}")
    present = sum(1 for o in summary.outcomes if o.status != REMOVED)
    lines.append(f"[dim]in sync ({present} file{'' if present == 1 else 's'}); watching {escape(str(root))}[/dim]")
    return lines


async def run(args: argparse.Namespace, store, state_dir: Path, console: Console) -> int:
    """One pass (or, with --watch, passes until interrupted) over args.path with `store`."""
    root = Path(args.path)
    if not root.exists():
        raise InvalidArgument("PATH", f"{root} does not exist")
    use_manifest = not getattr(args, "no_manifest", False)
    sync = getattr(args, "sync", False) or getattr(args, "watch", False)

    def make_run(progress=None, entries=None) -> FolderIngest:
        manifest = Manifest.load(manifest_path(state_dir, args.tenant, root), root) if use_manifest else None
        return FolderIngest(store, root, args.tenant, args.persona, manifest=manifest,
                            strict=getattr(args, "strict", False), sync=sync and use_manifest, batch_docs=args.batch,
                            progress=progress, entries=entries, base_url=getattr(args, "base_url", None))

    def record(summary: RunSummary, mode: str) -> None:     # the console's tenant page reads the last runs
        record_run(state_dir, args.tenant, root, mode, summary.outcomes, summary.seconds)

    if getattr(args, "watch", False):
        def on_pass(summary: RunSummary) -> None:
            record(summary, "watch")
            for line in watch_lines(summary, root):
                console.print(line)

        await watch(make_run, root, on_pass=on_pass)
        return 0

    total = sum(p.stat().st_size for p in iter_files(root))
    with Progress(TextColumn("[bold]ingest[/bold] {task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("0 files", total=total)
        done = {"files": 0, "entries": ""}

        def progress(outcome) -> None:
            if outcome.status == REMOVED:
                return
            done["files"] += 1
            bar.update(task, advance=outcome.size, description=f"{done['files']} files{done['entries']}")

        def entries(embedded: int, expected: int) -> None:      # inside the request in flight
            done["entries"] = f", {embedded:,}/{expected:,} entries embedded"
            bar.update(task, description=f"{done['files']} files{done['entries']}")

        summary = await make_run(progress, entries).run()
    record(summary, "sync" if sync and use_manifest else "ingest")
    print_summary(console, summary, args.tenant)
    return FAILED_EXIT if summary.failed else 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Ingest a file or folder, each file with its own outcome."""
    return asyncio.run(_ingest(args, target(args, "knowledge_store"), credentials(args, "knowledge_store"),
                               tls_ca(args)))


async def _ingest(args: argparse.Namespace, ks_target: str, interceptors: list | None = None,
                  ca: Path | None = None) -> int:
    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    try:
        return await run(args, client, data_dir(args), stack_console)
    finally:
        await client.close()


def register(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="ingest a file or folder (PDF, DOCX, PPTX, XLSX, HTML, Markdown, "
                                           "text, JSONL), only new or changed files")
    add_arguments(ingest)
    ingest.set_defaults(func=cmd_ingest)
