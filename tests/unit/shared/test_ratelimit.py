"""The token bucket per caller, on a clock the tests drive (no waits)."""
from __future__ import annotations

import pytest

from shared.errors import ResourceExhausted
from shared.identity import Principal
from shared.ratelimit import RateLimiter, rate_key, retry_after_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_allowed_then_the_rate_and_the_wait_is_exact():
    clock = Clock()
    limiter = RateLimiter(2.0, 3, clock=clock)
    assert [limiter.acquire("alice") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("alice") == pytest.approx(0.5)          # one token every 1/2 s
    clock.now += 0.25
    assert limiter.acquire("alice") == pytest.approx(0.25)         # a refused call takes nothing
    clock.now += 0.25
    assert limiter.acquire("alice") == 0.0
    assert limiter.acquire("alice") == pytest.approx(0.5)


def test_callers_have_their_own_buckets_and_idle_ones_refill_only_up_to_the_burst():
    clock = Clock()
    limiter = RateLimiter(1.0, 2, clock=clock)
    assert limiter.acquire("mallory") == limiter.acquire("mallory") == 0.0
    assert limiter.acquire("mallory") > 0
    assert limiter.acquire("alice") == 0.0                          # not affected by mallory
    clock.now += 3600
    assert [limiter.acquire("mallory") for _ in range(3)][:2] == [0.0, 0.0]
    assert limiter.acquire("mallory") > 0


def test_check_raises_resource_exhausted_with_the_retry_after():
    clock = Clock()
    limiter = RateLimiter(0.1, 1, clock=clock)
    limiter.check("alice")
    with pytest.raises(ResourceExhausted) as err:
        limiter.check("alice", what="tool calls")
    assert err.value.retry_after_s == pytest.approx(10.0)
    assert "too many tool calls" in str(err.value) and "retry after 10 s" in str(err.value)
    assert retry_after_seconds(0.01) == 1 and retry_after_seconds(2.1) == 3


def test_a_rate_of_zero_turns_limiting_off():
    limiter = RateLimiter(0.0, 1, clock=Clock())
    assert not limiter.enabled
    assert all(limiter.acquire("alice") == 0.0 for _ in range(1000))


def test_memory_stays_bounded_forgetting_the_least_recently_seen_caller():
    clock = Clock()
    limiter = RateLimiter(1.0, 1, clock=clock, max_keys=3)
    for user in ("a", "b", "c", "d"):
        limiter.acquire(user)
    assert len(limiter._buckets) == 3 and "a" not in limiter._buckets
    assert limiter.acquire("d") > 0                                 # the recent ones are still tracked


def test_whose_bucket_a_call_draws_from():
    alice = Principal(tenant_id="acme", user_id="alice", auth_method="api_key")
    assert rate_key(alice) == rate_key(Principal(tenant_id="acme", user_id="alice", auth_method="jwt"))
    assert rate_key(alice) != rate_key(Principal(tenant_id="globex", user_id="alice", auth_method="api_key"))
    assert rate_key(None) is None
    assert rate_key(Principal(tenant_id="", user_id="operator", auth_method="operator")) is None
    assert rate_key(Principal(tenant_id="", user_id="service:rag_pipeline", auth_method="service")) is None


def test_settings_that_cannot_work_are_refused():
    with pytest.raises(ValueError):
        RateLimiter(float("inf"), 1)
    with pytest.raises(ValueError):
        RateLimiter(1.0, 0)
