"""The KnowledgeStore's scrape-time series (`/metrics`, shared/telemetry/prometheus.py): what no
span carries, read from `StoreBackend.status()` when Prometheus scrapes.

    nucleus_ks_open_tenants                 gauge    tenants open in memory
    nucleus_ks_memory_bytes                 gauge    estimated memory of the open tenants
    nucleus_ks_memory_budget_bytes          gauge    the configured budget (0 = none)
    nucleus_ks_tenant_events_total{event}   counter  opened_loaded / opened_replayed / opened_rebuilt,
                                                     saved (index saves), evicted (embedded backend)
    nucleus_ks_index_vectors{kind}          gauge    live vectors of the open tenants, by index kind
                                                     (flat / hnsw / ivf; embedded backend)
    nucleus_ks_index_tenants{kind}          gauge    open tenants by index kind
    nucleus_ks_storage_degraded             gauge    1 while any tenant has a storage problem
    nucleus_ks_storage_problems{kind}       gauge    open problems by kind (health.KINDS, each at 0 when none)
    nucleus_ks_read_only                    gauge    1 when configured read-only
    nucleus_ks_repaired_rows_total          counter  derived rows repaired since the process started
    nucleus_ks_filesystem_free_bytes        gauge    free bytes of the data directory's file system
    nucleus_ks_filesystem_size_bytes        gauge    its size
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from services.knowledge_store.health import KINDS

SERVICE = "knowledge_store"
INDEX_KINDS = ("flat", "hnsw", "ivf")
#: Always exposed (0 until it happens), so a rate over them is a series from the first scrape.
EVENTS = ("opened_loaded", "opened_replayed", "opened_rebuilt", "saved", "evicted")


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["service"])
    family.add_metric([SERVICE], value)
    return family


def store_series(store: Any) -> Iterable[Metric]:
    """The series of the module docstring from one `status()` of `store` (any StoreBackend)."""
    status = store.status()
    yield _gauge("nucleus_ks_open_tenants", "Tenants open in memory", status.open_tenants)
    yield _gauge("nucleus_ks_memory_bytes", "Estimated memory of the open tenants", status.open_tenant_bytes)
    yield _gauge("nucleus_ks_memory_budget_bytes", "Memory budget for open tenants (0 = none)",
                 status.memory_budget_bytes)
    events = CounterMetricFamily("nucleus_ks_tenant_events", "Tenant opens (loaded, replayed, rebuilt), index "
                                 "saves and evictions since the process started", labels=["service", "event"])
    counted = dict.fromkeys(EVENTS, 0) | dict(getattr(store, "counters", None) or {})
    for event, count in sorted(counted.items()):
        events.add_metric([SERVICE, str(event)[:40]], float(count))
    yield events
    totals = getattr(store, "index_totals", None)
    if totals is not None:
        vectors = GaugeMetricFamily("nucleus_ks_index_vectors", "Live vectors of the open tenants, by index kind",
                                    labels=["service", "kind"])
        tenants = GaugeMetricFamily("nucleus_ks_index_tenants", "Open tenants, by index kind",
                                    labels=["service", "kind"])
        counted = {kind: (0, 0) for kind in INDEX_KINDS} | totals()
        for kind, (n, live) in sorted(counted.items()):
            vectors.add_metric([SERVICE, kind], float(live))
            tenants.add_metric([SERVICE, kind], float(n))
        yield vectors
        yield tenants
    yield _gauge("nucleus_ks_storage_degraded", "1 while any tenant has a storage problem",
                 1.0 if status.state != "ok" else 0.0)
    problems = GaugeMetricFamily("nucleus_ks_storage_problems", "Open storage problems by kind",
                                 labels=["service", "kind"])
    for kind, count in sorted((dict.fromkeys(KINDS, 0) | Counter(p.kind for p in status.problems)).items()):
        problems.add_metric([SERVICE, kind[:40]], count)
    yield problems
    yield _gauge("nucleus_ks_read_only", "1 when the store is configured read-only", 1.0 if status.read_only else 0.0)
    repaired = CounterMetricFamily("nucleus_ks_repaired_rows", "Derived rows repaired since the process started",
                                   labels=["service"])
    repaired.add_metric([SERVICE], status.repaired_rows)
    yield repaired
    if status.free_bytes >= 0:
        yield _gauge("nucleus_ks_filesystem_free_bytes", "Free bytes of the data directory's file system",
                     status.free_bytes)
        yield _gauge("nucleus_ks_filesystem_size_bytes", "Size of the data directory's file system",
                     status.total_bytes)


def register(store: Any) -> Any:
    """`ServiceSpec.metrics` for the KnowledgeStore over `store`."""
    return lambda metrics: metrics.add_collector(lambda: store_series(store))


__all__ = ["register", "store_series"]
