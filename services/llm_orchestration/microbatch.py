"""Coalesce concurrent small embedding requests into micro-batches.

Many agents querying at once each send one or two texts. Encoding them one by one wastes
the model; encoding them together costs little more than one. So requests go into an
asyncio queue; a single collector task takes the first waiting request, waits at most
`max_wait_s` *from that request's arrival* for company (or until `max_size` texts are
collected), then hands the batch to the backend and resolves each caller's future with its
rows. While a batch encodes, new requests queue up; when the backend is free again the next
batch forms at once from whatever has waited. `max_inflight` bounds concurrent batches
(1 for the local model, whose single worker thread would only queue them anyway).

The wait is adaptive: a request arriving at an idle model waits for company only when the
previous batch, finished within the last CONCURRENCY_WINDOW_S, held more than one request.
A lone sequential caller therefore never pays the wait, while many concurrent callers (whose
batches hold many requests) get coalesced; either way, requests that queue up while a batch
encodes form the next batch at once.

`max_wait_s=0, max_size=1` turns coalescing off (one request per encode).
Ingest-sized requests should bypass this class entirely (see `LlmOrchestrator.embed`).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shared.errors import ResourceExhausted, Unavailable

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 4096
CONCURRENCY_WINDOW_S = 0.25
Encode = Callable[[list[str]], Awaitable[NDArray[np.float32]]]


@dataclass(slots=True)
class _Pending:
    texts: list[str]
    future: asyncio.Future[NDArray[np.float32]]
    arrived: float


@dataclass(slots=True)
class BatchStats:
    batches: int = 0
    texts: int = 0
    requests: int = 0
    largest: int = 0

    @property
    def mean_batch_texts(self) -> float:
        return self.texts / self.batches if self.batches else 0.0


class MicroBatcher:
    def __init__(self, encode: Encode, *, max_wait_s: float, max_size: int,
                 max_inflight: int = 1, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_wait_s < 0 or max_size < 1 or max_inflight < 1 or max_pending < 1:
            raise ValueError("max_wait_s >= 0, max_size >= 1, max_inflight >= 1, "
                             "max_pending >= 1 are required")
        self._encode = encode
        self._max_wait_s = max_wait_s
        self._max_size = max_size
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=max_pending)
        self._slots = asyncio.Semaphore(max_inflight)
        self._collector: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._closed = False
        self._last_batch_requests = 0
        self._last_batch_end = float("-inf")
        self.stats = BatchStats()

    async def start(self) -> None:
        if self._collector is None:
            self._collector = asyncio.create_task(self._collect(), name="embed-microbatcher")

    async def submit(self, texts: list[str]) -> NDArray[np.float32]:
        """Rows for `texts`, encoded together with whatever else is waiting."""
        if self._closed or self._collector is None:
            raise Unavailable("the embedding micro-batcher is not running")
        loop = asyncio.get_running_loop()
        pending = _Pending(texts, loop.create_future(), loop.time())
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            raise ResourceExhausted(f"embedding queue is full ({self._queue.maxsize} pending "
                                    "requests); retry later") from None
        return await pending.future

    async def close(self) -> None:
        self._closed = True
        if self._collector is not None:
            self._collector.cancel()
            await asyncio.gather(self._collector, return_exceptions=True)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        while not self._queue.empty():
            pending = self._queue.get_nowait()
            if not pending.future.done():
                pending.future.set_exception(Unavailable("the embedding service is shutting down"))

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                batch = await self._next_batch(loop)
            except BaseException:
                self._slots.release()
                raise
            if not batch:
                self._slots.release()
                continue
            task = asyncio.create_task(self._run(batch))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _next_batch(self, loop: asyncio.AbstractEventLoop) -> list[_Pending]:
        first = await self._queue.get()
        batch, size = [first], len(first.texts)
        recently_concurrent = (self._last_batch_requests > 1
                               and loop.time() - self._last_batch_end <= CONCURRENCY_WINDOW_S)
        deadline = first.arrived + (self._max_wait_s if recently_concurrent else 0.0)
        while size < self._max_size:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        item = await self._queue.get()
                except TimeoutError:
                    break
            batch.append(item)
            size += len(item.texts)
        return [p for p in batch if not p.future.done()]   # drop callers that gave up

    async def _run(self, batch: list[_Pending]) -> None:
        try:
            texts = [text for pending in batch for text in pending.texts]
            self.stats.batches += 1
            self.stats.requests += len(batch)
            self.stats.texts += len(texts)
            self.stats.largest = max(self.stats.largest, len(texts))
            try:
                vectors = await self._encode(texts)
            except Exception as err:
                for pending in batch:
                    if not pending.future.done():
                        pending.future.set_exception(err)
                return
            self._last_batch_requests = len(batch)
            self._last_batch_end = asyncio.get_running_loop().time()
            start = 0
            for pending in batch:
                stop = start + len(pending.texts)
                if not pending.future.done():
                    pending.future.set_result(vectors[start:stop])
                start = stop
        finally:
            self._slots.release()
