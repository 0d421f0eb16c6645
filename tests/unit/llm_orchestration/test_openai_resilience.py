"""The HTTP layer against a real loopback server speaking the OpenAI API."""
from __future__ import annotations

import logging
import socket

import numpy as np
import pytest

from services.llm_orchestration.upstream import RETRY_AFTER_CAP_S
from shared.errors import (DeadlineExceeded, ResourceExhausted, Unavailable, UpstreamFailed)
from tests.support.fake_openai import fake_vector

from .conftest import API_KEY, FAKE_DIMENSION, Clock, Sleeps, running


async def test_openai_embeddings_are_normalised_in_order_and_sent_with_the_key(server):
    texts = ["alpha", "beta", "gamma"]
    async with running(server) as orch:
        result = await orch.embed(texts)
    want = np.stack([fake_vector(t, FAKE_DIMENSION) for t in texts])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(result.vectors, want, atol=1e-6)
    assert (result.provider, result.model, result.dimension) == ("openai", "fake-embed", FAKE_DIMENSION)
    [request] = server.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["input"] == texts and request.body["model"] == "fake-embed"


async def test_dimension_is_learned_at_start_when_not_configured(server):
    async with running(server) as orch:
        assert orch.dimension == FAKE_DIMENSION
        assert orch.info()["provider"] == "openai"


async def test_large_openai_batches_go_out_in_chunks_and_come_back_in_order(server):
    texts = [f"text {i}" for i in range(10)]
    async with running(server, encode_batch_size=4) as orch:
        result = await orch.embed(texts, purpose="document")
    assert sorted(len(r.body["input"]) for r in server.requests) == [2, 4, 4]
    want = np.stack([fake_vector(t, FAKE_DIMENSION) for t in texts])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(result.vectors, want, atol=1e-6)


async def test_429_then_success_retries_once_honouring_retry_after(server):
    sleeps = Sleeps()
    async with running(server, sleeps=sleeps) as orch:
        server.fail_next("429", 1, retry_after=2)
        result = await orch.embed(["rate limited once"])
    assert result.vectors.shape == (1, FAKE_DIMENSION)
    assert [r.failure for r in server.requests] == ["429", None]
    assert sleeps.waits == [2.0]


async def test_retry_after_is_capped(server):
    sleeps = Sleeps()
    async with running(server, sleeps=sleeps) as orch:
        server.fail_next("503", 1, retry_after=3600)
        await orch.embed(["long wait asked"])
    assert sleeps.waits == [RETRY_AFTER_CAP_S]


async def test_429_on_every_attempt_is_resource_exhausted(server):
    async with running(server) as orch:
        server.fail_next("429", 3, retry_after=0)
        with pytest.raises(ResourceExhausted, match="HTTP 429"):
            await orch.embed(["always limited"])
    assert len(server.requests) == 3


async def test_500_three_times_is_unavailable_after_exactly_three_attempts(server):
    sleeps = Sleeps()
    async with running(server, sleeps=sleeps, max_attempts=3) as orch:
        server.fail_next("500", 5)
        with pytest.raises(Unavailable, match=r"HTTP 500, after 3 attempts"):
            await orch.embed(["server down"])
    assert [r.failure for r in server.requests] == ["500", "500", "500"]
    assert len(sleeps.waits) == 2 and all(0 < w <= 2.0 for w in sleeps.waits)   # backoff


async def test_a_hanging_upstream_times_out_is_retried_then_deadline_exceeded(server):
    async with running(server, request_timeout_s=0.5, max_attempts=2) as orch:
        server.fail_next("hang", 2)
        with pytest.raises(DeadlineExceeded, match=r"within 0.5s \(after 2 attempts\)"):
            await orch.embed(["slow"])
    assert [r.failure for r in server.requests] == ["hang", "hang"]


async def test_a_body_that_is_not_json_is_upstream_failed_without_retry(server):
    async with running(server) as orch:
        server.fail_next("bad_body", 1)
        with pytest.raises(UpstreamFailed, match="malformed response"):
            await orch.rerank("q", [("a", "text")])
    assert len(server.requests) == 1


async def test_a_400_is_upstream_failed_immediately(server):
    async with running(server) as orch:
        server.fail_next("400", 1)
        with pytest.raises(UpstreamFailed, match=r"rejected the embeddings request \(HTTP 400\)"):
            await orch.embed(["bad request"])
    assert len(server.requests) == 1


