"""The safety net in front of every span exporter: no secrets, and no user content unless
content capture is on.

    Redactor                  cleans one ended span (attributes, event attributes, status)
    RedactingSpanProcessor    a batch span processor whose exporters only ever receive spans
                              cleaned by its Redactor, on the processor's worker thread

Secret-shaped text is found by `shared.redaction.redact` (the one redaction mechanism);
this module adds what is particular to spans: credential and content attribute keys.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace.status import Status
from opentelemetry.util.types import AttributeValue

from shared.redaction import redact

log = logging.getLogger(__name__)

REDACTED = "[REDACTED]"

# Keys whose value is a credential, whatever it looks like (last dotted segment).
_SECRET_KEY = re.compile(
    r"(?i)(?:^|[._-])(authorization|proxy-authorization|auth|api[_-]?key|apikey|access[_-]?token|"
    r"refresh[_-]?token|id[_-]?token|bearer|token|secret|client[_-]?secret|password|passwd|pwd|cookie|"
    r"set-cookie|credentials?|signature|sig|private[_-]?key|session[_-]?key|link[_-]?secret)$")
# Keys that carry user content (queries, documents, prompts, completions).
_CONTENT_KEY = re.compile(
    r"(?i)(?:^|\.)(prompt|completion|input\.messages|output\.messages|system_instructions|"
    r"tool\.call\.arguments|tool\.call\.result|query\.text|query_text|retrieval\.documents|documents|"
    r"document\.text|statement|content|text|query)$")


class _Verdict:
    KEEP, REDACT, CONTENT = 0, 1, 2


class Redactor:
    """Removes secrets and (unless content capture is on) user content from ended spans.

    * an attribute whose key names a credential (authorization, api_key, token, password,
      cookie, signature, ...) keeps its key and gets the value "[REDACTED]";
    * any string value (attributes, event attributes such as exception messages, the status
      description) that looks like a secret (Bearer tokens, sk-… keys, JWTs, key=value
      secrets, configured keys registered with `shared.log.register_secret`) is redacted;
    * content attributes (prompts, completions, query and document text) are dropped unless
      content capture is on; numbers and flags under such keys (counts) stay.

    A span with nothing to remove is returned as it is (no copy).
    """

    _CACHE_MAX = 4_096
    _CACHE_VALUE_CHARS = 256

    def __init__(self, *, capture_content: bool = False) -> None:
        self.capture_content = capture_content
        self._verdicts: dict[str, int] = {}
        self._clean_text: dict[str, str] = {}     # short strings seen before -> redacted form

    def _verdict(self, key: str) -> int:
        verdict = self._verdicts.get(key)
        if verdict is None:
            if _SECRET_KEY.search(key):
                verdict = _Verdict.REDACT
            elif _CONTENT_KEY.search(key):
                verdict = _Verdict.CONTENT
            else:
                verdict = _Verdict.KEEP
            if len(self._verdicts) < self._CACHE_MAX:
                self._verdicts[key] = verdict
        return verdict

    def _redact_text(self, text: str) -> str:
        if len(text) > self._CACHE_VALUE_CHARS:
            return redact(text)
        cleaned = self._clean_text.get(text)
        if cleaned is None:
            cleaned = redact(text)
            if len(self._clean_text) >= self._CACHE_MAX:
                self._clean_text.clear()
            self._clean_text[text] = cleaned
        return cleaned

    def clean_attributes(self, attributes: Mapping[str, AttributeValue] | None) -> dict[str, AttributeValue] | None:
        """The attributes with secrets and (capture off) content removed; None if nothing changed."""
        if not attributes:
            return None
        cleaned: dict[str, AttributeValue] | None = None
        for key, value in attributes.items():
            new = self._clean_value(key, value)
            if new is value:
                continue
            if cleaned is None:
                cleaned = dict(attributes)
            if new is None:
                del cleaned[key]
            else:
                cleaned[key] = new
        return cleaned

    def _clean_value(self, key: str, value: AttributeValue) -> AttributeValue | None:
        """`value` itself when it may be exported, a redacted value, or None to drop it."""
        verdict = self._verdict(key)
        if verdict == _Verdict.REDACT:
            return REDACTED
        is_text = isinstance(value, str) or (isinstance(value, (tuple, list)) and bool(value)
                                             and isinstance(value[0], str))
        if not is_text:
            return value                      # numbers and flags: counts, never content or secrets
        if verdict == _Verdict.CONTENT and not self.capture_content:
            return None
        if isinstance(value, str):
            redacted = self._redact_text(value)
            return value if redacted == value else redacted
        items = tuple(self._redact_text(v) for v in value)  # type: ignore[union-attr]
        return value if items == tuple(value) else items

    def sanitize(self, span: ReadableSpan) -> ReadableSpan:
        attributes = self.clean_attributes(span.attributes)
        events = None
        for i, event in enumerate(span.events):
            cleaned = self.clean_attributes(event.attributes)
            if cleaned is not None:
                events = list(span.events) if events is None else events
                events[i] = Event(event.name, cleaned, event.timestamp)
        status = span.status
        if status.description:
            description = self._redact_text(status.description)
            if description != status.description:
                status = Status(status.status_code, description)
        if attributes is None and events is None and status is span.status:
            return span
        return ReadableSpan(
            name=span.name, context=span.context, parent=span.parent, resource=span.resource,
            attributes=attributes if attributes is not None else span.attributes,
            events=events if events is not None else span.events, links=span.links, kind=span.kind,
            status=status, start_time=span.start_time, end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope)


class _SanitizingExporter(SpanExporter):
    """Runs on the batch processor's worker thread: redaction, then the real exporter(s)."""

    def __init__(self, exporters: Sequence[SpanExporter], redactor: Redactor) -> None:
        self._exporters = tuple(exporters)
        self._redactor = redactor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        clean = [self._redactor.sanitize(span) for span in spans]
        result = SpanExportResult.SUCCESS
        for exporter in self._exporters:
            try:
                if exporter.export(clean) is not SpanExportResult.SUCCESS:
                    result = SpanExportResult.FAILURE
            except Exception as err:  # noqa: BLE001 - one broken exporter must not starve the others
                log.warning("span exporter %s failed: %s", type(exporter).__name__, err)
                result = SpanExportResult.FAILURE
        return result

    def shutdown(self) -> None:
        for exporter in self._exporters:
            exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all(exporter.force_flush(timeout_millis) for exporter in self._exporters)


class RedactingSpanProcessor(BatchSpanProcessor):
    """The safety net every exporter sits behind: a batch span processor whose exporters only
    ever receive spans cleaned by `Redactor` (no secrets; no content unless capture is on).

    On the request path a span costs one queue append; redaction and export run on this
    processor's worker thread. Batch size, delay and queue bound come from the standard
    OTEL_BSP_* variables. `build_telemetry` gives every exporter its own processor, so an
    unreachable collector never holds up the local trace file.
    """

    def __init__(self, exporters: Sequence[SpanExporter], *, capture_content: bool = False,
                 **batch_options: Any) -> None:
        self.redactor = Redactor(capture_content=capture_content)
        super().__init__(_SanitizingExporter(exporters, self.redactor), **batch_options)


__all__ = ["REDACTED", "Redactor", "RedactingSpanProcessor"]
