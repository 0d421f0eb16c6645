"""The search log's group commit (embedded/feedback_log.py SearchLogWriter): concurrent searches
of one tenant share transactions, every one of them is logged, and a failed batch fails each
of its callers, not the next batch."""
from __future__ import annotations

import asyncio
import hashlib
import time
import uuid

import pytest

from services.knowledge_store.embedded import feedback_log
from shared.errors import NotFound, Unavailable
from shared.records import SearchLogItem, SearchLogRecord
from tests.unit.knowledge_store.helpers import doc


def _record(tenant: str, user: str = "alice") -> SearchLogRecord:
    return SearchLogRecord(tenant, "s" + uuid.uuid4().hex, user, int(time.time()), hashlib.sha256(b"q").hexdigest(),
                           (SearchLogItem("bread#0", "bread", 1),))


def _count_writes(monkeypatch) -> list[int]:
    """How many searches each of the search log's transactions held (its real write, counted)."""
    sizes: list[int] = []
    real = feedback_log.write

    async def counting(tenants, tenant_id, work, **kw):
        def counted(conn):
            before = conn.execute("SELECT count(*) FROM searches").fetchone()[0]
            out = work(conn)
            sizes.append(conn.execute("SELECT count(*) FROM searches").fetchone()[0] - before)
            return out
        return await real(tenants, tenant_id, counted, **kw)

    monkeypatch.setattr(feedback_log, "write", counting)
    return sizes


async def test_concurrent_searches_share_transactions_and_every_one_is_logged(store, monkeypatch):
    await store.ingest("slog", "", [doc("bread", "Sourdough bread needs a starter.", title="Bread")])
    sizes = _count_writes(monkeypatch)
    records = [_record("slog", f"u{i}") for i in range(40)]
    await asyncio.gather(*(store.record_search(r) for r in records))
    assert sum(sizes) == 40
    assert len(sizes) < 40, sizes                     # batched: fewer transactions than searches
    for r in records:                                 # each one can be voted on: it is logged
        ack = await store.record_feedback("slog", "entry", "bread#0", True, r.user_id, search_id=r.search_id)
        assert ack.artifact_id == "bread"


async def test_one_search_alone_is_committed_when_its_call_returns(store, monkeypatch):
    await store.ingest("slog1", "", [doc("bread", "Sourdough bread needs a starter.", title="Bread")])
    sizes = _count_writes(monkeypatch)
    r = _record("slog1")
    await store.record_search(r)
    assert sizes == [1]
    await store.record_feedback("slog1", "entry", "bread#0", False, "alice", search_id=r.search_id)


async def test_a_failed_batch_fails_each_caller_and_the_next_batch_succeeds(store, monkeypatch):
    await store.ingest("slog2", "", [doc("bread", "Sourdough bread needs a starter.", title="Bread")])
    real = feedback_log.write
    failing = True

    async def flaky(tenants, tenant_id, work, **kw):
        if failing:
            raise Unavailable("disk gone")
        return await real(tenants, tenant_id, work, **kw)

    monkeypatch.setattr(feedback_log, "write", flaky)
    results = await asyncio.gather(*(store.record_search(_record("slog2")) for _ in range(5)),
                                   return_exceptions=True)
    assert all(isinstance(e, Unavailable) for e in results), results
    failing = False
    r = _record("slog2")
    await store.record_search(r)
    await store.record_feedback("slog2", "entry", "bread#0", True, "alice", search_id=r.search_id)


async def test_a_tenant_without_a_store_logs_nothing(store):
    with pytest.raises(NotFound):
        await store.record_search(_record("no-store-yet"))


async def test_a_cancelled_caller_does_not_cancel_the_others(store):
    await store.ingest("slog3", "", [doc("bread", "Sourdough bread needs a starter.", title="Bread")])
    records = [_record("slog3", f"u{i}") for i in range(6)]
    tasks = [asyncio.create_task(store.record_search(r)) for r in records]
    await asyncio.sleep(0)
    tasks[0].cancel()                                  # the batch's first caller
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(d is None for d in done[1:]), done
    for r in records[1:]:
        await store.record_feedback("slog3", "entry", "bread#0", True, r.user_id, search_id=r.search_id)
