"""Storage faults as typed errors an operator can act on, and the kind of problem each one is.

    SQLITE_FULL, ENOSPC, EDQUOT                  StorageFull (RESOURCE_EXHAUSTED): the data
                                                 directory and its free space        "full"
    SQLITE_READONLY, EROFS, EACCES, EPERM        FailedPrecondition: the path is read-only;
                                                 searches are still served           "read_only"
    SQLITE_CORRUPT, SQLITE_NOTADB                FailedPrecondition: the tenant's database is
                                                 corrupted; other tenants are served "corrupt"
    SQLITE_IOERR with no free space left         StorageFull                         "full"
    SQLITE_IOERR in a directory refusing writes  FailedPrecondition                  "read_only"
    SQLITE_CANTOPEN, SQLITE_IOERR, other OSError Unavailable: the path and the cause "unavailable"
    SQLITE_BUSY, SQLITE_LOCKED                   Unavailable: retry                  "busy"
    anything else from SQLite                    NucleusError (INTERNAL) with the path

`translate` returns the error and its kind; the caller (storage/db.py) reports the kind to
the store's health (../../health.py) and raises the error from the original one.
"""
from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from services.knowledge_store.disk import free_space, human_bytes
from shared.errors import FailedPrecondition, NucleusError, StorageFull, Unavailable

# Primary SQLite result codes (the low byte of an extended code).
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY = 3, 5, 6, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN = 10, 11, 13, 14
SQLITE_AUTH, SQLITE_NOTADB = 23, 26

FULL, READ_ONLY, CORRUPT = "full", "read_only", "corrupt"
UNAVAILABLE, BUSY, INTERNAL = "unavailable", "busy", "internal"
CORRUPT_ROWS, LOST_COMMITS = "corrupt_rows", "lost_commits"     # rows failing checksums; see rowsums.py, tenants.py

# Below this much free space an I/O error is taken for a full disk.
NEARLY_FULL_BYTES = 1 << 20


def space_note(data_dir: Path) -> str:
    free, total = free_space(data_dir)
    return f"data directory {data_dir}: {human_bytes(free)} free of {human_bytes(total)}"


def primary_code(err: sqlite3.Error) -> int:
    return (getattr(err, "sqlite_errorcode", None) or 0) & 0xFF


def classify(err: BaseException, data_dir: Path) -> str:
    """The kind of problem `err` is (module docstring)."""
    if isinstance(err, sqlite3.Error):
        code = primary_code(err)
        if code == SQLITE_FULL:
            return FULL
        if code == SQLITE_READONLY:
            return READ_ONLY
        if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
            return CORRUPT
        if code in (SQLITE_BUSY, SQLITE_LOCKED):
            return BUSY
        if code == SQLITE_IOERR:
            free, _ = free_space(data_dir)
            if 0 <= free < NEARLY_FULL_BYTES:
                return FULL
            return READ_ONLY if data_dir.is_dir() and not os.access(data_dir, os.W_OK) else UNAVAILABLE
        if code in (SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_AUTH):
            return UNAVAILABLE
        if "malformed" in str(err) or "not a database" in str(err):
            return CORRUPT
        return INTERNAL
    if isinstance(err, OSError):
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            return FULL
        if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return READ_ONLY
        return UNAVAILABLE
    return INTERNAL


def translate(err: BaseException, *, tenant_id: str, path: Path, data_dir: Path,
              action: str) -> tuple[NucleusError, str]:
    """(the typed error for `err`, its kind). `action` says what failed ("ingest", "search", …);
    `path` is the tenant's database file."""
    kind = classify(err, data_dir)
    cause = f"{type(err).__name__}: {err}"
    if kind == FULL:
        return StorageFull(f"no space left to store tenant '{tenant_id}': the {action} was not applied "
                           f"({space_note(data_dir)}; {cause}); free space, then retry"), kind
    if kind == READ_ONLY:
        return FailedPrecondition(f"tenant '{tenant_id}' cannot be written: {path} is read-only ({cause}); "
                                  "searches are still served, writes are refused until the data "
                                  "directory is writable and the KnowledgeStore restarted"), kind
    if kind == CORRUPT:
        return FailedPrecondition(f"tenant '{tenant_id}' is corrupted: {path} ({cause}); other tenants are "
                                  "served; restore the file from a backup, or move its directory away and "
                                  "re-ingest the tenant"), kind
    if kind == BUSY:
        return Unavailable(f"tenant '{tenant_id}' database {path} is busy ({cause}); retry"), kind
    if kind == UNAVAILABLE:
        return Unavailable(f"tenant '{tenant_id}' database {path} cannot be used for the {action} "
                           f"({cause})"), kind
    return NucleusError(f"storage error in the {action} of tenant '{tenant_id}' on {path}: {cause}"), kind
