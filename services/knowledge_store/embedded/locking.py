"""The per-tenant readers/writer lock: searches share it, a committing writer holds it alone.

A thread lock (`threading.Condition`), so it protects the tenant's in-memory indexes across
worker threads and event loops alike. Waiting writers go before new readers, so a stream of
searches cannot starve a write. Reads that run on the event loop itself (search.py) must
never block there: they ask with `wait=False` and get `Busy` instead of waiting.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Busy(Exception):
    """A non-waiting read found the tenant's lock taken by a writer (see `RWLock.read`)."""


class RWLock:
    """Readers share, a writer is alone; waiting writers go before new readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @property
    def busy(self) -> bool:
        """Held or waited for by anyone right now (a snapshot)."""
        with self._cond:
            return bool(self._readers or self._writer or self._writers_waiting)

    @contextmanager
    def read(self, *, wait: bool = True) -> Iterator[None]:
        """Shared hold. With `wait=False`, raises `Busy` at once instead of waiting when a
        writer holds the lock or waits for it (callers on the event loop must never block)."""
        with self._cond:
            while self._writer or self._writers_waiting:
                if not wait:
                    raise Busy
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
