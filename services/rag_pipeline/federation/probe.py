"""Background probe of every configured source: connect, list its tools, detect the RAG
contract, and record the result as the source's status in the registry.

    connected        the source answered tools/list (and, for kind "rag", speaks a RAG contract)
    action_required  the credential is missing, or the source refused it (HTTP 401/403)
    locked           disabled in the sources file, or its address is refused by the safety rules
    error            unreachable, timed out, or a "rag" source without rag_search / seed 000's two required tools

A source marked `trusted` with `identity: assertion` (a remote Nucleus) is also asked for its
embedding model's fingerprint (`nucleus_model_fingerprint`), compared with this stack's own
(peer_vectors.py): `vectors` in its status says "matched" (its hits' vectors are then asked for
and used without re-embedding) or why not.

Probes run after each reload (for new or changed sources) and every `interval_s` seconds;
`probe_now()` forces one (the admin tool, tests). Each probe's tool list is handed to
`on_tools(source_id, tools)` (the proxy tools follow it).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from services.rag_pipeline.federation.peer_vectors import FINGERPRINT_TOOL, LocalFingerprint
from services.rag_pipeline.federation.remote import RemoteError, RemotePool, ToolInfo, detect_contract
from services.rag_pipeline.federation.sources import Source, SourcesConfig, SourcesRegistry
from services.rag_pipeline.federation.sources_registry import cancelled

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 60.0
_STATE_OF_KIND = {"credential": "action_required", "refused": "locked"}


class SourceProber:
    def __init__(self, registry: SourcesRegistry, pool: RemotePool, *, interval_s: float = DEFAULT_INTERVAL_S,
                 on_tools: Callable[[str, list[ToolInfo] | None], Any] | None = None) -> None:
        self.registry = registry
        self.pool = pool
        self.interval_s = interval_s
        self.on_tools = on_tools
        self.fingerprint: LocalFingerprint | None = None     # this stack's model (set by main)
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._unsubscribe = registry.subscribe(self._changed)

    def _changed(self, config: SourcesConfig) -> None:
        self.pool.retain(config.sources)
        self._wake.set()

    async def probe(self, source: Source) -> None:
        """Probe one source and record its status."""
        if not source.enabled:
            self.registry.set_status(source.id, state="locked", last_error="disabled in the sources file",
                                     last_probe=time.time())
            self._tools(source.id, None)
            return
        started = time.perf_counter()
        try:
            tools = await self.pool.get(source).list_tools(deadline_s=max(source.timeout_s, 5.0), refresh=True)
        except RemoteError as err:
            state = _STATE_OF_KIND.get(err.kind, "error")
            self.registry.set_status(source.id, state=state, last_error=f"{err.kind}: {err.message}",
                                     last_probe=time.time(), latency_ms=(time.perf_counter() - started) * 1000)
            self._tools(source.id, None)
            return
        contract = detect_contract(tools)
        problem = ""
        if source.kind == "rag" and not contract.is_rag:
            problem = ("kind 'rag' but the source has neither rag_search nor seed 000's required tools "
                       "(rag_discover_resources, rag_get_raw_results)")
        self.registry.set_status(
            source.id, state="error" if problem else "connected", contract=contract.label,
            tools=tuple(t.name for t in tools), last_error=problem, last_probe=time.time(),
            latency_ms=(time.perf_counter() - started) * 1000)
        if not problem and source.trusted and source.identity == "assertion":
            vectors, digest = await self._fingerprint(source, {t.name for t in tools})
            self.registry.set_status(source.id, vectors=vectors, fingerprint=digest)
        self._tools(source.id, tools)

    async def _fingerprint(self, source: Source, tools: set[str]) -> tuple[str, str]:
        """("matched", the remote's digest) when the remote Nucleus embeds with this stack's
        model, else (why not, "")."""
        if self.fingerprint is None:
            return "not compared: this stack has no model fingerprint", ""
        if FINGERPRINT_TOOL not in tools:
            return f"not offered: the source has no {FINGERPRINT_TOOL} tool", ""
        try:
            mine = await self.fingerprint.get()
            result = await self.pool.get(source).call_tool(FINGERPRINT_TOOL, {},
                                                           deadline_s=max(source.timeout_s, 5.0))
        except Exception as err:          # the model or the remote failing: re-scoring, retried next probe
            return f"unavailable: {getattr(err, 'message', '') or type(err).__name__}", ""
        digest, why = mine.compare(result.data)
        return ("matched", digest) if digest else (f"mismatch: {why}", "")

    def vectors_of(self, source: Source) -> tuple[str, int] | None:
        """(the remote's digest, the dimension) of a source whose fingerprint matched at its
        last probe; None otherwise (its hits are re-embedded)."""
        status = self.registry.status(source.id)
        mine = self.fingerprint.value if self.fingerprint is not None else None
        if status.vectors != "matched" or not status.fingerprint or mine is None:
            return None
        return status.fingerprint, mine.dimension

    def _tools(self, source_id: str, tools: list[ToolInfo] | None) -> None:
        if self.on_tools is not None:
            try:
                result = self.on_tools(source_id, tools)
                if asyncio.iscoroutine(result):
                    asyncio.get_running_loop().create_task(result)
            except Exception:
                log.exception("proxy tools update failed for source %s", source_id)

    async def probe_now(self, only: set[str] | None = None) -> None:
        """Probe every source (or those in `only`) of the current configuration, in parallel."""
        config = self.registry.current()
        targets = [s for s in config.sources if only is None or s.id in only]
        await asyncio.gather(*(self.probe(s) for s in targets), return_exceptions=True)

    async def _run(self) -> None:
        last_full = 0.0
        while True:
            due = time.monotonic() - last_full >= self.interval_s
            if due:
                await self.probe_now()
                last_full = time.monotonic()
            else:                                       # a reload: probe what has no fresh status
                pending = {sid for sid, st in self.registry.statuses().items() if st.last_probe == 0.0}
                if pending:
                    await self.probe_now(pending)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.1, self.interval_s - (time.monotonic() - last_full)))
            except asyncio.TimeoutError:
                pass

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sources-probe")

    async def stop(self) -> None:
        self._unsubscribe()
        task, self._task = self._task, None
        await cancelled(task)
