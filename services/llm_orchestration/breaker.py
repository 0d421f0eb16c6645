"""A small circuit breaker for the OpenAI-compatible upstream.

    closed ──(threshold consecutive failures)──▶ open ──(reset_s elapsed)──▶ half_open
      ▲                                            ▲                            │
      └──────────────(trial call succeeds)─────────┼────────────────────────────┤
                                                   └──(trial call fails)────────┘

While open, calls fail fast with `Unavailable` without touching the network. Half-open
lets exactly one trial call through; the others fail fast until it settles. What counts
as a failure is the caller's decision (`counts_as_failure`); any other outcome — a result,
or an error that proves the upstream answered (e.g. HTTP 400) — counts as a success.
The clock is injectable so tests can step time instead of sleeping.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from shared.errors import Unavailable

log = logging.getLogger(__name__)

BreakerState = Literal["closed", "open", "half_open"]
T = TypeVar("T")


class CircuitBreaker:
    def __init__(self, *, failure_threshold: int, reset_s: float, name: str = "upstream",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        if reset_s < 0:
            raise ValueError(f"reset_s must be >= 0, got {reset_s}")
        self._threshold = failure_threshold
        self._reset_s = reset_s
        self._name = name
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self._reset_s:
            return "half_open"
        return "open"

    async def call(self, fn: Callable[[], Awaitable[T]], *,
                   counts_as_failure: Callable[[Exception], bool]) -> T:
        """Run `fn` if the breaker admits it; record the outcome."""
        self._admit()
        try:
            result = await fn()
        except Exception as err:
            if counts_as_failure(err):
                self._record_failure()
            else:
                self._record_success()
            raise
        except BaseException:          # cancelled: no verdict on the upstream
            self._trial_in_flight = False
            raise
        self._record_success()
        return result

    def _admit(self) -> None:
        state = self.state
        if state == "closed":
            return
        if state == "half_open" and not self._trial_in_flight:
            self._trial_in_flight = True
            log.info("%s circuit half-open: letting one trial call through", self._name)
            return
        assert self._opened_at is not None
        retry_in = max(0.0, self._reset_s - (self._clock() - self._opened_at))
        detail = ("a trial call is in flight" if state == "half_open"
                  else f"retry in {retry_in:.1f}s")
        raise Unavailable(f"{self._name} circuit open after {self._failures} consecutive "
                          f"failures; failing fast ({detail})")

    def _record_success(self) -> None:
        if self._opened_at is not None:
            log.info("%s circuit closed: trial call succeeded", self._name)
        self._failures = 0
        self._opened_at = None
        self._trial_in_flight = False

    def _record_failure(self) -> None:
        self._failures += 1
        was_trial = self._trial_in_flight
        self._trial_in_flight = False
        if was_trial or self._failures >= self._threshold:
            if was_trial or self._opened_at is None:
                log.warning("%s circuit open after %d consecutive failures; failing fast for %.1fs",
                            self._name, self._failures, self._reset_s)
            self._opened_at = self._clock()
