"""Shared fixtures: one FakeOpenAI server per module, and orchestrators wired to it."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.microbatch import BatchLayout
from shared.settings import LlmOrchestrationSettings
from tests.support.fake_openai import FakeOpenAI

API_KEY = "sk-test-SECRET-0123456789abcdefXYZ"
CHAT_MODEL = "fake-chat-1"
FAKE_DIMENSION = 16


class Clock:
    """A monotonic clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """Records retry waits instead of sleeping them (the waits are what we assert on)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture(scope="module")
def fake() -> FakeOpenAI:
    with FakeOpenAI(dimension=FAKE_DIMENSION, hang_s=10) as server:
        yield server


@pytest.fixture
def server(fake: FakeOpenAI) -> FakeOpenAI:
    fake.clear()
    yield fake
    fake.clear()


def fake_settings(server: FakeOpenAI, **overrides) -> LlmOrchestrationSettings:
    values = dict(embedding_provider="openai", openai_base_url=server.base_url,
                  openai_api_key=API_KEY, openai_embedding_model="fake-embed",
                  chat_model=CHAT_MODEL, request_timeout_s=5.0, max_attempts=3,
                  breaker_failure_threshold=50, breaker_reset_s=30.0)
    values.update(overrides)
    return LlmOrchestrationSettings(**values)


@contextlib.asynccontextmanager
async def running(server: FakeOpenAI, *, clock: Clock | None = None, sleeps: Sleeps | None = None,
                  **overrides) -> AsyncIterator[LlmOrchestrator]:
    """A started orchestrator talking to `server`; requests made by start() are forgotten."""
    orch = LlmOrchestrator(fake_settings(server, **overrides), clock=clock or Clock(),
                           sleep=sleeps or Sleeps(), layout=BatchLayout(max_wait_ms=1.0))
    await orch.start()
    server.clear()
    try:
        yield orch
    finally:
        await orch.close()
