"""Keep API keys out of error messages, logs, traces and prompts.

`Redactor(secrets).redact(text)` replaces every configured secret value, any
`Bearer <token>` (token of 8+ characters) and any `sk-…` style key with `[REDACTED]`. Every message the HTTP layer
raises or logs goes through it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 4   # shorter values are not treated as secrets (replacing them would shred text)

_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{6,}")


class Redactor:
    """Replaces known secret values and key-shaped tokens in text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self._secrets = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS},
                               key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        text = _BEARER.sub(f"Bearer {REDACTED}", text)
        return _SK_KEY.sub(f"sk-{REDACTED}", text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """One-off form of `Redactor(secrets).redact(text)`."""
    return Redactor(secrets).redact(text)
