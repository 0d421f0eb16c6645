"""`nucleus backup` / `nucleus restore`: authenticated snapshots of the embedded KnowledgeStore's
tenants and of the stack state a restore needs (operators only; docs/OPERATIONS.md, "Backups").

    nucleus backup [--tenant T ...] [--to DIR] [--keep N] [--no-secrets] [--key FILE]
        the running KnowledgeStore copies each tenant's database online (gRPC BackupTenants:
        SQLite's backup API, one commit, ingest goes on) into a staging directory under DIR;
        this command adds the stack state, writes `manifest.json` (SHA-256 of every file, the
        tenants and the point each copy is at) and `manifest.mac` (HMAC-SHA256 keyed with the
        stack's backup key), fsyncs, and renames the directory to DIR/<UTC time> — a snapshot
        exists complete or not at all. Files 0600, directories 0700. Then retention keeps the
        newest N snapshots (--keep, $NUCLEUS_BACKUP_KEEP, 7).
    nucleus backup verify SNAPSHOT [--key FILE]
        the MAC, every file's SHA-256, SQLite's integrity_check of every tenant database
    nucleus backup list [--to DIR]
    nucleus restore SNAPSHOT [--tenant T ...] [--key FILE] [--offline] [--stack-state]
        verify as above (refused on any failure), then each tenant: online through the running
        KnowledgeStore (gRPC RestoreTenant: staged, checked again, swapped; only that tenant is
        briefly unavailable), or --offline straight into the data directory of a stopped stack.
        --stack-state (stopped stack only) writes the sources and registries files, identity
        keys and trust bundle, auth configuration and link secret back.

The stack state: sources.json and registries.json, the identity directory (keys and trust
bundle), the auth configuration ($NUCLEUS_RAG_AUTH_CONFIG) and the link secret
($NUCLEUS_RAG_LINK_SECRET). Secrets (private keys, the auth configuration, the link secret) are
encrypted with AES-256-GCM under a key derived from the backup key, or left out with
--no-secrets. The backup key ($NUCLEUS_BACKUP_KEY_FILE, else <data dir>/backup.key, made on the
first backup) must be kept off the host too: without it no snapshot verifies or restores, and a
snapshot made under another stack's key is refused.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from cli.identity import identity_dir
from cli.snapshots import (
    MANIFEST,
    _fsync_dir,
    _secret_cipher,
    _write_private,
    load_key,
    prune,
    restore_offline,
    snapshots_in,
    verify,
    write_snapshot,
)
from cli.sources_file import sources_file
from cli.stack import console, credentials, data_dir, stack_state, target, tls_ca
from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from shared.settings import RagPipelineSettings, cli_settings


# ---------------------------------------------------------------------------- keys and files
def key_file(args: argparse.Namespace) -> Path:
    if getattr(args, "key", None):
        return Path(args.key).expanduser().resolve()
    configured = cli_settings(args).backup_key_file
    return configured.expanduser().resolve() if configured else data_dir(args) / "backup.key"


# ---------------------------------------------------------------------------- the stack state
def stack_files(args: argparse.Namespace) -> list[tuple[str, Path | bytes, bool]]:
    """(name in the snapshot, file or bytes, secret) of the stack state that exists now."""

    out: list[tuple[str, Path | bytes, bool]] = []
    sources = sources_file(args)
    for name, path in (("sources.json", sources), ("registries.json", sources.with_name("registries.json"))):
        if path.is_file():
            out.append((name, path, False))
    ident = identity_dir(args)
    if ident.is_dir():
        for path in sorted(ident.iterdir()):
            if path.is_file() and not path.name.endswith(".tmp"):
                out.append((f"identity/{path.name}", path, path.suffix == ".key"))
    rag = RagPipelineSettings()            # the pipeline's own files, as it reads them
    if rag.auth_config and rag.auth_config.is_file():
        out.append(("auth_config.json", rag.auth_config, True))
    link = rag.link_secret.get_secret_value()
    if link:
        out.append(("link_secret", link.encode(), True))
    return out


def _restore_targets(args: argparse.Namespace) -> dict[str, Path]:
    sources = sources_file(args)
    auth = RagPipelineSettings().auth_config
    return {"sources.json": sources, "registries.json": sources.with_name("registries.json"),
            "identity/": identity_dir(args), "auth_config.json": auth or data_dir(args) / "auth.json",
            "link_secret": data_dir(args) / "link_secret"}


# ---------------------------------------------------------------------------- backup
def backup_root(args: argparse.Namespace) -> Path:
    if getattr(args, "to", None):
        return Path(args.to).expanduser().resolve()
    configured = cli_settings(args).backup_dir
    return configured.expanduser().resolve() if configured else data_dir(args) / "backups"


def cmd_backup(args: argparse.Namespace) -> int:
    root = backup_root(args)
    key = load_key(key_file(args), create=True)
    final, manifest = asyncio.run(take(args, root, key, target(args, "knowledge_store"),
                                       credentials(args, "knowledge_store"), tls_ca(args)))
    total = sum(t["bytes"] for t in manifest["tenants"].values())
    console.print(f"backup {escape(str(final))}: {len(manifest['tenants'])} tenants "
                  f"({sum(t['entries'] for t in manifest['tenants'].values())} entries, {total / 1e6:.1f} MB), "
                  f"{len(manifest['files'])} stack files, secrets {manifest['secrets']}")
    removed = prune(root, _keep(args))
    if removed:
        names = ", ".join(p.name for p in removed)
        console.print(f"retention: removed {len(removed)} older snapshot(s): {escape(names)}")
    return 0


async def take(args: argparse.Namespace, root: Path, key: bytes, ks_target: str, interceptors=None,
               ca: Path | None = None) -> tuple[Path, dict]:
    """Make one snapshot under `root` (module docstring): (its directory, its manifest)."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    final = root / name
    n = 1
    while final.exists():
        n += 1
        final = root / f"{name}-{n}"
    staging = root / f".partial-{final.name}-{secrets.token_hex(3)}"
    (staging / "tenants").mkdir(parents=True, mode=0o700)
    os.chmod(staging, 0o700)
    try:
        client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
        try:
            snapshots = await client.backup_tenants(list(args.tenant or []), str(staging / "tenants"), str(final))
        finally:
            await client.close()
        if not snapshots:
            raise NotFound("the KnowledgeStore has no tenant to back up")
        manifest = write_snapshot(staging, snapshots, stack_files(args), key,
                                  with_secrets=not getattr(args, "no_secrets", False))
        os.rename(staging, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final, manifest


def _keep(args: argparse.Namespace) -> int:
    if getattr(args, "keep", None) is not None:
        return args.keep
    return cli_settings(args).backup_keep


# ---------------------------------------------------------------------------- verify
def cmd_verify(args: argparse.Namespace) -> int:
    directory = Path(args.snapshot).expanduser().resolve()
    manifest = verify(directory, load_key(key_file(args)))
    table = Table(title=f"snapshot {escape(str(directory))}: [green]verified[/green] (MAC, SHA-256, integrity_check)")
    for col in ("tenant", "entries", "MB", "taken (UTC)"):
        table.add_column(col)
    for tenant_id, t in sorted(manifest["tenants"].items()):
        table.add_row(escape(tenant_id), str(t["entries"]), f"{t['bytes'] / 1e6:.1f}",
                      time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t["point_unix"])))
    table.caption = f"{len(manifest['files'])} stack files; secrets {manifest['secrets']}"
    console.print(table)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    root = backup_root(args)
    table = Table(title=f"snapshots in {escape(str(root))}")
    for col in ("snapshot", "tenants", "MB"):
        table.add_column(col)
    for path in reversed(snapshots_in(root)):
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            tenants = manifest.get("tenants", {})
            table.add_row(path.name, escape(", ".join(sorted(tenants))),
                          f"{sum(t.get('bytes', 0) for t in tenants.values()) / 1e6:.1f}")
        except (OSError, ValueError):
            table.add_row(path.name, "[red]unreadable manifest[/red]", "")
    console.print(table)
    return 0


