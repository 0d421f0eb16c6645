"""RAGPipeline's scrape-time series for federation (`/metrics`, shared/telemetry/prometheus.py):
each configured source's state as the probe last saw it. (Calls, errors and latency per source
come from the federation client's spans.)

    nucleus_federation_source_state{source, state}   gauge  1 for the source's current state
                                                            (connected / action_required / locked /
                                                            error / unknown)
    nucleus_federation_source_up{source}             gauge  1 while the source is connected
    nucleus_federation_sources                       gauge  configured sources
Source ids are the operator's configured ids (bounded by the sources file; at most 64 here).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from services.rag_pipeline.federation.sources import SourceState

SERVICE = "rag_pipeline"
MAX_SOURCES = 64


def registry_series(registry: Any) -> Iterable[Metric]:
    statuses = sorted(registry.statuses().items())[:MAX_SOURCES]
    state = GaugeMetricFamily("nucleus_federation_source_state", "1 for the federated source's current state",
                              labels=["service", "source", "state"])
    up = GaugeMetricFamily("nucleus_federation_source_up", "1 while the federated source is connected",
                           labels=["service", "source"])
    for source_id, status in statuses:
        for name in get_args(SourceState):
            state.add_metric([SERVICE, source_id, name], 1.0 if status.state == name else 0.0)
        up.add_metric([SERVICE, source_id], 1.0 if status.state == "connected" else 0.0)
    count = GaugeMetricFamily("nucleus_federation_sources", "Configured federated sources", labels=["service"])
    count.add_metric([SERVICE], len(statuses))
    return [state, up, count]


def register(registry: Any) -> Any:
    """`ServiceSpec.metrics` for RAGPipeline over the federation source registry."""
    return lambda metrics: metrics.add_collector(lambda: registry_series(registry))


__all__ = ["register", "registry_series"]
