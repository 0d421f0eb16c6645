"""API keys: made here, stored only as SHA-256 hashes, printed once.

    hash_key() / fingerprint()   the stored hash of a key; a short non-reversible name for a
                                 credential (what AccessToken.token holds instead of the token)
    add_key()                    make a key and append its hash to the auth config file
    main()                       python -m shared.auth new-key --tenant T --user U
                                 [--groups a,b] [--roles admin] [--trusted-platform]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shared.auth.config import ApiKeyEntry, AuthConfig

KEY_PREFIX = "nrk_"                      # "nucleus rag key": makes keys recognisable in leaks


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def fingerprint(token: str) -> str:
    """A short, non-reversible name for a credential (what AccessToken.token holds)."""
    return "fp:" + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:16]


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_key(path: Path, *, tenant: str, user: str, groups: list[str], trusted_platform: bool,
            key_id: str = "", roles: list[str] | None = None) -> tuple[str, ApiKeyEntry]:
    """Make a key, append its hash to the config at `path` (created if missing). Returns (key, entry)."""
    path = Path(path)
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"version": 1}
    AuthConfig.model_validate(raw)
    key = new_key()
    entry = ApiKeyEntry(key_id=key_id or f"k-{secrets.token_hex(4)}", sha256=hash_key(key), tenant=tenant,
                        user=user, groups=groups, roles=roles or [], trusted_platform=trusted_platform,
                        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    raw = {**raw, "api_keys": [*raw.get("api_keys", []), entry.model_dump()]}
    AuthConfig.model_validate(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return key, entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.auth", description="Manage Nucleus RAG API keys")
    sub = parser.add_subparsers(dest="command", required=True)
    nk = sub.add_parser("new-key", help="make an API key, print it once, append its hash to the auth config")
    nk.add_argument("--config", type=Path, default=None,
                    help="auth config file (default: the setting NUCLEUS_RAG_AUTH_CONFIG, else ./auth.json)")
    nk.add_argument("--tenant", required=True)
    nk.add_argument("--user", required=True)
    nk.add_argument("--groups", default="", help="comma-separated visibility groups")
    nk.add_argument("--key-id", default="", help="a name for the key (default: random)")
    nk.add_argument("--roles", default="", help="comma-separated roles, e.g. admin (tenant-wide changes)")
    nk.add_argument("--trusted-platform", action="store_true",
                    help="the key may assert x-user-id / x-session-tags for users of its tenant")
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    try:
        if args.config is None:
            from shared.settings import RagPipelineSettings     # the composition root reads the setting
            args.config = RagPipelineSettings().auth_config or Path("auth.json")
        key, entry = add_key(args.config, tenant=args.tenant, user=args.user, groups=groups,
                             trusted_platform=args.trusted_platform, key_id=args.key_id, roles=roles)
    except (ValidationError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(key)
    print(f"key_id={entry.key_id} tenant={entry.tenant} user={entry.user} groups={','.join(entry.groups) or '-'} "
          f"roles={','.join(entry.roles) or '-'} "
          f"trusted_platform={str(entry.trusted_platform).lower()} -> {args.config} "
          "(the key is shown only now; only its SHA-256 is stored)", file=sys.stderr)
    return 0


__all__ = ["KEY_PREFIX", "hash_key", "fingerprint", "new_key", "add_key", "main"]
