"""Logging set-up: one call in each `main()`. Logs go to stderr (stdio MCP owns stdout).

A redacting filter (shared/redaction.py) removes anything that looks like a secret (Bearer
tokens, API keys, signed-link signatures, registered keys) from every record, whatever logger
produced it.
"""
from __future__ import annotations

import logging
import sys

from shared.redaction import redact, register_secret

__all__ = ["configure_logging", "redact", "register_secret", "RedactingFilter"]


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
