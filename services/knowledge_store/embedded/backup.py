"""Online snapshots of tenants' databases, and their restore (the store's half of `nucleus backup`
and `nucleus restore`; the operator CLI, cli/backup.py, writes the manifest and its MAC).

    snapshot   SQLite's online backup API from a read-only connection of its own: one read
               transaction, so the copy is the database at one commit (ingest goes on: in WAL
               mode a reader never blocks the writer). Everything acknowledged before
               `point_unix` (taken before the copy starts) is in it. The copy is made
               self-contained (journal mode DELETE), checked with quick_check, fsynced, mode
               0600, renamed into place; its stamp (database id, change-log seq) and entry
               count are read from the copy itself. The tenant's saved indexes (persistence.py)
               are copied *first*, beside it in `<name>.derived/` (checked against their
               CRC-32s; skipped if a save replaced them meanwhile): their stamp is then at or
               before the database's, so a restored tenant loads them and replays the change log
               up to the snapshot instead of rebuilding (an HNSW rebuild takes minutes).
    prepare    a snapshot file copied into a staging directory beside the tenant's, its SHA-256
               compared with the manifest's, SQLite's full integrity_check run and its meta
               checked to hold this tenant — all before the tenant is touched; saved indexes
               beside it go along (the open checks their CRC-32s and stamp, else rebuilds)
    swap       the staging directory and the tenant's exchanged in one rename (renameat2
               RENAME_EXCHANGE; two renames where the kernel lacks it), then the old files
               removed. Online, the store closes the tenant first and answers UNAVAILABLE for
               it during the swap only (tenants.py `unavailable_for`); other tenants serve.

`Backups` is the store's half: its `backup` and `restore_tenant` (a mixin of core.KnowledgeStore).
"""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from services.knowledge_store import validation
from services.knowledge_store.embedded import catalog, persistence, storage
from shared.errors import FailedPrecondition, InvalidArgument, NotFound

if TYPE_CHECKING:
    from services.knowledge_store.embedded.tenants import Tenants

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class TenantSnapshot:
    tenant_id: str
    file: str                 # file name inside the snapshot's directory
    sha256: str
    bytes: int
    entries: int
    seq: int                  # the change-log seq (storage/index_log.py) the copy is at
    database_id: str
    point_unix: float         # everything acknowledged before this time is in the copy


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:               # some file systems refuse a directory fsync
        pass
    finally:
        os.close(fd)


def snapshot_file_name(tenant_id: str) -> str:
    return f"{storage.db.tenant_dir_name(tenant_id)}.sqlite"


def derived_dir_name(tenant_id: str) -> str:
    return f"{storage.db.tenant_dir_name(tenant_id)}.derived"


def _copy_private(source: Path, target: Path) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out, open(source, "rb") as f:
        shutil.copyfileobj(f, out, _CHUNK)
        out.flush()
        os.fsync(out.fileno())


