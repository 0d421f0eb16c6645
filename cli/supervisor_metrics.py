"""The supervisor's own `/metrics`: restarts and failed services, which no service can report
about itself (a failed service is not running).

    nucleus_supervisor_restarts_total{service}          counter  starts after the first, since the stack started
    nucleus_supervisor_recent_crashes{service}          gauge    crashes inside the restart window
    nucleus_supervisor_service_state{service, state}    gauge    1 for the current state (running /
                                                                 starting / waiting / failed / stopped)

In single mode the three services share one process: each is reported with that process's state.
Served on NUCLEUS_SUPERVISOR_METRICS_PORT (default 8060; 0 with ephemeral ports; -1: off) on the
stack's host, recorded in stack.json as `supervisor_metrics`; with authentication on, only the
scrape token (shared/auth/scrape.py) is accepted, as on the services' /metrics.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from cli.restarts import FAILED, RUNNING, STARTING, STOPPED, WAITING, Supervision
from shared.auth.scrape import ScrapeAuth

log = logging.getLogger(__name__)

STATES = (RUNNING, STARTING, WAITING, FAILED, STOPPED)
DEFAULT_PORT = 8060


def supervision_series(hosts: Callable[[], dict[str, Supervision]], now: Callable[[], float]
                       ) -> Iterable[Metric]:
    """The series of the module docstring from `hosts()` (service name -> its unit's Supervision)."""
    restarts = CounterMetricFamily("nucleus_supervisor_restarts", "Service starts after the first, since the "
                                   "stack started", labels=["service"])
    crashes = GaugeMetricFamily("nucleus_supervisor_recent_crashes", "Crashes inside the restart window",
                                labels=["service"])
    state = GaugeMetricFamily("nucleus_supervisor_service_state", "1 for the service's current supervision state",
                              labels=["service", "state"])
    at = now()
    for service, sup in sorted(hosts().items()):
        restarts.add_metric([service], float(sup.restarts))
        window = sup.policy.window_s
        crashes.add_metric([service], float(sum(1 for t in list(sup.crashes) if t > at - window)))
        for name in STATES:
            state.add_metric([service, name], 1.0 if sup.state == name else 0.0)
    return [restarts, crashes, state]


class _Collector:
    def __init__(self, fn: Callable[[], Iterable[Metric]]) -> None:
        self._fn = fn

    def collect(self) -> Iterable[Metric]:
        return self._fn()


class SupervisorMetrics:
    """`GET /metrics` of the supervisor on a daemon thread; `url` once started, `close()` to stop."""

    def __init__(self, hosts: Callable[[], dict[str, Supervision]], identity_dir: Path | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(lambda: supervision_series(hosts, clock)))
        self._authorize = None
        if identity_dir is not None:
            self._authorize = ScrapeAuth(identity_dir, "supervisor").allows
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    def start(self, host: str, port: int) -> str:
        registry, authorize = self.registry, self._authorize

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?", 1)[0] != "/metrics":
                    self._send(404, b"not found\n", "text/plain")
                elif authorize is not None and not authorize(self.headers.get("Authorization", "")):
                    self._send(401, b"metrics need the scrape token: Authorization: Bearer <token>\n", "text/plain")
                else:
                    encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                    self._send(200, encoder(registry), content_type)

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="supervisor-metrics", daemon=True).start()
        bound_host, bound_port = self._server.server_address[:2]
        self.url = f"http://{bound_host}:{bound_port}/metrics"
        log.info("supervisor metrics at %s", self.url)
        return self.url

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


__all__ = ["DEFAULT_PORT", "SupervisorMetrics", "supervision_series"]