# ---------------------------------------------------------------------------- restore
def _stack_running(args: argparse.Namespace) -> dict | None:
    try:
        return stack_state(args)
    except Unavailable:
        return None


def cmd_restore(args: argparse.Namespace) -> int:
    directory = Path(args.snapshot).expanduser().resolve()
    key = load_key(key_file(args))
    manifest = verify(directory, key)
    wanted = list(args.tenant or []) or sorted(manifest["tenants"])
    missing = [t for t in wanted if t not in manifest["tenants"]]
    if missing:
        raise InvalidArgument("tenant", f"{', '.join(missing)} not in snapshot {directory} (it holds "
                                        f"{', '.join(sorted(manifest['tenants']))})")
    explicit = {"target": args.knowledge_store_target} if args.knowledge_store_target else None
    running = None if args.offline else (_stack_running(args) or explicit)
    if args.stack_state and running is not None:
        raise FailedPrecondition("--stack-state needs a stopped stack (`nucleus down`), or --offline")
    if running is None:
        if _stack_running(args) is not None or args.knowledge_store_target:
            raise FailedPrecondition(f"a stack runs on {data_dir(args)}: restore online (without --offline), or stop "
                                     "it first")
        restore_offline(Path(args.ks_data_dir) if args.ks_data_dir else data_dir(args) / "knowledge_store",
                        directory, manifest, wanted)
        console.print(f"restored {len(wanted)} tenant(s) from {escape(str(directory))} into the stopped stack's data "
                      "directory; their indexes are rebuilt from SQLite on first use")
    else:
        results = asyncio.run(restore_online(target(args, "knowledge_store"), directory, manifest, wanted,
                                             credentials(args, "knowledge_store"), tls_ca(args)))
        for tenant_id, (restored, seconds) in results.items():
            console.print(f"tenant {escape(tenant_id)}: restored {restored['entries']} entries from "
                          f"{escape(str(directory))} (unavailable {seconds * 1000:.0f} ms)")
    if args.stack_state:
        for line in restore_stack_state(args, directory, manifest, key):
            console.print(line)
    return 0


