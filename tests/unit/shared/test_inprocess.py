"""The generic in-process adapter's streamed call: its deadline bounds the wait for each item,
so a stream that keeps progressing runs as long as its work and one that goes quiet is cut,
naming the service; the time the caller spends on an item is not the callee's."""
from __future__ import annotations

import asyncio

import pytest

from shared.errors import DeadlineExceeded
from shared.inprocess import Call, InProcessCaller, InProcessClient


class _Worker:
    """A callee whose stream sends an item every `step_s`, then goes quiet for `quiet_s`."""

    def __init__(self, items: int, step_s: float, quiet_s: float = 0.0) -> None:
        self.items, self.step_s, self.quiet_s, self.closed = items, step_s, quiet_s, False

    async def work(self, principal, label: str):
        try:
            for i in range(self.items):
                await asyncio.sleep(self.step_s)
                yield f"{label} {i}"
            await asyncio.sleep(self.quiet_s)
            yield f"{label} done"
        finally:
            self.closed = True


def _client(worker: _Worker, deadline_s: float) -> InProcessClient:
    caller = InProcessCaller(service=None, callee="worker", require_auth=False)
    return InProcessClient(worker, {"work": Call("Work", True, long=True)}, caller, service="Worker", rpc_service="test.Worker",
                           timeout_s=deadline_s, long_timeout_s=deadline_s)


async def test_a_stream_longer_than_its_deadline_completes_while_it_progresses():
    client = _client(_Worker(items=8, step_s=0.05), deadline_s=0.2)      # 0.4 s of work, 0.2 s deadline
    got = []
    async for item in client.work("a"):
        got.append(item)
        await asyncio.sleep(0.1)                                      # the caller's own time is not counted
    assert got == [f"a {i}" for i in range(8)] + ["a done"]


async def test_a_stream_that_goes_quiet_for_its_deadline_is_cut_naming_the_service_and_closed():
    worker = _Worker(items=2, step_s=0.01, quiet_s=5.0)
    got = []
    with pytest.raises(DeadlineExceeded, match="Worker sent nothing of the stream for 0.2 s"):
        async for item in _client(worker, deadline_s=0.2).work("b"):
            got.append(item)
    assert got == ["b 0", "b 1"] and worker.closed
