"""Coalesce concurrent embedding requests into micro-batches, fairly across callers.

Many agents querying at once each send one or two texts. Encoding them one by one wastes the
model; encoding them together costs little more than one. So every request is queued, and a
single collector task forms batches of at most `max_size` texts and hands them to the
backend, resolving each caller's future with its own rows. While a batch encodes, new
requests queue up; when the backend is free again the next batch forms at once from whatever
has waited. `max_inflight` bounds concurrent batches (the local model: 1 on its main session,
2 with its one-thread concurrent sessions; see "Concurrent batches"), plus the batches handed
to the model ahead of a free worker (`LocalEmbedder(ahead=...)`). `query_max_size` caps the
query lane's batches apart from the document lane's (`max_size`).

Ahead of the workers. Forming a batch and handing it to a worker are steps of tasks on the
event loop; where that loop also runs the rest of the stack (`nucleus up --mode single`), each
step waits behind every ready query's Python, and a worker that finished its batch idles until
then. With batches handed over ahead (queued at the worker's executor), the worker takes the
next one at once. Measured under 16 clients in one process (docs/BENCHMARKS.md, "Deployment
modes"): the model's workers were idle two thirds of the time while queries waited ~115 ms for
their embedding.

Fairness. Each request carries a caller key (the end user a call is made for; "" when
unknown) and a lane: "query" (searches) or "document" (bulk ingest, `purpose="document"`).

    lanes     when both lanes have waiting texts, batches alternate between them, so a
              flood of searches cannot stop an ingest (its guaranteed share: every other batch)
    slices    with `document_chars` (the local model), a document batch holds texts up to that
              many characters, never more (but at least one text; `embedder.DOCUMENT_SLICE_CHARS`,
              measured to encode in <= 50 ms), and at most one document batch is handed to the
              backend at a time, running or queued ahead of a worker. A search's texts wait
              behind at most that one slice of ingest work at the model, never behind batches
              of 64 ingest texts queued ahead of it. 0 (a remote endpoint): `max_size` texts,
              as many batches in flight as `max_inflight`.
    callers   inside a lane, a batch is filled one text at a time round-robin over the
              callers with waiting texts (first come, first served within one caller), so one
              caller's 256 texts take turns with another caller's single query instead of
              queueing ahead of it: the query is in the very next batch. A request larger
              than a batch is spread over several batches; its rows are reassembled in order.

Batching across callers stays: one batch holds the texts of every caller whose turn it is.

The wait is adaptive: a request arriving at an idle model waits for company (at most
`max_wait_s` from its arrival, or until a batch is full) only when the previous batch,
finished within the last CONCURRENCY_WINDOW_S, held more than one request. A lone sequential
caller therefore never pays the wait, while many concurrent callers get coalesced.

`max_wait_s=0, max_size=1` turns coalescing off (one text per encode). `max_pending` bounds
the requests waiting for their first batch (ResourceExhausted beyond it).

Concurrent batches. With `concurrent_encode`, a batch that serves more than one request, runs
while other requests wait or while another request's batch encodes, goes to it instead of
`encode` (one request spread over several batches is still a lone caller): the
local model then runs on one-thread sessions, the cheapest per text, two batches side by side
(`max_inflight` 2), instead of one batch spread over both cores; so does every batch within
CONCURRENCY_WINDOW_S of such a batch. A lone caller keeps `encode` (both threads, lowest
latency). Both give the same vectors.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shared.errors import InvalidArgument, ResourceExhausted, Unavailable

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 4096
CONCURRENCY_WINDOW_S = 0.25
LANES = ("query", "document")
Encode = Callable[[list[str]], Awaitable[NDArray[np.float32]]]


@dataclass(frozen=True, slots=True)
class BatchLayout:
    """How texts are batched and the local model's batches laid out on the cores: chosen by
    measurement, not settings (the alternatives' figures: lab/NOTES.md); `LlmOrchestrator(layout=)`."""

    max_wait_ms: float = 2.0        # how long a text waits for others to join its batch
    max_size: int = 64              # texts per batch of concurrent callers
    query_max_size: int = 0         # texts per batch of the query lane; 0 = max_size
    concurrent_threads: int = 1     # threads of the second session for concurrent batches; 0 = none
    concurrent_workers: int = 0     # workers running those batches; 0 = the model's threads // concurrent_threads
    ahead: int = 0                  # batches handed to the model ahead of a free worker


#: LlmOrchestration in a process of its own, or embeddings from an API. Micro-batching: docs/BENCHMARKS.md
#: "Components, in process"; a one-thread second session: "Throughput under concurrency".
SPLIT_LAYOUT = BatchLayout()
#: One process with the local model (`nucleus up --mode single`): one worker, one batch ahead, query batches
#: of 4, so the loop running the services' Python keeps the other core: docs/BENCHMARKS.md "Deployment modes".
SINGLE_LAYOUT = BatchLayout(query_max_size=4, concurrent_workers=1, ahead=1)


@dataclass(slots=True, eq=False)
class _Pending:
    """One submitted request: its texts, who sent it, and its rows as they arrive."""

    texts: list[str]
    future: asyncio.Future[NDArray[np.float32]]
    arrived: float
    caller: str
    taken: int = 0                          # texts handed to batches so far (a prefix)
    done: int = 0                           # rows received so far
    rows: NDArray[np.float32] | None = None


@dataclass(slots=True)
class _Slice:
    pending: _Pending
    start: int
    stop: int


class _Lane:
    """The waiting requests of one lane, one FIFO per caller, callers in round-robin order."""

    def __init__(self) -> None:
        self.callers: OrderedDict[str, deque[_Pending]] = OrderedDict()
        self.texts = 0                      # texts not yet handed to a batch

    def push(self, pending: _Pending) -> None:
        self.callers.setdefault(pending.caller, deque()).append(pending)
        self.texts += len(pending.texts)

    def oldest_arrival(self) -> float:
        return min(queue[0].arrived for queue in self.callers.values())

    def take(self, limit: int, on_leave: Callable[[_Pending], None], max_chars: int = 0) -> list[_Slice]:
        """Up to `limit` texts (and, with `max_chars`, none that would take them past that many
        characters, the first excepted), one per turn, round-robin over the callers. A request
        whose caller gave up is dropped; `on_leave` is told of every request leaving the queue."""
        slices: dict[_Pending, _Slice] = {}
        taken = chars = 0
        while taken < limit and self.callers and not (max_chars and chars >= max_chars):
            caller, queue = next(iter(self.callers.items()))
            pending = queue[0]
            if pending.future.done():                   # the caller gave up
                queue.popleft()
                self.texts -= len(pending.texts) - pending.taken
                on_leave(pending)
            elif taken and max_chars and chars + len(pending.texts[pending.taken]) > max_chars:
                break                                   # the next text would overrun the slice
            else:
                part = slices.get(pending)
                if part is None:
                    part = slices[pending] = _Slice(pending, pending.taken, pending.taken)
                chars += len(pending.texts[pending.taken])
                pending.taken += 1
                part.stop = pending.taken
                taken += 1
                self.texts -= 1
                if pending.taken == len(pending.texts):
                    queue.popleft()
                    on_leave(pending)
            if queue:
                self.callers.move_to_end(caller)        # the next caller's turn
            else:
                del self.callers[caller]
        return list(slices.values())

    def drain(self) -> list[_Pending]:
        waiting = [p for queue in self.callers.values() for p in queue]
        self.callers.clear()
        self.texts = 0
        return waiting


@dataclass(slots=True)
class BatchStats:
    batches: int = 0
    texts: int = 0
    requests: int = 0                       # request slices, summed over batches
    largest: int = 0
    by_lane: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LANES, 0))   # batches per lane
    concurrent: int = 0                     # batches sent to `concurrent_encode`
    waits: int = 0                          # requests that reached their first batch
    wait_s: float = 0.0                     # their time in the queue until then, summed

    @property
    def mean_batch_texts(self) -> float:
        return self.texts / self.batches if self.batches else 0.0