async def restore_online(ks_target: str, directory: Path, manifest: dict, tenants: list[str], interceptors=None,
                         ca: Path | None = None) -> dict[str, tuple[dict, float]]:

    client = KnowledgeStoreClient(ks_target, interceptors=interceptors, tls_ca_file=ca)
    out = {}
    try:
        for tenant_id in tenants:
            t = manifest["tenants"][tenant_id]
            out[tenant_id] = await client.restore_tenant(tenant_id, str(directory / t["file"]), t["sha256"])
    finally:
        await client.close()
    return out


def restore_stack_state(args: argparse.Namespace, directory: Path, manifest: dict, key: bytes) -> list[str]:
    """Write the stack files of a verified snapshot back (stopped stack). Returns lines to show."""
    targets = _restore_targets(args)
    cipher = _secret_cipher(key)
    contents: list[tuple[Path, str, bytes]] = []
    for relative, f in sorted(manifest["files"].items()):     # all decrypted before anything is written
        data = (directory / relative).read_bytes()
        name = f["name"]
        if f["encrypted"]:
            try:
                data = cipher.decrypt(data[:12], data[12:], name.encode())
            except Exception as err:  # noqa: BLE001 - InvalidTag: another key or changed bytes
                raise FailedPrecondition(f"{relative} cannot be decrypted with this backup key") from err
        path = (targets["identity/"] / name.split("/", 1)[1]) if name.startswith("identity/") else targets[name]
        contents.append((path, name, data))
    lines = []
    for path, name, data in contents:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".restore-{secrets.token_hex(3)}")
        _write_private(tmp, data)
        os.replace(tmp, path)
        lines.append(f"wrote {escape(str(path))}" + (" (set NUCLEUS_RAG_LINK_SECRET from it)" if name == "link_secret"
                                                     else ""))
    if manifest.get("secrets") == "left out":
        lines.append("[yellow]secrets were left out of this snapshot[/yellow]: identity keys, auth configuration and "
                     "link secret must come from elsewhere")
    return lines


# ---------------------------------------------------------------------------- registration
def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("backup", help="authenticated snapshot of the KnowledgeStore's tenants and the stack state "
                                      "(operators); `backup verify`, `backup list`")
    b.add_argument("--tenant", action="append", help="a tenant to back up (repeat; default every tenant)")
    b.add_argument("--to", help="where snapshots go (default $NUCLEUS_BACKUP_DIR or <data dir>/backups; an "
                                "off-host mount in production)")
    b.add_argument("--keep", type=int, help="snapshots kept (default $NUCLEUS_BACKUP_KEEP or 7; 0 = all)")
    b.add_argument("--no-secrets", action="store_true", help="leave private keys, auth configuration and link "
                                                               "secret out (default: encrypted with the backup key)")
    b.add_argument("--key", help="backup key file (default $NUCLEUS_BACKUP_KEY_FILE or <data dir>/backup.key)")
    b.add_argument("--knowledge-store-target", dest="knowledge_store_target")
    b.set_defaults(func=cmd_backup)
    actions = b.add_subparsers(dest="action")
    v = actions.add_parser("verify", help="check a snapshot: MAC, SHA-256 of every file, integrity_check")
    v.add_argument("snapshot")
    v.add_argument("--key", help="backup key file of the stack that made it")
    v.set_defaults(func=cmd_verify)
    ls = actions.add_parser("list", help="the complete snapshots, newest first")
    ls.add_argument("--to", help="the snapshots' directory")
    ls.set_defaults(func=cmd_list)

    r = sub.add_parser("restore", help="restore tenants (and with --stack-state the stack files) from a verified "
                                       "snapshot (operators)")
    r.add_argument("snapshot")
    r.add_argument("--tenant", action="append", help="a tenant to restore (repeat; default every tenant in it)")
    r.add_argument("--key", help="backup key file of the stack that made it")
    r.add_argument("--offline", action="store_true", help="write into the data directory of a stopped stack")
    r.add_argument("--ks-data-dir", help="the KnowledgeStore's data directory (offline; default "
                                         "<data dir>/knowledge_store)")
    r.add_argument("--stack-state", action="store_true", help="also write the sources and registries files, identity "
                                                              "keys, auth configuration and link secret back")
    r.add_argument("--knowledge-store-target", dest="knowledge_store_target")
    r.set_defaults(func=cmd_restore)