def copy_derived(tenant_dir: Path, target: Path) -> bool:
    """Copy the tenant's saved indexes (manifest last) into `target`; False (nothing left
    behind) when there are none or a save replaced them while they were copied."""
    source = tenant_dir / persistence.DIR_NAME
    try:
        body = (source / persistence.MANIFEST).read_bytes()
        files = json.loads(body)["files"]
        target.mkdir(mode=0o700)
        for role in ("vectors", "keywords"):
            name = files[role]["name"]
            if "/" in name:
                raise ValueError(name)
            _copy_private(source / name, target / name)
            if persistence.crc32_of(target / name) != files[role]["crc32"]:
                raise ValueError(f"{name} changed while it was copied")
        fd = os.open(target / persistence.MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        fsync_path(target)
        return True
    except (OSError, ValueError, KeyError, TypeError):
        shutil.rmtree(target, ignore_errors=True)
        return False


def snapshot(source: Path, tenant_id: str, directory: Path) -> TenantSnapshot:
    """Copy the tenant database at `source` into `directory` (module docstring)."""
    if not source.is_file():
        raise NotFound(f"tenant '{tenant_id}' has no database to back up ({source})")
    copy_derived(source.parent, directory / derived_dir_name(tenant_id))      # first: its stamp <= the copy's
    target = directory / snapshot_file_name(tenant_id)
    tmp = target.with_name(target.name + ".tmp")
    point = time.time()
    src = storage.db.connect_for_scrub(source)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        dst = sqlite3.connect(tmp, isolation_level=None)
        try:
            src.backup(dst)                       # one step: one read transaction, one commit
            dst.execute("PRAGMA journal_mode = DELETE")
            found = [r[0] for r in dst.execute("PRAGMA quick_check(5)")]
            if found != ["ok"]:
                raise FailedPrecondition(f"the snapshot of tenant '{tenant_id}' fails quick_check "
                                         f"({'; '.join(found)}): {source} is damaged; not backed up")
            stamp = storage.index_log.stamp(dst)
            entries = storage.checks.cheap_count(dst)
            stored = storage.db.get_meta(dst, "tenant_id")
        finally:
            dst.close()
        if stored != tenant_id:
            raise FailedPrecondition(f"{source} holds tenant {stored!r}, not {tenant_id!r}")
        os.chmod(tmp, 0o600)
        fsync_path(tmp)
        os.replace(tmp, target)
        fsync_path(directory)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        src.close()
    return TenantSnapshot(tenant_id=tenant_id, file=target.name, sha256=sha256_of(target), bytes=target.stat().st_size,
                          entries=entries, seq=stamp.seq if stamp else 0,
                          database_id=stamp.database_id if stamp else "", point_unix=point)


def check_database(path: Path, tenant_id: str, *, full: bool = True) -> tuple[int, int, str]:
    """SQLite's integrity_check (quick_check unless `full`) of a snapshot file, opened read-only
    and immutable, and that it holds `tenant_id`: (entries, seq, database id), else
    FailedPrecondition saying what failed."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True, isolation_level=None)
    except sqlite3.Error as err:
        raise FailedPrecondition(f"snapshot {path} cannot be opened: {err}") from err
    try:
        pragma = "integrity_check(20)" if full else "quick_check(20)"
        found = [r[0] for r in conn.execute(f"PRAGMA {pragma}")]
        if found != ["ok"]:
            raise FailedPrecondition(f"snapshot {path} fails SQLite's {pragma.split('(')[0]}: {'; '.join(found[:5])}")
        stored = storage.db.get_meta(conn, "tenant_id")
        if stored != tenant_id:
            raise FailedPrecondition(f"snapshot {path} holds tenant {stored!r}, not {tenant_id!r}")
        stamp = storage.index_log.stamp(conn)
        return storage.checks.cheap_count(conn), stamp.seq if stamp else 0, stamp.database_id if stamp else ""
    except sqlite3.Error as err:
        raise FailedPrecondition(f"snapshot {path} is not a usable database: {type(err).__name__}: {err}") from err
    finally:
        conn.close()


def prepare(tenants_root: Path, tenant_id: str, source: Path, sha256: str) -> tuple[Path, TenantSnapshot]:
    """Stage `source` for the tenant (module docstring): (staging directory, what it holds)."""
    if not sha256 or len(sha256) != 64:
        raise InvalidArgument("sha256", "must be the 64 hex digits of the snapshot file's SHA-256 (from its manifest)")
    if not source.is_file():
        raise NotFound(f"snapshot file {source} does not exist")
    tenants_root.mkdir(parents=True, exist_ok=True)
    name = storage.db.tenant_dir_name(tenant_id)
    staging = tenants_root / f".restore-{name}-{os.getpid()}-{os.urandom(3).hex()}"
    staging.mkdir(mode=0o700)
    try:
        target = staging / storage.db.DB_FILE
        _copy_private(source, target)
        if sha256_of(target) != sha256.lower():
            raise FailedPrecondition(f"snapshot file {source} does not match its manifest's SHA-256: refused")
        entries, seq, database_id = check_database(target, tenant_id)
        derived = source.with_name(derived_dir_name(tenant_id))
        if derived.is_dir():
            _stage_derived(derived, staging / persistence.DIR_NAME)
        fsync_path(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, TenantSnapshot(tenant_id=tenant_id, file=source.name, sha256=sha256.lower(),
                                   bytes=target.stat().st_size, entries=entries, seq=seq, database_id=database_id,
                                   point_unix=0.0)


def _stage_derived(source: Path, target: Path) -> None:
    """Saved indexes of a snapshot into the staging directory (manifest last); the tenant's open
    checks their checksums and stamp and rebuilds from SQLite when they do not fit."""
    try:
        target.mkdir(mode=0o700)
        names = sorted(p.name for p in source.iterdir() if p.name != persistence.MANIFEST)
        for name in names:
            _copy_private(source / name, target / name)
        _copy_private(source / persistence.MANIFEST, target / persistence.MANIFEST)
    except OSError:
        shutil.rmtree(target, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one rename (Linux renameat2); False where it is not available."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (38, 22, 95):       # ENOSYS, EINVAL, EOPNOTSUPP: the file system cannot exchange
        return False
    raise OSError(err, f"exchanging {a} and {b}: {os.strerror(err)}")


def swap(tenants_root: Path, tenant_id: str, staging: Path) -> None:
    """Put the staged database in the tenant's place (the tenant must be closed)."""
    target = tenants_root / storage.db.tenant_dir_name(tenant_id)
    if target.exists():
        if not _exchange(staging, target):
            old = staging.with_name(staging.name + ".old")
            os.rename(target, old)
            os.rename(staging, target)
            staging = old
        fsync_path(tenants_root)
        shutil.rmtree(staging, ignore_errors=True)      # now the old files
    else:
        os.rename(staging, target)
        fsync_path(tenants_root)


class Backups:
    """The store's backups and restores (a mixin of core.KnowledgeStore: `self._tenants` is the
    store's; `self._forget_data_id` drops its cached `data_id` of a tenant swapped out)."""

    _tenants: Tenants
    _forget_data_id: Callable[[str], None]

    async def backup(self, tenant_ids: Sequence[str], directory: Path,
                     final_directory: Path | None = None) -> list[TenantSnapshot]:
        """Online snapshots of `tenant_ids` (every tenant when empty) into `directory` (module
        docstring); ingest goes on meanwhile. The snapshot is remembered as `final_directory`
        (where the operator's CLI renames it once its manifest is written) so problems can name it."""
        ids = list(tenant_ids) or self._tenants.ids()
        for tenant_id in ids:
            validation.tenant_id(tenant_id)
        directory = Path(directory)
        if not directory.is_dir():
            raise NotFound(f"backup directory {directory} does not exist")

        def run() -> list[TenantSnapshot]:
            return [snapshot(self._tenants.database_path(t), t, directory) for t in ids]

        snapshots = await asyncio.to_thread(run)
        catalog.record(Path(self._tenants.settings.data_dir), Path(final_directory or directory), ids,
                       int(min((s.point_unix for s in snapshots), default=time.time())))
        return snapshots

    async def restore_tenant(self, tenant_id: str, source: Path, sha256: str) -> tuple[TenantSnapshot, float]:
        """Replace the tenant's database by the snapshot file `source` (its SHA-256 from the
        manifest): staged and verified first, then swapped while only this tenant answers
        UNAVAILABLE. Returns (what is now served, seconds the tenant was unavailable)."""
        validation.tenant_id(tenant_id)
        if self._tenants.settings.read_only:
            raise FailedPrecondition("the KnowledgeStore is configured read-only: a restore is refused")
        root = Path(self._tenants.settings.data_dir) / "tenants"
        staging, restored = await asyncio.to_thread(prepare, root, tenant_id, Path(source), sha256)

        def exchange() -> float:
            started = time.perf_counter()
            with self._tenants.unavailable_for(tenant_id, f"from {source}"):
                swap(root, tenant_id, staging)
                self._forget_data_id(tenant_id)
            return time.perf_counter() - started

        return restored, await asyncio.to_thread(exchange)
