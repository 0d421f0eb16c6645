import pytest

from services.llm_orchestration.breaker import CircuitBreaker
from shared.errors import Unavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Boom(Exception):
    pass


async def ok() -> str:
    return "ok"


async def boom() -> str:
    raise Boom()


def is_boom(err: Exception) -> bool:
    return isinstance(err, Boom)


async def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        with pytest.raises(Boom):
            await breaker.call(boom, counts_as_failure=is_boom)


async def test_opens_after_threshold_consecutive_failures_and_fails_fast():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, reset_s=30, clock=clock)
    await fail(breaker, 2)
    assert breaker.state == "closed"
    await fail(breaker, 1)
    assert breaker.state == "open"
    calls = []

    async def counted() -> str:
        calls.append(1)
        return "ok"

    with pytest.raises(Unavailable, match="circuit open"):
        await breaker.call(counted, counts_as_failure=is_boom)
    assert calls == []


async def test_success_resets_the_consecutive_failure_count():
    breaker = CircuitBreaker(failure_threshold=2, reset_s=30, clock=Clock())
    await fail(breaker, 1)
    assert await breaker.call(ok, counts_as_failure=is_boom) == "ok"
    await fail(breaker, 1)
    assert breaker.state == "closed"


async def test_errors_that_do_not_count_leave_it_closed():
    breaker = CircuitBreaker(failure_threshold=1, reset_s=30, clock=Clock())
    with pytest.raises(Boom):
        await breaker.call(boom, counts_as_failure=lambda err: False)
    assert breaker.state == "closed"


async def test_half_open_after_reset_lets_one_trial_through_and_closes_on_success():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_s=30, clock=clock)
    await fail(breaker, 1)
    clock.now += 29.9
    assert breaker.state == "open"
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert await breaker.call(ok, counts_as_failure=is_boom) == "ok"
    assert breaker.state == "closed"


async def test_failed_trial_reopens_for_a_full_reset_period():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_s=30, clock=clock)
    await fail(breaker, 1)
    clock.now += 30
    await fail(breaker, 1)
    assert breaker.state == "open"
    clock.now += 29
    with pytest.raises(Unavailable):
        await breaker.call(ok, counts_as_failure=is_boom)
    clock.now += 1
    assert breaker.state == "half_open"


async def test_only_one_trial_at_a_time_while_half_open():
    import asyncio

    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_s=30, clock=clock)
    await fail(breaker, 1)
    clock.now += 30
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "ok"

    trial = asyncio.create_task(breaker.call(slow, counts_as_failure=is_boom))
    await asyncio.sleep(0)
    with pytest.raises(Unavailable, match="trial call is in flight"):
        await breaker.call(ok, counts_as_failure=is_boom)
    release.set()
    assert await trial == "ok"
    assert breaker.state == "closed"


async def test_cancelled_trial_frees_the_half_open_slot():
    import asyncio

    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, reset_s=30, clock=clock)
    await fail(breaker, 1)
    clock.now += 30
    trial = asyncio.create_task(breaker.call(asyncio.Event().wait, counts_as_failure=is_boom))
    await asyncio.sleep(0)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert await breaker.call(ok, counts_as_failure=is_boom) == "ok"
