"""Content capture: whether query / document text may go on spans, and putting it there.

Off by default; NUCLEUS_OTEL_CAPTURE_CONTENT=true turns it on (read once per process). The
exporters' safety net (`shared.telemetry.span_redaction`) drops such attributes again when
the SDK was set up with capture off. `opentelemetry-api` only.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from opentelemetry import trace

CAPTURE_CONTENT_ENV = "NUCLEUS_OTEL_CAPTURE_CONTENT"
CONTENT_MAX_CHARS = 1_024
_TRUE = {"1", "true", "yes", "on"}


@functools.cache
def capture_content() -> bool:
    """True when NUCLEUS_OTEL_CAPTURE_CONTENT is set to true/1/yes/on (read once per process)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE


def set_content_attribute(span: trace.Span, key: str, text: str | Sequence[str]) -> None:
    """Put query/document text on `span`, truncated, only when content capture is on."""
    if not capture_content() or not span.is_recording():
        return
    if isinstance(text, str):
        span.set_attribute(key, text[:CONTENT_MAX_CHARS])
    else:
        span.set_attribute(key, [t[:CONTENT_MAX_CHARS] for t in text])


__all__ = ["CAPTURE_CONTENT_ENV", "CONTENT_MAX_CHARS", "capture_content", "set_content_attribute"]
