"""Disk space as operators read it: the free space of the file system holding a path, and byte
counts for people. Backend-neutral: the store's health (health.py) and the embedded backend's
storage faults (embedded/storage/faults.py) use it, and `nucleus status` prints with it."""
from __future__ import annotations

import shutil
from pathlib import Path


def free_space(path: Path) -> tuple[int, int]:
    """(free bytes, total bytes) of the file system holding `path` (or its nearest existing
    parent); (-1, -1) when it cannot be asked."""
    for candidate in (path, *path.parents):
        try:
            usage = shutil.disk_usage(candidate)
            return usage.free, usage.total
        except OSError:
            continue
    return -1, -1


def human_bytes(n: int) -> str:
    if n < 0:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
