"""Each tenant's embedding model fingerprint: which model made its stored vectors.

    serving      the fingerprint of the model the store embeds with now: the digest of its
                 vectors of the probe texts (shared/model_fingerprint.py, as federation computes
                 it), one embed call per process
    at ingest    a tenant without a recorded fingerprint is given one before its first write of
                 this process (`before_ingest`, recorded by `after_ingest` once the write is in):
                 an empty tenant the serving one; a tenant holding entries the serving one only
                 when re-embedding a sample of its stored texts (SAMPLE entries, the text each
                 was embedded from: preparation.derived_rows) reproduces the stored vectors
                 within TOLERANCE, else UNKNOWN (vectors of a model no one can name any more)
    at export    the tenant's, decided as above when none is recorded, goes into the archive's
                 manifest (model.fingerprint); an import refuses an UNKNOWN or another model's
                 fingerprint unless `reembed` (archive.py) and records the archive's (re-embedded:
                 the serving one)

Where it is kept is the backend's: the tenant's `meta` table (embedded), a point of its own in
the term statistics collection (qdrant).
"""
from __future__ import annotations

import asyncio
import logging

import numpy as np
from opentelemetry import trace

from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.preparation import derived_rows
from shared.model_fingerprint import PROBE_TEXTS, probe_digest

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

UNKNOWN = "unknown"
SAMPLE = 8                 # stored entries re-embedded to recognise an existing tenant's model
TOLERANCE = 1e-5           # the largest difference of a re-embedded vector's component


class Fingerprints:
    """The serving fingerprint, and each tenant's, decided and recorded once (module docstring)."""

    def __init__(self, store: StoreBackend) -> None:
        self._store = store
        self._serving: str = ""
        self._lock = asyncio.Lock()
        self._recorded: dict[str, str] = {}       # tenant -> its recorded fingerprint (this process)

    async def serving(self) -> str:
        if not self._serving:
            async with self._lock:
                if not self._serving:
                    self._serving = probe_digest(await self._store.embedder.embed(list(PROBE_TEXTS)))[1]
        return self._serving

    def forget(self, tenant_id: str) -> None:
        """The tenant was replaced (an import): read its fingerprint again."""
        self._recorded.pop(tenant_id, None)

    async def of_tenant(self, tenant_id: str, *, record: bool = True) -> str:
        """The tenant's fingerprint: recorded, or decided now (and recorded when `record`)."""
        if tenant_id in self._recorded:
            return self._recorded[tenant_id]
        found = await self._store.tenant_fingerprint(tenant_id)
        if found:
            self._recorded[tenant_id] = found
            return found
        decided = await self.decide(tenant_id)
        if record:
            await self._record(tenant_id, decided)
        return decided

    async def decide(self, tenant_id: str) -> str:
        """The serving fingerprint if the tenant is empty or a sample of its stored entries
        re-embeds to its stored vectors within TOLERANCE; UNKNOWN otherwise."""
        listing = await self._store.archive_listing(tenant_id, "", SAMPLE)
        ids = [entries[0] for _, entries in listing if entries]
        if not ids:
            return await self.serving()
        hits = await self._store.get_entries(tenant_id, ids)
        stored = await self._store.entry_vectors(tenant_id, ids)
        hits = [h for h in hits if h.entry.id in stored]
        if not hits:
            return await self.serving()
        texts = [derived_rows(h.artifact.title, h.entry.headline, h.entry.text)[2] for h in hits]
        again = np.asarray(await self._store.embedder.embed(texts), np.float32)
        again = again / np.maximum(np.linalg.norm(again, axis=1, keepdims=True), 1e-12)
        was = np.stack([stored[h.entry.id] for h in hits]).astype(np.float32)
        if again.shape == was.shape and float(np.max(np.abs(again - was))) <= TOLERANCE:
            return await self.serving()
        log.warning("tenant %s: its stored vectors are not the serving model's (re-embedding %d sampled entries "
                    "differs): its model fingerprint is recorded as unknown", tenant_id, len(hits))
        return UNKNOWN

    async def _record(self, tenant_id: str, fingerprint: str) -> None:
        await self._store.set_tenant_fingerprint(tenant_id, fingerprint)
        self._recorded[tenant_id] = fingerprint

    async def before_ingest(self, tenant_id: str) -> str:
        """"" when the tenant's fingerprint is recorded; else the one to record after the write
        (decided before it, from the entries stored before it). A failure to decide is logged and
        the ingest goes on without recording (the next ingest decides again)."""
        if tenant_id in self._recorded:
            return ""
        try:
            found = await self._store.tenant_fingerprint(tenant_id)
            if found:
                self._recorded[tenant_id] = found
                return ""
            with tracer.start_as_current_span("knowledge_store.fingerprint"):   # its embed calls in the trace
                return await self.decide(tenant_id)
        except Exception as err:     # noqa: BLE001 - never fails an ingest; decided again next time
            log.warning("tenant %s: model fingerprint not decided (%s); decided again at its next ingest",
                        tenant_id, type(err).__name__)
            return ""

    async def after_ingest(self, tenant_id: str, decided: str) -> None:
        if not decided:
            return
        try:
            await self._record(tenant_id, decided)
        except Exception as err:     # noqa: BLE001 - the ingest is in; recorded at the next one
            log.warning("tenant %s: model fingerprint not recorded (%s)", tenant_id, type(err).__name__)
