"""This stack's signing key for on-behalf-of assertions to peer Nucleus stacks.

    signer = StackSigner.load_or_create(data_dir, "stack-a")
    token = signer.sign(audience="stack-b", user="alice", groups=("eng",))
    python -m services.rag_pipeline.federation.assertion public-key --data-dir .nucleus-data

An Ed25519 key kept in `<data dir>/federation/stack_assertion.key` (mode 0600, made once). The
remote stack's operator puts the public key (`public-key` above) on the API key it gave this
stack (`peer_stack`, `peer_public_key`, `peer_groups` in its auth config; shared/auth/peer.py).
An assertion is a JWT: `iss` this stack's id, `aud` the remote stack's id, `sub` the user (as the
source's `identity` qualifies it), `groups`, `src_tenant`, valid two minutes, never a role and
never the caller's own token.
"""
from __future__ import annotations

import argparse
import os
import secrets
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from shared.auth.peer import LIFETIME_S

KEY_FILE = Path("federation") / "stack_assertion.key"


class StackSigner:
    def __init__(self, key: Ed25519PrivateKey, stack_id: str) -> None:
        self._key = key
        self.stack_id = stack_id

    @classmethod
    def load_or_create(cls, data_dir: Path, stack_id: str) -> "StackSigner":
        path = Path(data_dir) / KEY_FILE
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise SystemExit(f"{path}: not an Ed25519 private key")
            return cls(key, stack_id)
        key = Ed25519PrivateKey.generate()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        try:
            os.link(tmp, path)          # first writer wins; a concurrent start reads the winner's key
        except FileExistsError:
            os.unlink(tmp)
            return cls.load_or_create(data_dir, stack_id)
        os.unlink(tmp)
        return cls(key, stack_id)

    def public_pem(self) -> str:
        return self._key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")

    def sign(self, *, audience: str, user: str, groups: tuple[str, ...] = (), tenant: str = "") -> str:
        now = int(time.time())
        claims = {"iss": self.stack_id, "aud": audience, "sub": user, "groups": sorted(set(groups))[:256],
                  "src_tenant": tenant, "iat": now, "exp": now + LIFETIME_S, "jti": secrets.token_hex(8)}
        return jwt.encode(claims, self._key, algorithm="EdDSA")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="This stack's assertion key for peer Nucleus stacks.")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("public-key", help="print the public key (made on first use) for a peer's auth config")
    show.add_argument("--data-dir", type=Path, default=None, help="the stack's data dir (default NUCLEUS_DATA_DIR)")
    args = parser.parse_args(argv)
    from shared.settings import default_data_dir

    data_dir = args.data_dir or default_data_dir()
    print(StackSigner.load_or_create(data_dir, "").public_pem(), end="")


if __name__ == "__main__":
    main()
