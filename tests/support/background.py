"""Stacks begun ahead of the tests that use them, one at a time, in one background thread.

Starting a stack is mostly waiting for one service process at a time (the supervisor starts them
in dependency order), which leaves the machine's second core idle. A session that will need a
stack later can begin it at its first integration test: `begin(name, start)` queues
`start()` (which returns `(value, stop)`); `take(name)` waits for it and hands over the value and
the duty to call `stop`; `stop_untaken()` at the session's end stops what no test took (a
session cut short, e.g. by -x). Taking a stack nobody began just starts it in the caller.

At most `AHEAD` stacks are started and not yet taken at any time: the next one starts when a test
takes one, so a session holds its running stacks plus one waiting, not every stack at once.

The `stop` that `take` hands over returns at once: the stack stops in a thread of its own (a
graceful stop is mostly waiting for processes to exit) while the next tests run, each on its own
ports and data directory. `stop_untaken()` waits for those stops too and raises the first error
one of them met.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

Start = Callable[[], tuple[Any, Callable[[], None]]]

AHEAD = 1
_lock = threading.Condition()
_futures: dict[str, Future] = {}
_taken: set[str] = set()
_queue: queue.SimpleQueue = queue.SimpleQueue()
_worker: list[threading.Thread] = []
_stopping: list[threading.Thread] = []
_stop_errors: list[BaseException] = []


def _waiting() -> int:
    """Stacks started (or starting) in the background that no test has taken yet."""
    return sum(1 for n, f in _futures.items()
               if n not in _taken and (f.running() or (f.done() and not f.cancelled() and f.exception() is None)))


def _work() -> None:
    while True:
        name, start, future = _queue.get()
        with _lock:
            _lock.wait_for(lambda: _waiting() < AHEAD or name in _taken)
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(start())
        except BaseException as err:  # noqa: BLE001 - handed to whoever takes the stack
            future.set_exception(err)


def begin(name: str, start: Start) -> None:
    """Queue `start` for the background thread (once per name)."""
    with _lock:
        if name in _futures:
            return
        future: Future = Future()
        _futures[name] = future
        if not _worker:
            _worker.append(threading.Thread(target=_work, name="stacks-in-background", daemon=True))
            _worker[0].start()
        _queue.put((name, start, future))


def take(name: str, start: Start) -> tuple[Any, Callable[[], None]]:
    """`(value, stop)` of the stack `name`: begun in the background, or started here if it was not
    (or if it has not left the queue yet). `stop()` stops it in the background."""
    with _lock:
        _taken.add(name)
        future = _futures.get(name)
        _lock.notify_all()
    value, stop = start() if future is None or future.cancel() else future.result()
    return value, lambda: stop_in_background(name, stop)


def stop_in_background(name: str, stop: Callable[[], None]) -> None:
    """`stop()` in a thread of its own (processes of a module's fixture, say); `stop_untaken()`
    waits for it."""
    def run() -> None:
        try:
            stop()
        except BaseException as err:  # noqa: BLE001 - raised again by stop_untaken()
            _stop_errors.append(err)

    thread = threading.Thread(target=run, name=f"stop {name}")
    thread.start()
    _stopping.append(thread)


def stop_untaken() -> None:
    """Stop every stack begun in the background that no test took; cancel those not begun yet;
    wait for the stops begun by `take`'s `stop`."""
    with _lock:
        pending = [(n, f) for n, f in _futures.items() if n not in _taken]
        _taken.update(n for n, _ in pending)
        _lock.notify_all()
    for _, future in pending:
        if future.cancel():
            continue
        try:
            _, stop = future.result()
        except Exception:  # noqa: BLE001 - it never started: nothing to stop
            continue
        stop()
    for thread in _stopping:
        thread.join()
    if _stop_errors:
        raise _stop_errors[0]
