"""The backups this store has taken, so a problem can name the newest one that would restore it.

`<data_dir>/backups.json` lists each snapshot the store wrote (backup.py): its final directory,
when it was taken and its tenants. The list is a hint, not the backup: `newest` only names a
snapshot whose directory still holds a manifest (the operator's `nucleus backup verify` checks
it in full), and a missing or unreadable catalog is an empty one.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

FILE = "backups.json"
KEEP = 200                        # entries remembered (old ones whose directory is gone are dropped first)
_lock = threading.Lock()


def _read(data_dir: Path) -> list[dict]:
    try:
        entries = json.loads((Path(data_dir) / FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("path"), str)] \
        if isinstance(entries, list) else []


def record(data_dir: Path, path: Path, tenants: list[str], taken_unix: int) -> None:
    """Remember a snapshot written to `path` (its manifest is written by the operator CLI last)."""
    with _lock:
        entries = [e for e in _read(data_dir) if e["path"] != str(path)]
        entries.append({"path": str(path), "taken_unix": int(taken_unix), "tenants": sorted(tenants)})
        if len(entries) > KEEP:
            alive = [e for e in entries if (Path(e["path"]) / "manifest.json").is_file()]
            entries = (alive if len(alive) <= KEEP else alive[-KEEP:])
        target = Path(data_dir) / FILE
        tmp = target.with_suffix(".json.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entries, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as err:
            log.warning("could not record the backup %s in %s: %s", path, target, err)


def newest(data_dir: Path, tenant_id: str) -> tuple[str, int] | None:
    """(directory, taken_unix) of the newest snapshot holding `tenant_id` that still exists."""
    for entry in sorted(_read(data_dir), key=lambda e: e.get("taken_unix", 0), reverse=True):
        if tenant_id in entry.get("tenants", ()) and (Path(entry["path"]) / "manifest.json").is_file():
            return entry["path"], int(entry.get("taken_unix", 0))
    return None


def note(data_dir: Path, tenant_id: str) -> str:
    """"; newest backup: DIR (taken …)" — what to restore the tenant from — or that none is known."""
    found = newest(data_dir, tenant_id)
    if found is None:
        return "; no backup of this tenant is known (`nucleus backup` makes one)"
    taken = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(found[1]))
    return f"; newest backup: {found[0]} (taken {taken}; `nucleus restore {found[0]} --tenant {tenant_id}`)"