async def test_connection_refused_is_unavailable_after_all_attempts(server):
    with socket.socket() as sock:          # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps = Sleeps()
    async with running(server, sleeps=sleeps, chat_model="x", embedding_provider="local",
                       openai_base_url=f"http://127.0.0.1:{port}/v1", max_attempts=3) as orch:
        with pytest.raises(Unavailable, match=r"could not reach .* \(after 3 attempts\)"):
            await orch.rerank("q", [("a", "text")])
    assert len(sleeps.waits) == 2


async def test_breaker_opens_fails_fast_without_a_request_then_half_opens_after_reset(server):
    clock = Clock()
    async with running(server, clock=clock, max_attempts=1, breaker_failure_threshold=2,
                       breaker_reset_s=30) as orch:
        server.fail_next("500", 2)
        for _ in range(2):
            with pytest.raises(Unavailable, match="HTTP 500"):
                await orch.embed(["fails"])
        assert orch.info()["breaker_state"] == "open"
        sent = len(server.requests)
        with pytest.raises(Unavailable, match="circuit open"):
            await orch.embed(["fails fast"])
        assert len(server.requests) == sent            # nothing went out
        clock.now += 30
        assert orch.info()["breaker_state"] == "half_open"
        result = await orch.embed(["trial call"])
        assert result.vectors.shape == (1, FAKE_DIMENSION)
        assert orch.info()["breaker_state"] == "closed"
        assert len(server.requests) == sent + 1


async def test_retries_stop_when_the_breaker_opens_mid_call(server):
    async with running(server, max_attempts=5, breaker_failure_threshold=2) as orch:
        server.fail_next("500", 5)
        with pytest.raises(Unavailable, match="circuit open"):
            await orch.embed(["storm"])
    assert len(server.requests) == 2


async def test_4xx_and_malformed_content_do_not_open_the_breaker(server):
    async with running(server, max_attempts=1, breaker_failure_threshold=1) as orch:
        server.fail_next("400", 1)
        with pytest.raises(UpstreamFailed):
            await orch.embed(["bad"])
        server.fail_next("bad_content", 1)
        with pytest.raises(UpstreamFailed):
            await orch.rerank("q", [("a", "t")])
        assert orch.info()["breaker_state"] == "closed"


async def test_the_api_key_never_reaches_logs_errors_or_request_bodies(server, caplog):
    caplog.set_level(logging.DEBUG)
    errors: list[str] = []
    async with running(server, max_attempts=2) as orch:
        server.fail_next("401", 1)                      # the fake echoes the key back
        with pytest.raises(UpstreamFailed) as info:
            await orch.embed(["who am i"])
        errors.append(str(info.value))
        assert "[REDACTED]" in str(info.value) and "NUCLEUS_LLM_OPENAI_API_KEY" in str(info.value)
        server.fail_next("401", 1)                      # not retried: one request
        expansion = await orch.expand("what helps with sleep problems")   # falls back, logs why
        errors.append(expansion.note)
        server.fail_next("500", 2)
        with pytest.raises(Unavailable) as info:
            await orch.rerank("q", [("a", "t")])
        errors.append(str(info.value))
        await orch.synthesize("q", [("p1", "t", "passage text")])
    assert server.requests, "the scenario made requests"
    for request in server.requests:
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        assert API_KEY not in request.raw
    logged = [record.getMessage() for record in caplog.records]
    assert any("retrying" in message for message in logged)   # the retry was logged...
    for text in logged + errors:
        assert API_KEY not in text                             # ...without the key
        assert "0123456789abcdef" not in text


@pytest.mark.parametrize("headers,want", [
    ({"retry-after": "3"}, 3.0), ({"retry-after": "0.25"}, 0.25),
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5), ({"retry-after": "-4"}, 0.0),
    ({"retry-after": "soon"}, None), ({}, None),
])
def test_retry_after_header_forms(headers, want):
    import httpx2
    import openai

    from services.llm_orchestration.openai_client import retry_after_s

    response = httpx2.Response(429, headers=headers,
                               request=httpx2.Request("POST", "http://127.0.0.1/v1/x"))
    assert retry_after_s(openai.RateLimitError("limited", response=response, body=None)) == want


def test_retry_after_http_date_is_converted_to_seconds_from_now():
    import email.utils
    import time

    import httpx2
    import openai

    from services.llm_orchestration.openai_client import retry_after_s

    when = email.utils.formatdate(time.time() + 5, usegmt=True)
    response = httpx2.Response(503, headers={"retry-after": when},
                               request=httpx2.Request("POST", "http://127.0.0.1/v1/x"))
    waited = retry_after_s(openai.InternalServerError("busy", response=response, body=None))
    assert waited is not None and 3.0 <= waited <= 5.0
