"""The live sources configuration of one process: `SourcesRegistry` (sources.py's docstring),
each source's runtime status, and the status file the CLI reads (`read_status_file`).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from services.rag_pipeline.federation.source_config import (
    EMPTY, SourcesConfig, SourcesFileError, SourceState, default_sources_path, reload_request_path, status_path,
)
from services.rag_pipeline.federation.sources_file import check_tenants, load_sources

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------- runtime status
@dataclass
class SourceStatus:
    """What the probe last saw of a source (mutable; replaced as a whole under the registry lock)."""

    state: SourceState = "unknown"
    last_probe: float = 0.0
    contract: str = ""                  # e.g. "seed000+seed002", "seed002", "tools"
    tools: tuple[str, ...] = ()
    last_error: str = ""
    latency_ms: float = 0.0
    vectors: str = ""                   # a trusted remote Nucleus: "matched", or why its vectors are not used
    fingerprint: str = ""               # its model fingerprint's digest, when matched (peer_vectors.py)

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "last_probe": self.last_probe, "contract": self.contract,
                "tools": list(self.tools), "last_error": self.last_error, "latency_ms": round(self.latency_ms, 1),
                **({"vectors": self.vectors} if self.vectors else {})}


@dataclass(frozen=True)
class ReloadResult:
    ok: bool
    changed: bool
    version: int
    error: str = ""
    sources: int = 0


Callback = Callable[[SourcesConfig], Any]


class SourcesRegistry:
    """The live sources configuration of one process (see the module docstring)."""

    def __init__(self, path: Path | str | None = None, *, poll_s: float = 1.0, publish_status: bool = True,
                 stack_tenants: Iterable[str] = ()) -> None:
        self.path = Path(path).resolve() if path is not None else default_sources_path()
        #: The tenants this stack serves, when known (the auth config's, or the local one). A stack
        #: with exactly one lets a source omit `tenants`; with several every source must name its own.
        self.stack_tenants = frozenset(stack_tenants)
        self.poll_s = poll_s
        self.publish_status = publish_status
        self._lock = threading.Lock()
        self._config = replace(EMPTY, path=str(self.path))
        self._fingerprint: tuple | None = None
        self._text_hash: int | None = None
        self._last_error = ""
        self._last_error_at = 0.0
        self._reloads = 0
        self._status: dict[str, SourceStatus] = {}
        self._subscribers: list[Callback] = []
        self._task: asyncio.Task | None = None
        self._reload_request_mtime = self._mtime(reload_request_path(self.path))
        self._answered_request = ""     # the token of the last reload request answered (`nucleus sources reload`)
        self.reload()

    # -- configuration
    def current(self) -> SourcesConfig:
        return self._config

    @property
    def default_tenants(self) -> frozenset[str]:
        return self.stack_tenants if len(self.stack_tenants) == 1 else frozenset()

    @property
    def last_error(self) -> str:
        return self._last_error

    def reload(self) -> ReloadResult:
        """Read the file again. Valid and different: becomes current, subscribers are told.
        Invalid: the last good configuration stays and `last_error` says what is wrong."""
        with self._lock:
            self._reloads += 1
            fingerprint = self._fingerprint_of(self.path)
            try:
                raw = self.path.read_bytes() if self.path.exists() else b""
                sources = load_sources(self.path)
                check_tenants(sources, self.stack_tenants, self.path)
            except SourcesFileError as err:
                self._fingerprint = fingerprint
                self._last_error, self._last_error_at = str(err), time.time()
                log.error("sources file not loaded, keeping the previous configuration (version %d): %s",
                          self._config.version, err)
                result = ReloadResult(False, False, self._config.version, str(err), len(self._config.sources))
                self._write_status_locked()
                return result
            except OSError as err:
                self._last_error, self._last_error_at = f"{self.path}: cannot be read: {err}", time.time()
                result = ReloadResult(False, False, self._config.version, self._last_error, len(self._config.sources))
                self._write_status_locked()
                return result
            self._fingerprint = fingerprint
            self._last_error = ""
            digest = hash(raw)
            if digest == self._text_hash and self._config.version > 0:
                self._write_status_locked()
                return ReloadResult(True, False, self._config.version, "", len(self._config.sources))
            self._text_hash = digest
            new = SourcesConfig(sources=sources, version=self._config.version + 1, loaded_at=time.time(),
                                path=str(self.path), default_tenants=self.default_tenants)
            changed = new.sources != self._config.sources
            old_config, old_status = self._config, self._status
            self._config = new
            self._status = {}
            for s in sources:          # an unchanged entry keeps its status; a changed one is probed again
                if not s.enabled:
                    self._status[s.id] = SourceStatus(state="locked", last_error="disabled in the sources file")
                elif old_config.get(s.id) == s and s.id in old_status:
                    self._status[s.id] = old_status[s.id]
                else:
                    self._status[s.id] = SourceStatus()
            self._write_status_locked()
            subscribers = list(self._subscribers)
        log.info("sources file %s: version %d, %d sources", self.path, new.version, len(new.sources))
        if changed:
            for callback in subscribers:
                try:
                    result = callback(new)
                    if asyncio.iscoroutine(result):
                        _spawn(result)
                except Exception:      # a subscriber's failure never undoes the reload
                    log.exception("sources subscriber failed")
        return ReloadResult(True, changed, new.version, "", len(new.sources))

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """Call `callback(config)` after each successful change; returns an unsubscribe function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    # -- runtime status
    def status(self, source_id: str) -> SourceStatus:
        return self._status.get(source_id, SourceStatus())

    def statuses(self) -> dict[str, SourceStatus]:
        return dict(self._status)

    def set_status(self, source_id: str, **changes: Any) -> None:
        with self._lock:
            if self._config.get(source_id) is None:
                return                  # removed meanwhile
            current = self._status.get(source_id, SourceStatus())
            self._status[source_id] = replace(current, **changes)
            self._write_status_locked()

    def snapshot(self) -> dict[str, Any]:
        """Configuration + status as JSON (the status file, `rag_sources_status`)."""
        config = self._config
        return {
            "path": str(self.path), "version": config.version, "loaded_at": config.loaded_at,
            "last_error": self._last_error, "last_error_at": self._last_error_at, "reloads": self._reloads,
            "updated_at": time.time(), "answered_request": self._answered_request,
            "stack_tenants": sorted(self.stack_tenants),
            "sources": [{**s.to_json(), "status": self._status.get(s.id, SourceStatus()).to_json()}
                        for s in config.sources],
        }

    def _write_status_locked(self, *, answer: bool = False) -> None:
        if not self.publish_status:
            return
        target = status_path(self.path)
        if not answer and not self.path.exists() and not target.exists():
            return                      # no sources file, nothing ever published: leave the data dir alone
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.snapshot(), f, indent=1)
            os.replace(tmp, target)
        except OSError as err:
            log.warning("sources status not written to %s: %s", target, err)

    # -- watching
    @staticmethod
    def _mtime(path: Path) -> int | None:
        try:
            return path.stat().st_mtime_ns
        except OSError:
            return None

    @staticmethod
    def _fingerprint_of(path: Path) -> tuple | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def check_for_changes(self) -> ReloadResult | None:
        """Reload if the file (or the reload request file) changed since the last look."""
        request = self._mtime(reload_request_path(self.path))
        if request != self._reload_request_mtime:
            self._reload_request_mtime = request
            self._text_hash = None if request is not None else self._text_hash
            result = self.reload()
            if request is not None:
                # Answer the request even when there is no sources file yet (a fresh stack): the
                # CLI waits for this token in the status file (`nucleus sources reload`).
                try:
                    token = reload_request_path(self.path).read_text(encoding="utf-8")[:128].strip()
                except (OSError, UnicodeDecodeError):
                    token = ""
                with self._lock:
                    self._answered_request = token
                    self._write_status_locked(answer=True)
            return result
        if self._fingerprint_of(self.path) != self._fingerprint:
            return self.reload()
        return None

    def start_watching(self) -> None:
        """Poll the file every `poll_s` seconds in this event loop (atomic renames, editors that
        rewrite in place and network file systems are all seen; no inotify needed)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="sources-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                self.check_for_changes()
            except Exception:
                log.exception("sources watch failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancelled(task)


async def cancelled(task: asyncio.Task | None) -> None:
    """Cancel a background task (None: none) and wait until it has stopped, whatever it raised."""
    if task is not None:
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


_background: set[asyncio.Task] = set()


def _spawn(coro: Any) -> None:
    try:
        task = asyncio.get_running_loop().create_task(coro)
    except RuntimeError:            # no loop in this thread: run it to completion here
        asyncio.run(coro)
        return
    _background.add(task)
    task.add_done_callback(_background.discard)


def read_status_file(sources_path: Path) -> dict[str, Any] | None:
    """What the running service last published about its sources (None: never published)."""
    try:
        return json.loads(status_path(sources_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
