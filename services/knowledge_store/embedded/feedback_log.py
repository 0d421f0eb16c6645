"""The search log and votes on federated sources, in the tenant's SQLite (storage/feedback_log.py).

Quiet writes (writes.py): no index and no cached rows change, so a search's log entry never
holds searches up. The rules are the front's (../search_log.py). A tenant with no store yet
logs no search (NotFound, the pipeline answers without a search id); a source vote creates
the tenant's store, as a ranking profile does.
"""
from __future__ import annotations

import asyncio
import time

from services.knowledge_store import search_log, validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, IndexChange, write
from shared.errors import NotFound
from shared.records import SearchLogRecord, SourceVotes


async def record_search(tenants: Tenants, r: SearchLogRecord) -> None:
    search_log.record(r)
    oldest = int(time.time()) - search_log.SEARCH_RETENTION_S

    def work(conn) -> tuple[None, IndexChange]:
        row = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM searches").fetchone()[0]
        storage.feedback_log.insert_search(conn, r, keep=search_log.MAX_SEARCHES_PER_TENANT, oldest_unix=oldest,
                                           prune=row % search_log.PRUNE_EVERY == 0)
        return None, NO_CHANGE

    await write(tenants, r.tenant_id, work, create=False, action="search log", quiet=True)


async def record_source_feedback(tenants: Tenants, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                 user_id: str, search_id: str = "") -> SourceVotes:
    validation.tenant_id(tenant_id)
    search_log.source_vote(source_id, target_id, user_id)
    if search_id:
        search_log.search_id(search_id)
    now = int(time.time())

    def work(conn) -> tuple[SourceVotes, IndexChange]:
        if search_id:
            found = storage.feedback_log.get_search(conn, tenant_id, search_id)
            search_log.check_vote(found, search_id, user_id, target_id, now)
            storage.feedback_log.note_search_vote(conn, search_id, target_id, user_id, helpful, now)
        return storage.feedback_log.record_source_vote(conn, source_id, target_id, user_id, helpful, now), NO_CHANGE

    try:
        return await write(tenants, tenant_id, work, create=not search_id, action="source vote", quiet=True)
    except NotFound:
        raise search_log.unknown(search_id) from None       # no store, so no search was logged


async def source_votes(tenants: Tenants, tenant_id: str) -> list[SourceVotes]:
    """Every federated source's votes in the tenant (none without a store)."""
    validation.tenant_id(tenant_id)
    try:
        tenant = await tenants.get(tenant_id)
    except NotFound:
        return []

    def read() -> list[SourceVotes]:
        with tenant.db.read("source votes") as conn:
            return storage.feedback_log.all_source_votes(conn)

    return await asyncio.to_thread(read)
