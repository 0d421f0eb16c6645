"""Per-principal rate limits: one token bucket per caller, on an injectable clock.

    RateLimiter(rate_per_s, burst, clock=time.monotonic)
        .acquire(key) -> 0.0            allowed (one token taken)
                      -> seconds > 0    refused: how long until a token is there (Retry-After)
        .check(key)                     acquire, or raise ResourceExhausted(retry_after_s=...)
    rate_key(principal) -> str | None   whose bucket a call draws from; None = not limited

A bucket holds at most `burst` tokens and refills at `rate_per_s`; a new caller starts full.
When more than `max_keys` callers are tracked the least recently seen bucket is forgotten (it
has had the longest to refill), so memory stays bounded. `rate_per_s <= 0` turns limiting
off. Transport adapters (the MCP middleware, the gRPC interceptor) live in
`shared.ratelimit_adapters`; this module knows no transport.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Callable

from shared.errors import ResourceExhausted, retry_after_seconds
from shared.identity import OPERATOR, Principal

DEFAULT_MAX_KEYS = 100_000
#: Principals of the stack itself (an operator's CLI, another service): never limited here.
UNLIMITED_AUTH_METHODS = frozenset({OPERATOR, "service"})


class RateLimiter:
    """Token buckets keyed by caller; thread-unsafe by design (one event loop owns it)."""

    def __init__(self, rate_per_s: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if not math.isfinite(rate_per_s):
            raise ValueError(f"rate_per_s must be finite, got {rate_per_s}")
        if burst < 1 or max_keys < 1:
            raise ValueError(f"burst and max_keys must be >= 1, got {burst}, {max_keys}")
        self.rate_per_s = float(rate_per_s)
        self.burst = int(burst)
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()   # key -> (tokens, at)

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    def _tokens(self, key: str, now: float) -> float:
        state = self._buckets.get(key)
        if state is None:
            return float(self.burst)
        tokens, at = state
        return min(float(self.burst), tokens + max(0.0, now - at) * self.rate_per_s)

    def acquire(self, key: str, cost: float = 1.0) -> float:
        """Take `cost` tokens from `key`'s bucket: 0.0 if allowed, else the seconds until they
        would be there (nothing is taken then)."""
        if not self.enabled:
            return 0.0
        now = self._clock()
        tokens = self._tokens(key, now)
        if tokens >= cost:
            self._buckets[key] = (tokens - cost, now)
            self._buckets.move_to_end(key)
            self._evict()
            return 0.0
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        self._evict()
        return (cost - tokens) / self.rate_per_s

    def check(self, key: str, *, what: str = "calls") -> None:
        """`acquire`, raising ResourceExhausted (with `retry_after_s`) when refused."""
        wait = self.acquire(key)
        if wait > 0:
            raise ResourceExhausted(
                f"too many {what}: the limit is {self.rate_per_s:g} per second with bursts of {self.burst}; "
                f"retry after {retry_after_seconds(wait)} s", retry_after_s=wait)

    def _evict(self) -> None:
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)


def rate_key(principal: Principal | None) -> str | None:
    """The bucket of a caller: its tenant and user (an end user acting through a trusted
    platform has its own); None for no verified caller (authentication off) and for the
    stack's own principals (operators, services)."""
    if principal is None or principal.auth_method in UNLIMITED_AUTH_METHODS:
        return None
    return f"{principal.tenant_id}\x1f{principal.user_id}"


__all__ = ["RateLimiter", "rate_key", "retry_after_seconds", "UNLIMITED_AUTH_METHODS"]
