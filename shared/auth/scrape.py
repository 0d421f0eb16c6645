"""Who may read `/metrics` when authentication is on: the series name tenants' sources, storage
state and traffic, so they are for operators only.

    ScrapeAuth(identity_dir, audience)  .allows(authorization_header) -> bool: the scrape token,
                                        or an operator token of the trust bundle for this service

The scrape token is `<identity dir>/metrics-scrape.token` (`scrape_token_file`, made with the
identities by shared/auth/service_identity.py), the bearer token Prometheus sends
(`credentials_file` in the shipped scrape config). It is compared in constant time against its
SHA-256 (the token itself is read once, hashed, and not kept). No identity directory =
authentication off: `/metrics` is open, as every other port of the 127.0.0.1 development stack.
"""
from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from shared.auth.service_identity import ServiceVerifier, ensure_scrape_token
from shared.errors import NucleusError
from shared.identity import OPERATOR


class ScrapeAuth:
    """`allows(header)`: the scrape token or an operator token for `audience` (module docstring)."""

    def __init__(self, identity_dir: Path, audience: str) -> None:
        self._verifier = ServiceVerifier(Path(identity_dir), audience)
        path = ensure_scrape_token(Path(identity_dir))
        self._digest = b""
        if path is not None:
            try:
                token = path.read_text().strip()
            except OSError:
                token = ""
            self._digest = hashlib.sha256(token.encode()).digest() if token else b""

    def allows(self, authorization: str) -> bool:
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential or len(credential) > 8192:
            return False
        if self._digest and hmac.compare_digest(hashlib.sha256(credential.encode()).digest(), self._digest):
            return True
        try:
            return self._verifier.verify(credential).has_role(OPERATOR)
        except NucleusError:
            return False


__all__ = ["ScrapeAuth"]
