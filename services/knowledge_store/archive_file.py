"""The portable tenant archive's file: JSON lines, authenticated with the stack's backup key.

    line 1       {"format": "nucleus-tenant-archive", "version": 5}
    records      {"kind": "artifact" | "profile" | "persona" | "vote" | "search" | "source_vote" |
                 "feedback" | "search_vote", ...}, one a line (archive.py)
    manifest     {"manifest": {format, version, tenant, model {name, dimension}, created_unix,
                  counts {kind: n}, sha256 {kind: hex of that kind's lines}, grouped_artifacts,
                  key_id}}
    MAC          {"mac": HMAC-SHA256 of the canonical manifest, keyed with the backup key}

Each kind of record is a member: its SHA-256 is over its lines, in order, and the manifest
holding them is MAC'd, so one MAC covers every byte. `open_archive` refuses, before a record is
read, an archive without its manifest and MAC at the end (truncated), a MAC that does not verify
(a changed manifest, another stack's key: `--key`) and a member whose SHA-256 or count differs (a
changed byte); `Archive.records` hashes again as it reads, and raises at the end if the file
changed in between (an import commits only after the last record). Written 0600 beside the
target and renamed into place; it holds no secrets. A kind newer than the archive's format (user
data before 3, the vote log and search votes before 5: SINCE) must be empty in it, or the archive
is refused; `vote_log` is the vote log's canonical form, the same from either backend.

Over the wire (ExportTenant / ImportTenant) the file travels as chunks of CHUNK_BYTES; the store
writes it to a 0600 file of its own in its data directory (`scratch`, removed after the call),
never to a path a caller names, and takes at most MAX_ARCHIVE_BYTES in.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shutil
import time
from collections.abc import AsyncIterable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared.errors import FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)

FORMAT = "nucleus-tenant-archive"
VERSION = 5                         # 2: entries carry `text_hash`; 3: user data (archive.py); 4: entries carry
READS = (1, 2, 3, 4, 5)             # `span` when known; 5: the vote log and search votes; 1-4 still import
# user data (left out under another tenant: archive.py); searches before the votes that name them
USER_KINDS = ("vote", "search", "source_vote", "feedback", "search_vote")
KINDS = ("artifact", "profile", "persona", *USER_KINDS)
SINCE = {"vote": 3, "search": 3, "source_vote": 3, "feedback": 5, "search_vote": 5}   # kind -> first format
#: The vote log's canonical order (`vote_log`)
LOG_ORDER = ("created_unix", "artifact_id", "user_id", "target", "target_id", "helpful", "search_id", "comment")
_EMPTY = hashlib.sha256().hexdigest()
_MAC_CONTEXT = b"nucleus-tenant-archive-v1\0"
CHUNK_BYTES = 1 << 20               # an archive streamed in pieces of 1 MiB
MAX_ARCHIVE_BYTES = 16 << 30        # the largest archive a store takes in (on its disk while imported)
MIN_KEY_BYTES = 32                  # a backup key's length (cli/snapshots.py `load_key`)


def key_id(key: bytes) -> str:
    """The backup key's public id (as backup snapshots name it)."""
    return hashlib.sha256(b"nucleus-backup-key-id" + key).hexdigest()[:16]


def check_key(key: bytes) -> bytes:
    """`key` if it can be a backup key; InvalidArgument naming the field otherwise."""
    if len(key) < MIN_KEY_BYTES:
        raise InvalidArgument("backup_key", f"must be the stack's backup key ({MIN_KEY_BYTES} bytes or more), "
                                            f"got {len(key)} bytes")
    return key


