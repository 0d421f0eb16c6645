"""The title-vector backfill, the same for every backend: artifacts stored before ingest embedded
titles (embedded schema < 6; qdrant records without `title_vector`) get one, so GetFieldSignals'
`dense_title` is served for them too (until then it is NaN for their entries).

    per tenant   find up to BATCH titled artifacts lacking a title vector
                 (`StoreBackend.lacking_title_vectors`), embed their titles in one embedder
                 call (preparation.embed_texts: checked, L2-normalised, as ingest's), store
                 them (`StoreBackend.put_title_vectors`: only where the artifact still has that
                 title and no vector: a re-ingest in between wrote its own), repeat; then the
                 next tenant after PAUSE_S

Idempotent and safe to kill at any point: every batch is its own write of rows that are missing,
so a restart simply finds fewer. `run_backfill` is started in the background by the
KnowledgeStore at startup (main.py) for every tenant, at low priority (one batch at a time,
a pause between batches), and logs one line per tenant it changed or could not finish; a pass
that could not finish a tenant (the embedder not up yet) is repeated RETRY_S later.
"""
from __future__ import annotations

import asyncio
import logging

from services.knowledge_store.models import Embedder
from services.knowledge_store.preparation import embed_texts
from shared.settings import KnowledgeStoreSettings

log = logging.getLogger(__name__)

BATCH = 64
PAUSE_S = 0.05
RETRY_S = 60.0                # between passes that left a tenant unfinished …
PASSES = 10                   # … at most this many passes per start


async def backfill_tenant(store, embedder: Embedder, settings: KnowledgeStoreSettings, tenant_id: str, *,
                          batch: int = BATCH, pause_s: float = PAUSE_S) -> int:
    """Title vectors stored for this tenant's artifacts that lacked one (module docstring)."""
    stored = 0
    while True:
        missing = await store.lacking_title_vectors(tenant_id, batch)
        if not missing:
            return stored
        vectors = await embed_texts(embedder, settings, [title for _, title in missing])
        wrote = await store.put_title_vectors(tenant_id, [(a, title, v) for (a, title), v in zip(missing, vectors)])
        stored += wrote
        if wrote == 0:          # every one was re-ingested meanwhile (or refused): nothing more to do now
            return stored
        await asyncio.sleep(pause_s)


async def keep_backfilling(store, embedder: Embedder, settings: KnowledgeStoreSettings, *,
                           retry_s: float = RETRY_S, passes: int = PASSES) -> None:
    """The startup task: `run_backfill` passes until one finishes every tenant (the embedder,
    LlmOrchestration, may come up after the store), at most `passes`, `retry_s` apart; none on
    a store configured read-only."""
    if settings.read_only:
        return
    for _ in range(passes):
        done = await run_backfill(store, embedder, settings)
        if all(n >= 0 for n in done.values()):
            return
        await asyncio.sleep(retry_s)


async def run_backfill(store, embedder: Embedder, settings: KnowledgeStoreSettings, *,
                       batch: int = BATCH, pause_s: float = PAUSE_S) -> dict[str, int]:
    """`backfill_tenant` for every tenant of the store, one after another; a tenant that fails
    is logged and skipped (−1 in the answer: a later pass or start retries). Returns the vectors
    stored per tenant."""
    done: dict[str, int] = {}
    for tenant_id in await asyncio.to_thread(store.list_tenants):
        try:
            done[tenant_id] = n = await backfill_tenant(store, embedder, settings, tenant_id, batch=batch,
                                                        pause_s=pause_s)
        except asyncio.CancelledError:
            raise
        except Exception as err:          # noqa: BLE001 - a tenant's failure must not stop the others
            log.warning("title vectors of tenant %s: backfill stopped (%s: %s); the next start retries",
                        tenant_id, type(err).__name__, err)
            done[tenant_id] = -1
            continue
        if n:
            log.info("title vectors of tenant %s: %d artifacts stored before titles were embedded got one",
                     tenant_id, n)
        await asyncio.sleep(pause_s)
    return done
