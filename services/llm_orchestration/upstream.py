"""The retry discipline every paid upstream of LlmOrchestration follows (the OpenAI-compatible
endpoint, a rerank API), written once.

    retries = UpstreamRetries("rerank API host:443", max_attempts=3, breaker=breaker, redactor=r)
    result = await retries.call(tracer, "rerank_api.rerank", attempt_once, retryable=..., counts_as_failure=...,
                                translate=...)

At most `max_attempts` attempts; the circuit breaker is consulted before every attempt (and
told which failures count against it); between attempts the wait is what `Retry-After` says
(capped at RETRY_AFTER_CAP_S), else exponential backoff with jitter; each retry is logged,
redacted. One span per call records the attempts and, on failure, the error's type. A
NucleusError (the breaker open, or one an attempt raised on purpose) passes through; anything
else is translated once by the caller's `translate(err, attempts)` — the upstream's own error may
carry the request, so it is never chained.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from opentelemetry import trace
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from shared.errors import NucleusError, Unavailable
from shared.redaction import Redactor

from .breaker import CircuitBreaker

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 2.0
RETRY_AFTER_CAP_S = 10.0


class UpstreamRetries:
    def __init__(self, upstream: str, *, max_attempts: int, breaker: CircuitBreaker, redactor: Redactor,
                 retry_after: Callable[[BaseException], float | None],
                 describe: Callable[[BaseException | None], str],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.upstream = upstream
        self.max_attempts = max_attempts
        self.breaker = breaker
        self._redactor = redactor
        self._retry_after = retry_after
        self._describe = describe
        self._sleep = sleep
        self._backoff = wait_exponential_jitter(multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S,
                                                jitter=BACKOFF_INITIAL_S)

    async def call(self, tracer: trace.Tracer, span_name: str, attempt_once: Callable[[], Awaitable[T]], *,
                   retryable: Callable[[BaseException], bool], counts_as_failure: Callable[[Exception], bool],
                   translate: Callable[[Exception, int], NucleusError],
                   attributes: Mapping[str, Any] | None = None) -> T:
        attempts = 0
        retrying = AsyncRetrying(stop=stop_after_attempt(self.max_attempts), retry=retry_if_exception(retryable),
                                 wait=self._wait, sleep=self._sleep, before_sleep=self._log_retry, reraise=True)
        with tracer.start_as_current_span(span_name, attributes=dict(attributes or {})) as span:
            try:
                async for attempt in retrying:
                    with attempt:
                        attempts += 1
                        result = await self.breaker.call(attempt_once, counts_as_failure=counts_as_failure)
            except NucleusError as err:        # the circuit open, or raised on purpose: already ours
                span.set_attribute("llm.attempts", attempts)
                span.set_status(trace.StatusCode.ERROR, type(err).__name__)
                _spent(err)
                raise
            except Exception as err:
                translated = _spent(translate(err, attempts))
                span.set_attribute("llm.attempts", attempts)
                span.set_status(trace.StatusCode.ERROR, type(translated).__name__)
                raise translated from None    # the upstream's error may carry the request; drop it
            span.set_attribute("llm.attempts", attempts)
            return result

    def _wait(self, state: RetryCallState) -> float:
        err = state.outcome.exception() if state.outcome else None
        requested = self._retry_after(err) if err is not None else None
        if requested is not None:
            return min(requested, RETRY_AFTER_CAP_S)
        return self._backoff(state)

    def _log_retry(self, state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s attempt %d/%d failed (%s); retrying in %.2fs", self.upstream, state.attempt_number,
                    self.max_attempts, self._redactor.redact(self._describe(err)), wait)


def _spent(err: NucleusError) -> NucleusError:
    """This policy's attempts are the only ones: an Unavailable leaving here tells a gRPC caller
    not to retry on top (shared.grpc_errors: `grpc-retry-pushback-ms: -1`), so one failing call
    reaches the upstream at most `max_attempts` times, however many hops retry UNAVAILABLE."""
    if isinstance(err, Unavailable):
        err.retries_spent = True
    return err
