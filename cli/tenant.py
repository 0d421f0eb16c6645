"""`nucleus tenant export` / `nucleus tenant import`: one tenant as a portable archive file, moved
between stacks, tenant ids and backends (operators; docs/OPERATIONS.md, "Tenant archives").

    nucleus tenant export --tenant T --to FILE [--key FILE]
        the running KnowledgeStore streams the tenant's archive (gRPC ExportTenant), MAC'd with
        the stack's backup key (--key, $NUCLEUS_BACKUP_KEY_FILE, else <data dir>/backup.key, made
        on first use as `nucleus backup` makes it); written 0600 beside FILE, verified, renamed
        into place: FILE exists complete or not at all (an existing FILE is refused)
    nucleus tenant import FILE [--key FILE] [--as-tenant T2] [--replace] [--keep-groups]
                               [--with-user-data] [--reembed]
        verified here first (MAC, SHA-256 of every member), then streamed to the running
        KnowledgeStore (gRPC ImportTenant), which verifies it again and imports it all or nothing.
        --key: the backup key of the stack that made the archive. User data (per-user votes, the
        search log, votes on federated sources, the vote log with comments, the votes that named a
        search) is imported under the archive's own tenant id;
        under --as-tenant only with --with-user-data. --reembed: the archive was made with another
        embedding model, or its tenant's model is `unknown` (its fingerprint, in the manifest):
        the texts are embedded again by this stack's model instead of refused.

The backup key travels to the store with the call (it MACs and verifies there) and is never
stored or logged by it.
"""
from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from rich.markup import escape

from cli.backup import key_file
from cli.snapshots import load_key
from cli.stack import console, credentials, target, tls_ca
from services.knowledge_store.archive_file import chunks_of, key_id, open_archive
from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import InvalidArgument


def _client(args: argparse.Namespace) -> KnowledgeStoreClient:
    return KnowledgeStoreClient(target(args, "knowledge_store"), interceptors=credentials(args, "knowledge_store"),
                                tls_ca_file=tls_ca(args))


def cmd_export(args: argparse.Namespace) -> int:
    path = Path(args.to).expanduser().resolve()
    if path.exists():
        raise InvalidArgument("to", f"{path} exists: name a new file")
    key = load_key(key_file(args), create=True)
    manifest = asyncio.run(export(args, path, key))
    counts = manifest["counts"]
    console.print(f"exported tenant {escape(args.tenant)} to {escape(str(path))}: {counts['artifact']} artifacts, "
                  f"{counts['profile']} profile versions, {counts['persona']} personas (backup key id "
                  f"{manifest['key_id']})")
    return 0


async def export(args: argparse.Namespace, path: Path, key: bytes) -> dict:
    """The tenant's archive written to `path` (module docstring); its manifest."""
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    client = _client(args)
    try:
        with os.fdopen(fd, "wb") as out:
            async for chunk in client.export_tenant(args.tenant, key):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        manifest = open_archive(tmp, key).manifest          # what arrived is whole
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        await client.close()
    return manifest


def cmd_import(args: argparse.Namespace) -> int:
    path = Path(args.file).expanduser().resolve()
    key = load_key(key_file(args))
    manifest = open_archive(path, key).manifest             # refused here before a byte is sent
    report = asyncio.run(import_file(args, path, key))
    console.print(f"imported tenant {escape(manifest['tenant'])} from {escape(str(path))} as "
                  f"{escape(report.tenant_id)}: {report.artifacts} artifacts, {report.entries} entries, "
                  f"{report.profiles} profile versions, {report.personas} personas, {report.user_records} user data "
                  f"records (backup key id {key_id(key)})")
    return 0


async def import_file(args: argparse.Namespace, path: Path, key: bytes):
    """The verified archive at `path` streamed to the running KnowledgeStore; its ImportReport."""
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in chunks_of(path):
            yield chunk

    client = _client(args)
    try:
        return await client.import_tenant(chunks(), key, as_tenant=args.as_tenant or "", replace=args.replace,
                                          keep_groups=args.keep_groups, with_user_data=args.with_user_data,
                                          reembed=args.reembed)
    finally:
        await client.close()


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tenant", help="move a tenant between stacks, tenant ids or backends as an archive file "
                                      "(operators): `tenant export`, `tenant import`")
    actions = t.add_subparsers(dest="action", required=True)
    e = actions.add_parser("export", help="write one tenant as an authenticated archive file")
    e.add_argument("--tenant", required=True, help="the tenant to export")
    e.add_argument("--to", required=True, help="the archive file to write (must not exist)")
    e.add_argument("--key", help="backup key file (default $NUCLEUS_BACKUP_KEY_FILE or <data dir>/backup.key)")
    e.add_argument("--knowledge-store-target", dest="knowledge_store_target")
    e.set_defaults(func=cmd_export)
    i = actions.add_parser("import", help="import a verified archive file into a tenant (all or nothing)")
    i.add_argument("file", help="the archive file")
    i.add_argument("--key", help="backup key file of the stack that made it (default this stack's)")
    i.add_argument("--as-tenant", dest="as_tenant", help="import under this tenant id (default the archive's)")
    i.add_argument("--replace", action="store_true", help="replace a tenant that holds data")
    i.add_argument("--keep-groups", dest="keep_groups", action="store_true",
                   help="keep group-only documents visible to their groups under another tenant id")
    i.add_argument("--with-user-data", dest="with_user_data", action="store_true",
                   help="with --as-tenant: import the user data too (per-user votes, the search log, votes "
                        "on federated sources, the vote log with comments, the votes that named a search; "
                        "always imported under the archive's own tenant id)")
    i.add_argument("--reembed", action="store_true",
                   help="embed the texts again with this stack's model (an archive of another or an unknown model)")
    i.add_argument("--knowledge-store-target", dest="knowledge_store_target")
    i.set_defaults(func=cmd_import)
