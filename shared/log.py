"""Logging set-up: one call in each `main()`. Logs go to stderr (stdio MCP owns stdout).

A redacting filter removes anything that looks like a secret (Bearer tokens, API keys,
signed-link signatures) from every record, whatever logger produced it.
"""
from __future__ import annotations

import logging
import re
import sys

_SECRET_PATTERNS = [
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|sig|signature|password|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,}]{4,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),  # JWTs
]
_extra_secrets: set[str] = set()


def register_secret(value: str) -> None:
    """Make `value` (a configured key) redacted wherever it appears in a log line."""
    if value and len(value) >= 4:
        _extra_secrets.add(value)


def redact(text: str) -> str:
    for secret in _extra_secrets:
        text = text.replace(secret, "[REDACTED]")
    for pat in _SECRET_PATTERNS:
        text = pat.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
    return text


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not kill logging
            return True
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def configure_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    for noisy in ("httpx", "httpcore", "uvicorn.access", "sentence_transformers", "faiss"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
