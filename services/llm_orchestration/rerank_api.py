"""A remote re-ranker behind the de-facto `/rerank` API: query + documents → (index, score).

Two request shapes, one setting (`NUCLEUS_LLM_RERANK_API_FORMAT`):

    "cohere" (default)  POST <base>/rerank {"model", "query", "documents": [...], "top_n"}
                        → {"results": [{"index", "relevance_score"}]}      Cohere, Jina, vLLM
    "tei"               POST <base>/rerank {"query", "texts": [...], "raw_scores": false}
                        → [{"index", "score"}]                              Hugging Face TEI

Either response shape is accepted whatever was sent. Every document must come back exactly
once; scores outside [0, 1] are taken as logits and passed through a sigmoid.

The same discipline as the OpenAI-compatible client (openai_client.py): a per-attempt timeout
(`rerank_api_timeout_s`), at most `max_attempts` attempts with retries ONLY for HTTP 429, 5xx,
timeouts and connection errors (waiting as `Retry-After` says, capped, else exponential
backoff with jitter), and a circuit breaker of its own consulted before every attempt. Errors
after the last attempt: 429 → ResourceExhausted, 5xx / connection → Unavailable, timeout →
DeadlineExceeded, other 4xx / a body that is not the expected JSON → UpstreamFailed (no
retry). The key is sent only as `Authorization: Bearer`; every message passes the Redactor.
What is sent: the query and the candidate texts (already clipped to `max_text_chars`), nothing
else — no tenant, user or document ids.
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
from numpy.typing import NDArray
from opentelemetry import trace

from shared.errors import DeadlineExceeded, NucleusError, ResourceExhausted, Unavailable, UpstreamFailed
from shared.redaction import Redactor

from .breaker import CircuitBreaker
from .openai_client import retry_after_s
from .upstream import UpstreamRetries

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

FORMATS = ("cohere", "tei")
ERROR_DETAIL_CHARS = 200


class _Status(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.status_code = response.status_code


class _Timeout(Exception):
    pass


def _retryable(err: BaseException) -> bool:
    if isinstance(err, (_Timeout, httpx.TimeoutException, httpx.TransportError)):
        return True
    return isinstance(err, _Status) and (err.status_code == 429 or err.status_code >= 500)


def _counts_against_breaker(err: Exception) -> bool:
    return _retryable(err) or isinstance(err, UpstreamFailed)


def parse_scores(body: Any, count: int) -> NDArray[np.float32]:
    """Scores in [0, 1] for `count` documents from a Cohere/Jina/vLLM or TEI response body."""
    items = body.get("results") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise UpstreamFailed("rerank API answered without a result list (expected {'results': [...]} "
                             "or [{'index', 'score'}])")
    scores: dict[int, float] = {}
    for item in items:
        if not isinstance(item, dict):
            raise UpstreamFailed("rerank API result items must be objects with 'index' and a score")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise UpstreamFailed(f"rerank API returned index {index!r} for {count} documents")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise UpstreamFailed(f"rerank API returned score {score!r} for document {index}")
        if index in scores:
            raise UpstreamFailed(f"rerank API scored document {index} twice")
        scores[index] = float(score)
    if len(scores) != count:
        raise UpstreamFailed(f"rerank API scored {len(scores)} of {count} documents")
    values = np.array([scores[i] for i in range(count)], dtype=np.float64)
    if values.min() < 0.0 or values.max() > 1.0:
        values = 1.0 / (1.0 + np.exp(-values))         # logits
    return values.astype(np.float32)


class RerankApi:
    """One remote `/rerank` endpoint."""

    def __init__(self, base_url: str, *, api_key: str = "", model: str = "", api_format: str = "cohere",
                 timeout_s: float = 10.0, max_attempts: int = 3, breaker: CircuitBreaker,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if api_format not in FORMATS:
            raise ValueError(f"rerank API format must be one of {FORMATS}, got {api_format!r}")
        self._url = base_url.rstrip("/") + "/rerank"
        parts = urlsplit(base_url)
        self.upstream = f"rerank API {parts.hostname or '?'}" + (f":{parts.port}" if parts.port else "")
        self.model = model
        self._format = api_format
        self._timeout_s = timeout_s
        self._redactor = Redactor([api_key])
        self._retries = UpstreamRetries(self.upstream, max_attempts=max_attempts, breaker=breaker,
                                        redactor=self._redactor, retry_after=retry_after_s, describe=_describe,
                                        sleep=sleep)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout_s, transport=transport)

    @property
    def breaker_state(self) -> str:
        return self._retries.breaker.state

    async def close(self) -> None:
        await self._client.aclose()

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        if self._format == "tei":
            return {"query": query, "texts": documents, "raw_scores": False}
        payload: dict[str, Any] = {"query": query, "documents": documents, "top_n": len(documents)}
        if self.model:
            payload["model"] = self.model
        return payload

    async def score(self, query: str, documents: Sequence[str]) -> NDArray[np.float32]:
        documents = list(documents)
        payload = self._payload(query, documents)

        async def attempt_once() -> NDArray[np.float32]:
            try:
                async with asyncio.timeout(self._timeout_s):
                    response = await self._client.post(self._url, json=payload)
            except TimeoutError:
                raise _Timeout() from None
            if response.status_code >= 400:
                raise _Status(response)
            try:
                body = response.json()
            except ValueError:
                raise UpstreamFailed(f"{self.upstream} answered with a body that is not JSON") from None
            return parse_scores(body, len(documents))

        try:
            return await self._retries.call(_tracer, "rerank_api.rerank", attempt_once, retryable=_retryable,
                                            counts_as_failure=_counts_against_breaker, translate=self._translate,
                                            attributes={"llm.rerank.count": len(documents)})
        except UpstreamFailed as err:          # a body that is not the expected shape: its words redacted too
            raise UpstreamFailed(self._redactor.redact(str(err))) from None

    def _translate(self, err: Exception, attempts: int) -> NucleusError:
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        r = self._redactor.redact
        if isinstance(err, (_Timeout, httpx.TimeoutException)):
            return DeadlineExceeded(r(f"{self.upstream} did not answer within {self._timeout_s:g}s ({tries})"))
        if isinstance(err, httpx.TransportError):
            return Unavailable(r(f"could not reach {self.upstream} ({tries}): {type(err).__name__}"))
        if isinstance(err, _Status):
            detail = _describe(err)
            if err.status_code == 429:
                return ResourceExhausted(r(f"{self.upstream} rate-limited the request (HTTP 429, {tries}): {detail}"))
            if err.status_code >= 500:
                return Unavailable(r(f"{self.upstream} failed the request (HTTP {err.status_code}, {tries}): "
                                     f"{detail}"))
            hint = " — check NUCLEUS_LLM_RERANK_API_KEY" if err.status_code in (401, 403) else ""
            return UpstreamFailed(r(f"{self.upstream} rejected the request (HTTP {err.status_code}){hint}: {detail}"))
        return UpstreamFailed(r(f"{self.upstream} failed: {_describe(err)}"))


def _describe(err: BaseException | None) -> str:
    if err is None:
        return "unknown error"
    if isinstance(err, _Timeout):
        return "timed out"
    if isinstance(err, _Status):
        text = " ".join(err.response.text.split())
        return (text[:ERROR_DETAIL_CHARS] + "…") if len(text) > ERROR_DETAIL_CHARS else (text or err.args[0])
    text = " ".join((str(err) or type(err).__name__).split())
    return text[:ERROR_DETAIL_CHARS]
