"""LlmOrchestration's scrape-time series (`/metrics`, shared/telemetry/prometheus.py): breaker
state and the micro-batcher's counters, read when Prometheus scrapes. (Batch sizes, tokens,
upstream errors and retries come from spans: shared/telemetry/prometheus.py.)

    nucleus_llm_breaker_state{upstream, state}   gauge    1 for the breaker's current state
                                                          (closed / half_open / open)
    nucleus_llm_batches_total                    counter  embedding model calls of the batcher
    nucleus_llm_batched_texts_total              counter  texts in them
    nucleus_llm_batched_requests_total           counter  request slices in them
    nucleus_llm_queue_waits_total                counter  requests that reached their first batch
    nucleus_llm_queue_wait_seconds_total         counter  their time in the queue until then (mean queue
                                                          wait = rate(..._seconds_total) / rate(..._waits_total))
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from services.llm_orchestration.breaker import BreakerState

SERVICE = "llm_orchestration"
STATES = get_args(BreakerState)          # closed, open, half_open


def core_series(core: Any) -> Iterable[Metric]:
    breaker = GaugeMetricFamily("nucleus_llm_breaker_state", "1 for the upstream circuit breaker's current state",
                                labels=["service", "upstream", "state"])
    current = str(core.info().get("breaker_state", "closed"))
    for state in STATES:
        breaker.add_metric([SERVICE, "openai", state], 1.0 if state == current else 0.0)
    yield breaker
    stats = getattr(getattr(core, "batcher", None), "stats", None)
    if stats is not None:
        for name, doc, value in (("nucleus_llm_batches", "Embedding model calls of the micro-batcher", stats.batches),
                                 ("nucleus_llm_batched_texts", "Texts in those calls", stats.texts),
                                 ("nucleus_llm_batched_requests", "Request slices in those calls", stats.requests),
                                 ("nucleus_llm_queue_waits", "Requests that reached their first batch", stats.waits),
                                 ("nucleus_llm_queue_wait_seconds", "Their time in the queue until then",
                                  stats.wait_s)):
            family = CounterMetricFamily(name, doc, labels=["service"])
            family.add_metric([SERVICE], float(value))
            yield family


def register(core: Any) -> Any:
    """`ServiceSpec.metrics` for LlmOrchestration over `core`."""
    return lambda metrics: metrics.add_collector(lambda: core_series(core))


__all__ = ["core_series", "register"]