@contextmanager
def scratch(directory: Path, purpose: str) -> Iterator[Path]:
    """A name for an archive file of the store's own in `directory`, removed afterwards."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f".archive-{purpose}-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def sweep(directory: Path, patterns: tuple[str, ...] = (".archive-*",)) -> list[Path]:
    """Remove the files (and directories) matching `patterns` named by `scratch` (or another
    `.<kind>-<purpose>-<pid>-<random>` name) whose process no longer runs (a kill -9 during an
    import or export); the paths removed. Run when a store opens."""
    removed = []
    for path in (p for pattern in patterns for p in directory.glob(pattern)):
        try:
            pid = int(path.name.rsplit("-", 2)[-2])
            os.kill(pid, 0)
            continue                           # its process runs: in use
        except ProcessLookupError:
            pass
        except (ValueError, IndexError, PermissionError):
            continue                           # not ours, or not ours to judge
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        log.warning("removed %s, left by an import or export whose process is gone", path.name)
        removed.append(path)
    return removed


async def receive(path: Path, chunks: AsyncIterable[bytes]) -> int:
    """`chunks` written to the new file `path` (0600); InvalidArgument past MAX_ARCHIVE_BYTES."""
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        async for chunk in chunks:
            size += len(chunk)
            if size > MAX_ARCHIVE_BYTES:
                raise InvalidArgument("data", f"the archive is larger than {MAX_ARCHIVE_BYTES >> 30} GiB, the "
                                              "most a store takes in")
            out.write(chunk)
    return size


def chunks_of(path: Path) -> Iterator[bytes]:
    """The file at `path` in pieces of CHUNK_BYTES."""
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def vote_log(log: Iterable[dict], search_votes: Iterable[dict]) -> list[dict]:
    """The vote log (`feedback` records: every vote on a document, with its comment) in canonical
    order (LOG_ORDER), each vote with the id of the search it named: the least search id of the
    `search_votes` of the same target, user, answer and second, "" for none. Both backends
    derive it alike from what each keeps (the embedded `search_votes` table; Qdrant's search ids
    in its feedback log), so their archives of one tenant agree record for record."""
    named: dict[tuple, str] = {}
    for v in search_votes:
        k = (v["target_id"], v["user_id"], bool(v["helpful"]), v["created_unix"])
        named[k] = min(named.get(k, v["search_id"]), v["search_id"])
    out = [{**r, "kind": "feedback", "helpful": bool(r["helpful"]),
            "search_id": named.get((r["target_id"], r["user_id"], bool(r["helpful"]), r["created_unix"]), "")}
           for r in log]
    return sorted(out, key=lambda r: tuple(r[f] for f in LOG_ORDER))


def _canonical(manifest: dict) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def mac_of(key: bytes, manifest: dict) -> str:
    return hmac.new(key, _MAC_CONTEXT + _canonical(manifest), hashlib.sha256).hexdigest()


def _line(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n"


async def write_archive(path: Path, key: bytes, tenant_id: str, model: dict, records: AsyncIterable[dict]) -> dict:
    """Write `records` as an archive at `path` (0600, complete or absent); returns its manifest."""
    if path.exists():
        raise InvalidArgument("to", f"{path} exists: name a new file")
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    hashes = {k: hashlib.sha256() for k in KINDS}
    counts = dict.fromkeys(KINDS, 0)
    grouped = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_line({"format": FORMAT, "version": VERSION}))
            async for record in records:
                kind = record["kind"]
                line = _line(record)
                hashes[kind].update(line)
                counts[kind] += 1
                grouped += bool(kind == "artifact" and record["artifact"]["visibility_groups"])
                out.write(line)
            manifest = {"format": FORMAT, "version": VERSION, "tenant": tenant_id, "model": model,
                        "created_unix": int(time.time()), "counts": counts,
                        "sha256": {k: h.hexdigest() for k, h in hashes.items()}, "grouped_artifacts": grouped,
                        "key_id": key_id(key)}
            out.write(_line({"manifest": manifest}))
            out.write(_line({"mac": mac_of(key, manifest)}))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest


@dataclass(frozen=True, slots=True)
class Archive:
    """A verified archive: its manifest, and its records read again on demand."""
    path: Path
    manifest: dict

    def records(self) -> Iterator[dict]:
        """Every record in order; FailedPrecondition at the end if the file changed since it was opened."""
        hashes = {k: hashlib.sha256() for k in KINDS}
        with open(self.path, "rb") as f:
            f.readline()
            for line in f:
                if line.startswith(b'{"manifest":'):
                    break
                record = json.loads(line)
                hashes[record["kind"]].update(line)
                yield record
        if any(h.hexdigest() != self.manifest["sha256"].get(k, _EMPTY) for k, h in hashes.items()):
            raise FailedPrecondition(f"archive {self.path} changed while it was read: refused")

    def has_user_data(self) -> bool:
        return any(self.manifest["counts"].get(k) for k in USER_KINDS)


def open_archive(path: Path, key: bytes) -> Archive:
    """Verify the archive at `path` (module docstring) and return it; FailedPrecondition naming
    the problem otherwise."""
    if not path.is_file():
        raise InvalidArgument("file", f"{path} is not a file")
    hashes = {k: hashlib.sha256() for k in KINDS}
    counts = dict.fromkeys(KINDS, 0)
    tail: list[bytes] = []
    with open(path, "rb") as f:
        head = f.readline()
        try:
            header = json.loads(head)
        except ValueError:
            header = {}
        if header.get("format") != FORMAT:
            raise FailedPrecondition(f"{path} is not a Nucleus tenant archive")
        if header.get("version") not in READS:
            raise FailedPrecondition(f"{path} is archive format version {header.get('version')}; this Nucleus "
                                     f"reads versions {', '.join(map(str, READS))}")
        for line in f:
            if tail or line.startswith(b'{"manifest":'):
                tail.append(line)
                continue
            try:
                kind = json.loads(line)["kind"]
                hashes[kind].update(line)
                counts[kind] += 1
            except (ValueError, KeyError, TypeError):
                raise FailedPrecondition(f"archive {path} has a damaged record (line {sum(counts.values()) + 2})"
                                         ": refused") from None
    try:
        manifest, mac = json.loads(tail[0])["manifest"], json.loads(tail[1])["mac"]
        whole = len(tail) == 2 and tail[1].endswith(b"\n")
    except (IndexError, ValueError, KeyError, TypeError):
        whole = False
    if not whole:
        raise FailedPrecondition(f"archive {path} is truncated or damaged at its end (no manifest and MAC): refused")
    if not hmac.compare_digest(str(mac), mac_of(key, manifest)):
        theirs = manifest.get("key_id", "") if isinstance(manifest, dict) else ""
        why = (f"it was made under another backup key (key id {theirs}, this one's is {key_id(key)}): pass that "
               "stack's key with --key" if theirs and theirs != key_id(key) else "its manifest or MAC was changed")
        raise FailedPrecondition(f"archive {path}: the MAC does not verify, {why}: refused")
    for kind in KINDS:
        if counts[kind] and header["version"] < SINCE.get(kind, 1):
            raise FailedPrecondition(f"archive {path} is format {header['version']}, which has no {kind} records, "
                                     "yet holds some: refused")
        # a member a manifest of an older format does not name must be empty
        if hashes[kind].hexdigest() != manifest["sha256"].get(kind, _EMPTY) or \
                counts[kind] != manifest["counts"].get(kind, 0):
            raise FailedPrecondition(f"archive {path}: its {kind} records do not match the manifest's SHA-256 "
                                     "(a changed byte): refused")
    return Archive(path, manifest)