class MicroBatcher:
    def __init__(self, encode: Encode, *, max_wait_s: float, max_size: int,
                 max_inflight: int = 1, max_pending: int = DEFAULT_MAX_PENDING,
                 concurrent_encode: Encode | None = None, query_max_size: int = 0,
                 document_chars: int = 0) -> None:
        """`query_max_size`: texts per batch of the query lane (0 = `max_size`);
        `document_chars`: the document lane's slices (module docstring; 0 = none)."""
        if max_wait_s < 0 or max_size < 1 or max_inflight < 1 or max_pending < 1 or query_max_size < 0 \
                or document_chars < 0:
            raise ValueError("max_wait_s >= 0, max_size >= 1, max_inflight >= 1, max_pending >= 1, "
                             "query_max_size >= 0, document_chars >= 0 are required")
        self._encode = encode
        self._concurrent_encode = concurrent_encode
        self._max_wait_s = max_wait_s
        self._lane_max = {"query": query_max_size or max_size, "document": max_size}
        self._document_chars = document_chars
        self._documents_handed = 0          # document batches handed over and not finished
        self._max_pending = max_pending
        self._lanes = {name: _Lane() for name in LANES}
        self._turn = 0                      # which lane goes first when both have texts
        self._queued = 0                    # requests with texts not yet handed to a batch
        self._work = asyncio.Event()
        self._slots = asyncio.Semaphore(max_inflight)
        self._collector: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._closed = False
        self._last_batch_requests = 0
        self._last_batch_end = float("-inf")
        self._last_concurrent = float("-inf")
        self._encoding: dict[_Pending, int] = {}    # requests with a batch encoding → batches
        self.stats = BatchStats()

    async def start(self) -> None:
        if self._collector is None:
            self._collector = asyncio.create_task(self._collect(), name="embed-microbatcher")

    async def submit(self, texts: list[str], *, caller: str = "", lane: str = "query") -> NDArray[np.float32]:
        """Rows for `texts`, encoded together with whatever else is waiting. `caller` is whose
        turn the texts take ("" = unknown); `lane` is "query" or "document" (bulk ingest)."""
        if lane not in self._lanes:
            raise InvalidArgument("lane", f"{lane!r} is not one of {', '.join(LANES)}")
        if self._closed or self._collector is None:
            raise Unavailable("the embedding micro-batcher is not running")
        if not texts:
            raise InvalidArgument("texts", "at least one text is required")
        if self._queued >= self._max_pending:
            raise ResourceExhausted(f"embedding queue is full ({self._max_pending} pending "
                                    "requests); retry later")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[NDArray[np.float32]] = loop.create_future()
        self._lanes[lane].push(_Pending(list(texts), future, loop.time(), caller))
        self._queued += 1
        self._work.set()
        return await future

    async def close(self) -> None:
        self._closed = True
        if self._collector is not None:
            self._collector.cancel()
            await asyncio.gather(self._collector, return_exceptions=True)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        for lane in self._lanes.values():
            for pending in lane.drain():
                if not pending.future.done():
                    pending.future.set_exception(Unavailable("the embedding service is shutting down"))
        self._queued = 0

    # -- scheduling ------------------------------------------------------------------------

    def _left_queue(self, pending: _Pending) -> None:
        self._queued -= 1

    def _next_lane(self) -> str | None:
        order = LANES if self._turn == 0 else LANES[::-1]
        return next((name for name in order if self._lanes[name].texts
                     and not (name == "document" and self._document_chars and self._documents_handed)), None)

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                batch = await self._next_batch(loop)
            except BaseException:
                self._slots.release()
                raise
            if not batch[1]:                 # every request in it was given up
                self._slots.release()
                continue
            if batch[0] == "document":
                self._documents_handed += 1
            task = asyncio.create_task(self._run(batch))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _next_batch(self, loop: asyncio.AbstractEventLoop) -> tuple[str, list[_Slice]]:
        name = self._next_lane()
        while name is None:
            self._work.clear()
            await self._work.wait()
            name = self._next_lane()
        lane = self._lanes[name]
        recently_concurrent = (self._last_batch_requests > 1
                               and loop.time() - self._last_batch_end <= CONCURRENCY_WINDOW_S)
        deadline = lane.oldest_arrival() + (self._max_wait_s if recently_concurrent else 0.0)
        limit = self._lane_max[name]
        while lane.texts < limit:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._work.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._work.wait()
            except TimeoutError:
                break
        self._turn = 1 - LANES.index(name)          # the other lane goes first next time
        return name, lane.take(limit, self._left_queue, self._document_chars if name == "document" else 0)

    def _concurrent_now(self, slices: list[_Slice]) -> bool:
        """Whether a batch serves concurrent callers: it holds several requests, others wait
        or a batch of another request is encoding — or that was so within the last
        CONCURRENCY_WINDOW_S (under load, a batch that happens to hold one request is no
        exception). One request spread over several batches is one caller."""
        now = asyncio.get_running_loop().time()
        mine = {s.pending for s in slices}
        unfinished = sum(p.taken < len(p.texts) for p in mine)     # still queued themselves
        if len(mine) > 1 or self._queued > unfinished or any(p not in mine for p in self._encoding):
            self._last_concurrent = now
            return True
        return now - self._last_concurrent <= CONCURRENCY_WINDOW_S

    async def _run(self, batch: tuple[str, list[_Slice]]) -> None:
        lane, slices = batch
        try:
            texts = [t for s in slices for t in s.pending.texts[s.start:s.stop]]
            self.stats.batches += 1
            self.stats.by_lane[lane] += 1
            self.stats.requests += len(slices)
            self.stats.texts += len(texts)
            self.stats.largest = max(self.stats.largest, len(texts))
            now = asyncio.get_running_loop().time()
            first = [sl.pending for sl in slices if sl.start == 0]      # a request's first batch: its wait
            self.stats.waits += len(first)
            self.stats.wait_s += sum(now - pending.arrived for pending in first)
            encode = self._encode
            if self._concurrent_encode is not None and self._concurrent_now(slices):
                encode = self._concurrent_encode
                self.stats.concurrent += 1
            for s in slices:
                self._encoding[s.pending] = self._encoding.get(s.pending, 0) + 1
            try:
                vectors = await encode(texts)
            except Exception as err:
                for s in slices:
                    if not s.pending.future.done():
                        s.pending.future.set_exception(err)
                return
            self._last_batch_requests = len(slices)
            self._last_batch_end = asyncio.get_running_loop().time()
            offset = 0
            for s in slices:
                n = s.stop - s.start
                _deliver(s, vectors[offset:offset + n])
                offset += n
        finally:
            for s in slices:
                left = self._encoding.get(s.pending, 0) - 1
                if left > 0:
                    self._encoding[s.pending] = left
                else:
                    self._encoding.pop(s.pending, None)
            if lane == "document":
                self._documents_handed -= 1
                self._work.set()                    # the lane may hand over its next slice
            self._slots.release()


def _deliver(part: _Slice, rows: NDArray[np.float32]) -> None:
    """Put a slice's rows in place; resolve the request once all of its rows are in."""
    pending = part.pending
    if pending.future.done():
        return
    if part.start == 0 and part.stop == len(pending.texts):
        pending.future.set_result(rows)
        return
    if pending.rows is None:
        pending.rows = np.empty((len(pending.texts), rows.shape[1]), dtype=rows.dtype)
    pending.rows[part.start:part.stop] = rows
    pending.done += part.stop - part.start
    if pending.done == len(pending.texts):
        pending.future.set_result(pending.rows)
