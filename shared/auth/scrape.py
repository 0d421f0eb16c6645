"""Who may read `/metrics` when authentication is on: the series name tenants' sources, storage
state and traffic, so they are for operators only.

    scrape_token_file(identity_dir)     <identity dir>/metrics-scrape.token: the bearer token
                                        Prometheus sends (`credentials_file` in the shipped
                                        scrape config); 0600, made once by `ensure_scrape_token`
    ScrapeAuth(identity_dir, audience)  .allows(authorization_header) -> bool: that token, or an
                                        operator token of the trust bundle for this service

The token is compared in constant time against its SHA-256 (the token itself is read once,
hashed, and not kept). No identity directory = authentication off: `/metrics` is open, as every
other port of the 127.0.0.1 development stack.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from shared.errors import NucleusError
from shared.identity import OPERATOR

log = logging.getLogger(__name__)

SCRAPE_TOKEN_FILE = "metrics-scrape.token"


def scrape_token_file(identity_dir: Path) -> Path:
    return Path(identity_dir) / SCRAPE_TOKEN_FILE


def ensure_scrape_token(identity_dir: Path) -> Path | None:
    """Make the scrape token once (O_EXCL: several services starting at once make one); None when
    the directory is read-only and has none (then only operator tokens are accepted)."""
    path = scrape_token_file(identity_dir)
    if path.exists():
        return path
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    except OSError as err:
        log.warning("no metrics scrape token (%s); /metrics accepts operator tokens only", err.strerror)
        return None
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return path


class ScrapeAuth:
    """`allows(header)`: the scrape token or an operator token for `audience` (module docstring)."""

    def __init__(self, identity_dir: Path, audience: str) -> None:
        from shared.auth.service_identity import ServiceVerifier

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


__all__ = ["SCRAPE_TOKEN_FILE", "ScrapeAuth", "ensure_scrape_token", "scrape_token_file"]
