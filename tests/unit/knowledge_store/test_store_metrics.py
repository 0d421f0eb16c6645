"""The KnowledgeStore's scrape-time series (services/knowledge_store/metrics.py) over a real
embedded store: open tenants, index kinds, tenant events, storage state."""
from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.knowledge_store.embedded.storage import faults
from services.knowledge_store.health import KINDS
from services.knowledge_store.metrics import store_series
from tests.unit.knowledge_store.helpers import doc


class _Collector:
    def __init__(self, store):
        self.store = store

    def collect(self):
        return list(store_series(self.store))


def _samples(store) -> dict:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(store))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "service"))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_the_series_follow_the_store(store):
    before = _samples(store)
    assert before[("nucleus_ks_open_tenants", ())] == 0
    assert before[("nucleus_ks_index_vectors", (("kind", "flat"),))] == 0
    assert before[("nucleus_ks_tenant_events_total", (("event", "evicted"),))] == 0
    assert {faults.CORRUPT, faults.UNAVAILABLE, faults.READ_ONLY, faults.FULL, "inconsistent", faults.CORRUPT_ROWS,
            faults.LOST_COMMITS} <= set(KINDS)                         # every kind the store reports
    assert {kind: before[("nucleus_ks_storage_problems", (("kind", kind),))] for kind in KINDS} == dict.fromkeys(KINDS, 0)
    await store.ingest("t1", "", [doc("a", "alpha beta gamma " * 20), doc("b", "delta epsilon " * 20)])
    after = _samples(store)
    assert after[("nucleus_ks_open_tenants", ())] == 1
    assert after[("nucleus_ks_index_vectors", (("kind", "flat"),))] >= 2
    assert after[("nucleus_ks_index_tenants", (("kind", "flat"),))] == 1
    assert after[("nucleus_ks_memory_bytes", ())] > 0
    assert after[("nucleus_ks_storage_degraded", ())] == 0 and after[("nucleus_ks_read_only", ())] == 0
    assert after[("nucleus_ks_filesystem_free_bytes", ())] > 0
    store.health.report("t1", "corrupt", "a test problem")
    degraded = _samples(store)
    assert degraded[("nucleus_ks_storage_degraded", ())] == 1
    assert degraded[("nucleus_ks_storage_problems", (("kind", "corrupt"),))] == 1
    assert degraded[("nucleus_ks_storage_problems", (("kind", "full"),))] == 0
