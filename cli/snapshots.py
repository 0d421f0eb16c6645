"""Snapshots on disk, without the CLI around them (cli/backup.py is the command): the backup key,
the manifest and its MAC, verification, retention, and installing tenants offline. Kept apart
from the commands so the reliability scenario (benchmarks/) can use them too.

    <snapshot>/manifest.json   SHA-256 and size of every file, the tenants (each with the point,
                               change-log seq, database id and entry count of its copy, and its
                               saved indexes), the stack files, `key_id`, whether secrets are in
    <snapshot>/manifest.mac    HMAC-SHA256 of "nucleus-backup-v1\n" + manifest.json, keyed with
                               the stack's backup key
    <snapshot>/tenants/        <tenant dir name>.sqlite and <tenant dir name>.derived/
    <snapshot>/stack/          the stack state; secrets as <name>.enc (AES-256-GCM)
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path

from shared.errors import FailedPrecondition, InvalidArgument, NotFound

FORMAT = 1
MANIFEST, MAC = "manifest.json", "manifest.mac"
MAC_CONTEXT = b"nucleus-backup-v1\n"
NAME = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")


def _sha256(path: Path) -> str:
    from services.knowledge_store.embedded.backup import sha256_of

    return sha256_of(path)


def _fsync_dir(path: Path) -> None:
    from services.knowledge_store.embedded.backup import fsync_path

    fsync_path(path)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def load_key(path: Path, *, create: bool = False) -> bytes:
    """The stack's backup key (32 random bytes, hex in a 0600 file); made when `create`."""
    if not path.is_file():
        if not create:
            raise NotFound(f"backup key {path} not found: pass the key of the stack that made the snapshot "
                           "with --key (or $NUCLEUS_BACKUP_KEY_FILE)")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    try:
        key = bytes.fromhex(path.read_text().strip())
    except ValueError as err:
        raise InvalidArgument("key", f"{path} must hold 64 hex digits") from err
    if len(key) < 32:
        raise InvalidArgument("key", f"{path} must hold 64 hex digits")
    return key


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"nucleus-backup-key-id" + key).hexdigest()[:16]


def mac_of(key: bytes, manifest_bytes: bytes) -> str:
    return hmac.new(key, MAC_CONTEXT + manifest_bytes, hashlib.sha256).hexdigest()


def _secret_cipher(key: bytes):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return AESGCM(HKDF(hashes.SHA256(), 32, salt=None, info=b"nucleus-backup-secrets").derive(key))


def write_snapshot(directory: Path, snapshots: list[dict], stack: list[tuple[str, Path | bytes, bool]], key: bytes,
                   *, with_secrets: bool) -> dict:
    """Add the stack state, the manifest and its MAC to a directory holding tenant snapshots."""
    tenants = {}
    for s in snapshots:
        path = directory / "tenants" / s["file"]
        if _sha256(path) != s["sha256"]:
            raise FailedPrecondition(f"snapshot file {path} changed after the KnowledgeStore wrote it")
        tenants[s["tenant_id"]] = {**{k: v for k, v in s.items() if k != "tenant_id"}, "file": f"tenants/{s['file']}"}
        derived = path.with_name(path.name[:-len(".sqlite")] + ".derived")      # its saved indexes, if copied
        tenants[s["tenant_id"]]["derived"] = {f"tenants/{derived.name}/{p.name}": _sha256(p)
                                              for p in sorted(derived.iterdir())} if derived.is_dir() else {}
    files: dict[str, dict] = {}
    cipher = _secret_cipher(key) if with_secrets else None
    (directory / "stack").mkdir(mode=0o700)
    for name, source, secret in stack:
        if secret and cipher is None:
            continue
        data = source if isinstance(source, bytes) else source.read_bytes()
        if secret:
            nonce = os.urandom(12)
            data = nonce + cipher.encrypt(nonce, data, name.encode())
        relative = f"stack/{name}" + (".enc" if secret else "")
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_private(path, data)
        files[relative] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "encrypted": secret,
                           "name": name}
    manifest = {"format": FORMAT, "kind": "nucleus-backup", "backend": "embedded", "created_unix": time.time(),
                "key_id": key_id(key), "tenants": tenants, "files": files,
                "secrets": "encrypted" if with_secrets else "left out"}
    body = json.dumps(manifest, sort_keys=True, indent=1).encode()
    _write_private(directory / MANIFEST, body)
    _write_private(directory / MAC, (mac_of(key, body) + "\n").encode())
    for sub in (directory / "tenants", directory / "stack", directory):
        _fsync_dir(sub)
    return manifest


def snapshots_in(root: Path) -> list[Path]:
    """Complete snapshots under `root`, oldest first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and NAME.match(p.name) and (p / MANIFEST).is_file()),
                  key=lambda p: p.name)


def prune(root: Path, keep: int) -> list[Path]:
    """Keep the newest `keep` complete snapshots (0 = keep all); remove staging left by a crash."""
    removed = []
    if keep > 0:
        for old in snapshots_in(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    for partial in root.glob(".partial-*"):
        if time.time() - partial.stat().st_mtime > 86_400:
            shutil.rmtree(partial, ignore_errors=True)
    return removed


def verify(directory: Path, key: bytes, *, integrity: bool = True) -> dict:
    """The snapshot's manifest once its MAC, every SHA-256 and (with `integrity`) every tenant
    database's integrity_check pass; FailedPrecondition naming the first failure otherwise."""
    from services.knowledge_store.embedded.backup import check_database

    try:
        body = (directory / MANIFEST).read_bytes()
        mac = (directory / MAC).read_text().strip()
    except OSError as err:
        raise FailedPrecondition(f"{directory} is not a complete snapshot: {err}") from err
    if not hmac.compare_digest(mac, mac_of(key, body)):
        theirs = ""
        try:
            theirs = json.loads(body).get("key_id", "")
        except ValueError:
            pass
        why = (f"it was made under another backup key (key id {theirs}, this stack's is {key_id(key)})"
               if theirs and theirs != key_id(key) else "the manifest or its MAC was changed")
        raise FailedPrecondition(f"snapshot {directory} refused: its manifest's MAC does not verify: {why}")
    manifest = json.loads(body)
    if manifest.get("format") != FORMAT or manifest.get("kind") != "nucleus-backup":
        raise FailedPrecondition(f"snapshot {directory} has format {manifest.get('format')!r}, expected {FORMAT}")
    entries = [(t["file"], t["sha256"]) for t in manifest["tenants"].values()]
    entries += [item for t in manifest["tenants"].values() for item in t.get("derived", {}).items()]
    entries += [(name, f["sha256"]) for name, f in manifest["files"].items()]
    for relative, digest in entries:
        path = directory / relative
        if ".." in Path(relative).parts or not path.is_file():
            raise FailedPrecondition(f"snapshot {directory} refused: {relative} is missing")
        if _sha256(path) != digest:
            raise FailedPrecondition(f"snapshot {directory} refused: {relative} does not match its SHA-256 in the "
                                     "manifest (changed or damaged)")
    if integrity:
        for tenant_id, t in manifest["tenants"].items():
            check_database(directory / t["file"], tenant_id)
    return manifest


def restore_offline(ks_data_dir: Path, directory: Path, manifest: dict, tenants: list[str]) -> None:
    """Install tenants into the data directory of a KnowledgeStore that is not running."""
    from services.knowledge_store.embedded import backup

    root = ks_data_dir / "tenants"
    for tenant_id in tenants:
        t = manifest["tenants"][tenant_id]
        staging, _ = backup.prepare(root, tenant_id, directory / t["file"], t["sha256"])
        backup.swap(root, tenant_id, staging)
