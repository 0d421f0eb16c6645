"""The one place that talks to an OpenAI-compatible endpoint, and translates its errors.

Every call gets
- a timeout (`request_timeout_s`, per attempt: the SDK's own plus an asyncio bound),
- retries with tenacity, at most `max_attempts` attempts in all, ONLY for HTTP 429, HTTP 5xx,
  timeouts and connection errors. The wait honours `Retry-After` / `retry-after-ms`
  (capped at `RETRY_AFTER_CAP_S`), else exponential backoff with jitter (upstream.py). The SDK's own
  retries are off (`max_retries=0`) so attempts are counted in one place.
- the circuit breaker, consulted before every attempt; transport failures (429, 5xx,
  timeout, connection, unparseable body) count against it, any real answer resets it.

After the last attempt errors map to the hierarchy in `shared.errors`:

    HTTP 429                         → ResourceExhausted
    HTTP 5xx, connection refused     → Unavailable
    timeout                          → DeadlineExceeded  ("did not answer in time")
    circuit open                     → Unavailable       (no request sent)
    other 4xx (400, 401, 404, …)     → UpstreamFailed    (immediately, no retry)
    body that is not JSON / not the
    expected shape, malformed content → UpstreamFailed   (immediately, no retry)

Every message raised or logged from here passes through the `Redactor`, so the API key,
`Bearer …` and `sk-…` tokens never leak into errors, logs or traces. The key is only ever
sent in the Authorization header; prompts are built elsewhere from user text alone.
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from numpy.typing import NDArray
from opentelemetry import trace

from shared.errors import (DeadlineExceeded, NucleusError, ResourceExhausted, Unavailable,
                           UpstreamFailed)
from shared.settings import LlmOrchestrationSettings

from shared.redaction import Redactor

from .breaker import CircuitBreaker
from .upstream import UpstreamRetries

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

ERROR_DETAIL_CHARS = 200
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """One piece of a streamed chat completion; the last one has `done` and the totals."""

    content: str
    tool_calls: tuple[tuple[int, str, str, str], ...]     # (index, id, name, arguments piece)
    model: str
    finish_reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    done: bool = False


class _AttemptTimeout(Exception):
    """Our own per-attempt bound fired (the SDK's timeout covers phases, not the whole call)."""


def is_retryable(err: BaseException) -> bool:
    """429, 5xx, timeouts and connection errors; nothing else is retried."""
    import openai   # the SDK loads with the first gateway (~1 s): a service without one never imports it
    if isinstance(err, (_AttemptTimeout, openai.APIConnectionError)):   # includes APITimeoutError
        return True
    if isinstance(err, openai.APIStatusError):
        return err.status_code == 429 or err.status_code >= 500
    return False


def _counts_against_breaker(err: Exception) -> bool:
    import openai
    return is_retryable(err) or isinstance(err, (json.JSONDecodeError,
                                                 openai.APIResponseValidationError))


def retry_after_s(err: BaseException) -> float | None:
    """Seconds the upstream asked us to wait (`retry-after-ms`, `Retry-After` seconds or date)."""
    response = getattr(err, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class OpenAIGateway:
    """Embeddings and chat completions against one OpenAI-compatible base URL."""

    def __init__(self, settings: LlmOrchestrationSettings, *, breaker: CircuitBreaker,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        import openai
        key = settings.openai_api_key.get_secret_value()
        self._redactor = Redactor([key])
        self._timeout_s = settings.request_timeout_s
        self._chat_model = settings.chat_model
        parts = urlsplit(settings.openai_base_url)
        self.upstream = f"OpenAI-compatible endpoint {parts.hostname or '?'}" + (
            f":{parts.port}" if parts.port else "")            # never the userinfo part
        self._retries = UpstreamRetries(self.upstream, max_attempts=settings.max_attempts, breaker=breaker,
                                        redactor=self._redactor, retry_after=retry_after_s, describe=_describe,
                                        sleep=sleep)
        self._client = openai.AsyncOpenAI(
            base_url=settings.openai_base_url,
            api_key=key or "not-configured",   # local servers ignore it; the SDK insists on one
            timeout=settings.request_timeout_s,
            max_retries=0,
        )

    @property
    def redactor(self) -> Redactor:
        return self._redactor

    async def close(self) -> None:
        await self._client.close()

    # -- operations ------------------------------------------------------------------------

    async def embeddings(self, texts: Sequence[str], *, model: str,
                         dimensions: int = 0) -> NDArray[np.float32]:
        """L2-normalised float32 (len(texts), d) vectors, in input order."""
        extra: dict[str, Any] = {"dimensions": dimensions} if dimensions > 0 else {}
        response = await self._call("embeddings", lambda: self._client.embeddings.create(
            input=list(texts), model=model, encoding_format="float", **extra))
        try:
            rows = sorted(response.data, key=lambda item: item.index)
            matrix = np.asarray([row.embedding for row in rows], dtype=np.float32)
        except (AttributeError, TypeError, ValueError) as err:
            raise UpstreamFailed(self._redactor.redact(
                f"{self.upstream} returned malformed embeddings: {type(err).__name__}")) from None
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or matrix.shape[1] == 0:
            raise UpstreamFailed(f"{self.upstream} returned {matrix.shape} embeddings for "
                                 f"{len(texts)} texts")
        if dimensions > 0 and matrix.shape[1] != dimensions:
            raise UpstreamFailed(f"{self.upstream} returned dimension {matrix.shape[1]}; "
                                 f"{dimensions} was configured")
        if not np.all(np.isfinite(matrix)):
            raise UpstreamFailed(f"{self.upstream} returned non-finite embedding values")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise UpstreamFailed(f"{self.upstream} returned an all-zero embedding")
        return (matrix / norms).astype(np.float32, copy=False)

    async def chat(self, messages: list[dict[str, str]], *, json_mode: bool, task: str) -> str:
        """The assistant's reply text. `json_mode` asks for `{"type": "json_object"}`."""
        extra: dict[str, Any] = {"response_format": {"type": "json_object"}} if json_mode else {}
        response = await self._call(task, lambda: self._client.chat.completions.create(
            model=self._chat_model, messages=messages, temperature=0, **extra))
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            content = None
        if not isinstance(content, str) or not content.strip():
            raise UpstreamFailed(f"{self.upstream} returned no message content for {task}")
        return content

    async def chat_stream(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                          tool_choice: Any = None, max_tokens: int = 0, model: str = "",
                          task: str = "chat") -> AsyncIterator[ChatDelta]:
        """A streamed chat completion, piece by piece; the last delta has `finish_reason` and
        the usage (when the endpoint reports it). Opening the stream is retried and guarded by
        the breaker like every call; once tokens flow nothing is retried (they were delivered):
        a failure or a pause longer than `request_timeout_s` between chunks raises, translated."""
        extra: dict[str, Any] = {}
        if tools:
            extra.update(tools=tools, tool_choice=tool_choice or "auto")
        if max_tokens > 0:
            extra["max_tokens"] = max_tokens
        model = model or self._chat_model
        stream = await self._call(task, lambda: self._client.chat.completions.create(
            model=model, messages=messages, stream=True, stream_options={"include_usage": True},
            **extra))
        iterator = stream.__aiter__()
        finish = ""
        usage = (0, 0)
        try:
            while True:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                model = getattr(chunk, "model", None) or model
                if getattr(chunk, "usage", None) is not None:
                    usage = (int(chunk.usage.prompt_tokens or 0), int(chunk.usage.completion_tokens or 0))
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                calls = tuple((int(tc.index), tc.id or "", (tc.function.name or "") if tc.function else "",
                               (tc.function.arguments or "") if tc.function else "")
                              for tc in (getattr(delta, "tool_calls", None) or ()))
                finish = choice.finish_reason or finish
                if (delta.content or "") or calls:
                    yield ChatDelta(content=delta.content or "", tool_calls=calls, model=model)
        except TimeoutError:
            raise DeadlineExceeded(self._redactor.redact(
                f"{self.upstream} stopped streaming the {task} reply for {self._timeout_s:g}s")) from None
        except NucleusError:
            raise
        except Exception as err:   # noqa: BLE001 - one place translates upstream errors
            raise self._translate(err, task, 1) from None
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                await close()
        yield ChatDelta(content="", tool_calls=(), model=model, finish_reason=finish or "stop",
                        input_tokens=usage[0], output_tokens=usage[1], done=True)

    # -- the one call path -----------------------------------------------------------------

    async def _call(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        async def attempt_once() -> T:
            try:
                async with asyncio.timeout(self._timeout_s):
                    return await make()
            except TimeoutError:
                raise _AttemptTimeout() from None

        return await self._retries.call(_tracer, f"openai.{what}", attempt_once, retryable=is_retryable,
                                        counts_as_failure=_counts_against_breaker,
                                        translate=lambda err, attempts: self._translate(err, what, attempts))

    def _translate(self, err: Exception, what: str, attempts: int) -> NucleusError:
        import openai
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        r = self._redactor.redact
        if isinstance(err, (_AttemptTimeout, openai.APITimeoutError)):
            return DeadlineExceeded(r(f"{self.upstream} did not answer the {what} request within "
                                      f"{self._timeout_s:g}s ({tries})"))
        if isinstance(err, openai.APIConnectionError):
            return Unavailable(r(f"could not reach {self.upstream} for {what} ({tries})"))
        if isinstance(err, openai.APIStatusError):
            code = err.status_code
            detail = _describe(err)
            if code == 429:
                return ResourceExhausted(r(f"{self.upstream} rate-limited the {what} request "
                                           f"(HTTP 429, {tries}): {detail}"))
            if code >= 500:
                return Unavailable(r(f"{self.upstream} failed the {what} request "
                                     f"(HTTP {code}, {tries}): {detail}"))
            hint = " — check NUCLEUS_LLM_OPENAI_API_KEY" if code in (401, 403) else ""
            return UpstreamFailed(r(f"{self.upstream} rejected the {what} request "
                                    f"(HTTP {code}){hint}: {detail}"))
        return UpstreamFailed(r(f"{self.upstream} returned a malformed response to {what}: "
                                f"{_describe(err)}"))


def _describe(err: BaseException | None) -> str:
    if err is None:
        return "unknown error"
    if isinstance(err, _AttemptTimeout):
        return "timed out"
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    text = " ".join(str(text).split())
    if len(text) > ERROR_DETAIL_CHARS:
        text = text[:ERROR_DETAIL_CHARS] + "…"
    return f"{type(err).__name__}: {text}"
