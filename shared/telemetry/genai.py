"""GenAI semantic conventions: the "embeddings" span, the "retrieval" attributes, and content.

    embeddings_span()          a span for one embeddings call (CLIENT for a remote provider,
                               INTERNAL for the in-process model); `end_embeddings` completes it
    retrieval_attributes()     mark a retrieval stage's span as a GenAI "retrieval" operation
    set_content_attribute()    query / document text on a span, only when content capture is on

Content capture is off by default; NUCLEUS_OTEL_CAPTURE_CONTENT=true turns it on (read once per
process). The exporters' safety net (`shared.telemetry.span_redaction`) drops such attributes
again when the SDK was set up with capture off. `opentelemetry-api` only.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import SpanKind

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


_GENAI_PROVIDERS = {"openai": "openai", "local": "sentence_transformers"}


_tracer = trace.get_tracer(__name__)       # the global provider's, made once (not a tracer per call)


@contextmanager
def embeddings_span(model: str, provider: str, count: int, *,
                    tracer_provider: trace.TracerProvider | None = None) -> Iterator[trace.Span]:
    """A span for one embeddings call, per the GenAI semantic conventions.

    Name `embeddings {model}`; CLIENT when a remote provider answers, INTERNAL for the
    in-process model. The caller adds `gen_ai.response.model` and
    `gen_ai.embeddings.dimension.count` once the vectors are back (see `end_embeddings`).
    """
    genai_provider = _GENAI_PROVIDERS.get(provider, provider or "unknown")
    tracer = _tracer if tracer_provider is None else trace.get_tracer(__name__, tracer_provider=tracer_provider)
    with tracer.start_as_current_span(
        f"embeddings {model}" if model else "embeddings",
        kind=SpanKind.CLIENT if provider == "openai" else SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "embeddings",
            "gen_ai.request.model": model,
            "gen_ai.provider.name": genai_provider,
            "gen_ai.system": genai_provider,
            "nucleus.embeddings.count": count,
        },
    ) as span:
        yield span


def end_embeddings(span: trace.Span, *, model: str, dimension: int, cache_hits: int = 0) -> None:
    """Attributes known once the embeddings came back."""
    if span.is_recording():
        span.set_attribute("gen_ai.response.model", model)
        span.set_attribute("gen_ai.embeddings.dimension.count", dimension)
        span.set_attribute("nucleus.embeddings.cache_hits", cache_hits)


def retrieval_attributes(span: trace.Span, *, data_source: str, top_k: int, query: str | Sequence[str]) -> None:
    """Mark `span` as a GenAI "retrieval" operation against `data_source` (query text only
    when content capture is on)."""
    if not span.is_recording():
        return
    span.set_attribute("gen_ai.operation.name", "retrieval")
    span.set_attribute("gen_ai.data_source.id", data_source)
    span.set_attribute("gen_ai.request.top_k", top_k)
    set_content_attribute(span, "gen_ai.retrieval.query.text", query)


__all__ = ["CAPTURE_CONTENT_ENV", "CONTENT_MAX_CHARS", "capture_content", "embeddings_span", "end_embeddings",
           "retrieval_attributes", "set_content_attribute"]
