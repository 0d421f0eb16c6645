"""The search log and votes on federated sources, in the tenant's SQLite (storage/feedback_log.py).

Quiet writes (writes.py): no index and no cached rows change, so a search's log entry never
holds searches up. The rules are the front's (../search_log.py). A tenant with no store yet
logs no search (NotFound, the pipeline answers without a search id); a source vote creates
the tenant's store, as a ranking profile does.
"""
from __future__ import annotations

import asyncio
import threading
import time

from services.knowledge_store import search_log, validation
from services.knowledge_store.embedded import storage
from services.knowledge_store.embedded.reads import read_stored
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.writes import NO_CHANGE, IndexChange, write
from shared.errors import NotFound
from shared.records import SearchLogRecord, SourceVotes


class SearchLogWriter:
    """Group commit of the search log: the searches of one tenant that arrive while its previous
    log write commits share the next transaction (one fsync for the batch, not one each).

    The first record of a tenant with nothing pending leads: it queues one quiet write whose
    work takes every record pending for the tenant at the moment it runs (under a thread lock:
    the work runs on a worker thread, records are added on the event loop), inserts them in
    arrival order and commits. Every caller's await ends when its record is committed, or raises
    what the batch's write raised; a record added after the work took the batch leads the next
    one. The batch's write runs as its own task, so a caller that is cancelled while waiting
    cancels no one else's record; batches are per event loop (a future is its loop's). Pruning
    runs when a row of the batch is a multiple of PRUNE_EVERY, as it did one write at a time."""

    def __init__(self, tenants: Tenants) -> None:
        self._tenants = tenants
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, asyncio.AbstractEventLoop],
                            list[tuple[SearchLogRecord, asyncio.Future[None]]]] = {}
        self._running: set[asyncio.Task[None]] = set()

    async def record(self, r: SearchLogRecord) -> None:
        search_log.record(r)
        loop = asyncio.get_running_loop()
        key = (r.tenant_id, loop)
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            batch = self._pending.get(key)
            lead = batch is None
            if lead:
                batch = self._pending[key] = []
            batch.append((r, done))
        if lead:                                # its own task: a cancelled caller cancels no batch
            task = asyncio.create_task(self._commit(key))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        await done

    async def _commit(self, key: tuple[str, asyncio.AbstractEventLoop]) -> None:
        tenant_id = key[0]
        taken: list[tuple[SearchLogRecord, asyncio.Future[None]]] = []
        oldest = int(time.time()) - search_log.SEARCH_RETENTION_S
        keep, every = search_log.MAX_SEARCHES_PER_TENANT, search_log.PRUNE_EVERY

        def work(conn) -> tuple[None, IndexChange]:
            with self._lock:
                taken.extend(self._pending.pop(key, ()))
            first = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM searches").fetchone()[0]
            for i, (r, _) in enumerate(taken):
                storage.feedback_log.insert_search(conn, r, keep=keep, oldest_unix=oldest,
                                                   prune=(first + i) % every == 0)
            return None, NO_CHANGE

        try:
            await write(self._tenants, tenant_id, work, create=False, action="search log", quiet=True)
        except Exception as err:
            if not taken:                       # the work never ran: the batch is still pending
                with self._lock:
                    taken.extend(self._pending.pop(key, ()))
            for _, done in taken:               # each caller raises it from its own future
                if not done.done():
                    done.set_exception(err)
            return
        for _, done in taken:
            if not done.done():
                done.set_result(None)


class FeedbackLog:
    """The store's search log and votes on federated sources (a mixin of core.KnowledgeStore:
    `self._tenants` and `self._search_log`, a SearchLogWriter, are the store's)."""

    _tenants: Tenants
    _search_log: SearchLogWriter

    async def record_search(self, record: SearchLogRecord) -> None:
        """Log what a search returned, to whom (bounded; ../search_log.py)."""
        await self._search_log.record(record)

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> SourceVotes:
        """A user's one current vote on a federated source (a second replaces the first)."""
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
            return (storage.feedback_log.record_source_vote(conn, source_id, target_id, user_id, helpful, now),
                    NO_CHANGE)

        try:
            return await write(self._tenants, tenant_id, work, create=not search_id, action="source vote", quiet=True)
        except NotFound:
            raise search_log.unknown(search_id) from None       # no store, so no search was logged

    async def source_votes(self, tenant_id: str) -> list[SourceVotes]:
        """Every federated source's votes in the tenant (none without a store)."""
        validation.tenant_id(tenant_id)
        return await read_stored(self._tenants, tenant_id, storage.feedback_log.all_source_votes, absent=[],
                                 action="source votes")
