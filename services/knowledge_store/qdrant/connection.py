"""The connection to Qdrant: a client (a cluster at a URL, or local mode in a folder), every
call run on a worker thread with a timeout and bounded retries, and failures turned into the
project's errors.

    unreachable / timed out / 5xx after the retries   Unavailable naming the URL (never the key)
    anything else Qdrant refuses                       NucleusError (INTERNAL) with its answer

Retries (tenacity) only repeat calls that are safe to repeat: every write of the store is an
upsert of deterministic ids, a payload set or a delete by filter. Local mode serves one process
per folder and is not thread-safe, so its calls are serialised.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from shared.errors import NucleusError, Unavailable
from shared.settings import KnowledgeStoreSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
LOCAL_CALL_BOUND_S = 300.0


def _transient(err: BaseException) -> bool:
    if isinstance(err, (ResponseHandlingException, httpx.TransportError, TimeoutError, ConnectionError)):
        return True
    return isinstance(err, UnexpectedResponse) and err.status_code is not None and err.status_code >= 500


def api_key(settings: KnowledgeStoreSettings) -> str | None:
    """The API key from NUCLEUS_QDRANT_API_KEY, else the file NUCLEUS_QDRANT_API_KEY_FILE names."""
    if settings.qdrant_api_key is not None and settings.qdrant_api_key.get_secret_value():
        return settings.qdrant_api_key.get_secret_value()
    if settings.qdrant_api_key_file is not None:
        try:
            return Path(settings.qdrant_api_key_file).read_text().strip() or None
        except OSError as err:
            raise Unavailable(f"cannot read the Qdrant API key file {settings.qdrant_api_key_file}: "
                              f"{err.strerror}") from None
    return None


class Connection:
    """One Qdrant client and how its calls are made (module docstring)."""

    def __init__(self, settings: KnowledgeStoreSettings) -> None:
        if settings.qdrant_url:
            self.where = settings.qdrant_url
            self.cluster = True
            self.client = QdrantClient(url=settings.qdrant_url, api_key=api_key(settings),
                                       timeout=max(1, math.ceil(settings.qdrant_timeout_s)),
                                       check_compatibility=False)
        elif str(settings.qdrant_path) == ":memory:":     # local mode without persistence (benchmarks)
            self.where = ":memory:"
            self.cluster = False
            self.client = QdrantClient(location=":memory:")
        elif settings.qdrant_path is not None:
            self.where = str(settings.qdrant_path)
            self.cluster = False
            Path(settings.qdrant_path).mkdir(parents=True, exist_ok=True)
            try:
                self.client = QdrantClient(path=str(settings.qdrant_path))
            except RuntimeError as err:     # the folder is locked by another process
                raise Unavailable(f"Qdrant local storage {settings.qdrant_path} is in use by another "
                                  f"process: {err}") from None
        else:
            raise NucleusError("the qdrant backend needs NUCLEUS_QDRANT_URL (a cluster) or "
                               "NUCLEUS_QDRANT_PATH (local mode)")
        if not self.cluster:    # the plan's indexes are sent anyway (the same requests as a cluster's)
            warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
        self.timeout_s = settings.qdrant_timeout_s
        self.attempts = settings.qdrant_retries + 1
        self._local_lock = threading.Lock() if not self.cluster else None
        self.closed = False

    async def call(self, method: str, **kwargs: Any) -> Any:
        """`client.<method>(**kwargs)` on a worker thread, retried and translated."""
        return await self.run(lambda c: getattr(c, method)(**kwargs), method)

    async def run(self, fn: Callable[[QdrantClient], T], what: str) -> T:
        if self.closed:
            raise Unavailable("the knowledge store is closed")
        # The client's own timeout bounds each attempt; this bounds the whole call (retries
        # included) so nothing waits forever even if a socket hangs below the client.
        bound = self.timeout_s * self.attempts + 0.5 * self.attempts + 1.0
        if not self.cluster:
            bound = max(bound, LOCAL_CALL_BOUND_S)     # local mode: CPU-bound Python, no socket
        try:
            async with asyncio.timeout(bound):
                return await asyncio.to_thread(self._sync, fn, what)
        except TimeoutError:
            raise Unavailable(f"Qdrant at {self.where} did not answer {what} within {bound:.0f}s") from None

    def _sync(self, fn: Callable[[QdrantClient], T], what: str) -> T:
        try:
            for attempt in Retrying(stop=stop_after_attempt(self.attempts), reraise=True,
                                    wait=wait_exponential(multiplier=0.1, max=1.0),
                                    retry=retry_if_exception(_transient)):
                with attempt:
                    if self._local_lock is not None:
                        with self._local_lock:
                            return fn(self.client)
                    return fn(self.client)
        except NucleusError:
            raise
        except Exception as err:  # noqa: BLE001 - translated here, once
            if _transient(err):
                cause = err.__cause__ or err.__context__ or err
                raise Unavailable(f"Qdrant at {self.where} is unreachable ({what}, {self.attempts} attempts): "
                                  f"{type(cause).__name__}: {str(cause)[:200]}") from None
            if isinstance(err, UnexpectedResponse):
                raise NucleusError(f"Qdrant at {self.where} refused {what}: HTTP {err.status_code} "
                                   f"{err.content[:300]!r}") from None
            raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self._local_lock is not None:
                with self._local_lock:
                    self.client.close()
            else:
                self.client.close()
        except Exception:  # noqa: BLE001 - closing must not fail the shutdown
            log.exception("closing the Qdrant client failed")
