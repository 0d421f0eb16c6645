"""Keep secrets out of logs, error messages, traces and prompts: the one redaction mechanism.

`Redactor(secrets).redact(text)` replaces the given secret values and every value registered
process-wide with `register_secret` (configured API keys, link secrets), longest first so a
secret containing another is replaced whole, then anything secret-shaped: `Bearer <token>`,
`sk-…` keys, `api_key=…` / `token: …`-style assignments, and JWTs. Used by the logging filter
(shared/log.py), the span sanitiser (shared/telemetry/span_redaction.py) and the LLM HTTP layer.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 4   # shorter values are not treated as secrets (replacing them would shred text)

_PATTERNS = [
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"(\bsk-)[A-Za-z0-9_-]{6,}"),
    # an assignment's value, unless it is a scheme word ("Authorization: Bearer …", handled
    # above) or already redacted
    re.compile(r"(?i)((?:api[_-]?key|token|secret|sig|signature|password|authorization)[\"']?\s*[:=]\s*[\"']?)"
               r"(?!bearer\b|basic\b|\[REDACTED\])[^\s\"'&,}]{4,}"),
    re.compile(r"()\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),  # JWTs
]
_registered: set[str] = set()


def register_secret(value: str) -> None:
    """Make `value` (a configured key) redacted wherever any Redactor meets it."""
    if value and len(value) >= MIN_SECRET_CHARS:
        _registered.add(value)


class Redactor:
    """Replaces known secret values and secret-shaped tokens in text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._own = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}

    def redact(self, text: str) -> str:
        for secret in sorted(self._own | _registered, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        return text


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """One-off form of `Redactor(secrets).redact(text)`."""
    return Redactor(secrets).redact(text)
