"""The folder-sync manifest: for each file of a folder ingested into a tenant, its content
hash and the artifact ids it produced, so a re-run ingests only new or changed files and a
sync removes the artifacts of files that are gone.

Stored as JSON, replaced atomically (write to a temporary file, then `os.replace`) after each
committed batch, so an interrupted run or a killed watcher resumes from what was committed.
A file whose size and mtime are unchanged is not re-hashed. `base_url` is the folder's base URL
its files' `source_uri`s were made from (cli/folder_ingest.py), remembered for the next run.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

VERSION = 1


@dataclass(frozen=True, slots=True)
class FileRecord:
    sha256: str
    size: int
    mtime_ns: int
    artifact_ids: tuple[str, ...]


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def manifest_path(state_dir: Path, tenant: str, root: Path) -> Path:
    """Where the manifest of (tenant, folder) lives under `state_dir`."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return state_dir / "ingest" / tenant / f"{key}.json"


class Manifest:
    """path (relative to the folder, POSIX form) → FileRecord."""

    def __init__(self, path: Path, root: Path, files: dict[str, FileRecord] | None = None,
                 base_url: str = "") -> None:
        self.path = path
        self.root = root.resolve()
        self.files: dict[str, FileRecord] = dict(files or {})
        self.base_url = base_url

    @classmethod
    def load(cls, path: Path, root: Path) -> "Manifest":
        if not path.exists():
            return cls(path, root)
        data = json.loads(path.read_text(encoding="utf-8"))
        files = {rel: FileRecord(r["sha256"], r["size"], r["mtime_ns"], tuple(r["artifact_ids"]))
                 for rel, r in data.get("files", {}).items()}
        return cls(path, root, files, base_url=str(data.get("base_url") or ""))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": VERSION, "root": str(self.root), "base_url": self.base_url,
                "files": {rel: {**asdict(r), "artifact_ids": list(r.artifact_ids)}
                          for rel, r in sorted(self.files.items())}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)

    def key(self, path: Path) -> str:
        return path.resolve().relative_to(self.root).as_posix() if self.root.is_dir() else path.name

    def unchanged(self, path: Path) -> tuple[bool, str]:
        """(whether `path` is as recorded, its sha256 or '' when not hashed)."""
        record = self.files.get(self.key(path))
        st = path.stat()
        if record is not None and record.size == st.st_size and record.mtime_ns == st.st_mtime_ns:
            return True, record.sha256
        sha = file_sha256(path)
        return record is not None and record.sha256 == sha, sha

    def record(self, path: Path, sha256: str, artifact_ids: tuple[str, ...]) -> FileRecord | None:
        """Record `path` as ingested; returns the previous record."""
        st = path.stat()
        key = self.key(path)
        old = self.files.get(key)
        self.files[key] = FileRecord(sha256, st.st_size, st.st_mtime_ns, artifact_ids)
        return old

    def owner(self, artifact_id: str) -> str | None:
        return next((rel for rel, r in self.files.items() if artifact_id in r.artifact_ids), None)
