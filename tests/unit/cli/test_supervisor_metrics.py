"""The supervisor's /metrics (cli/supervisor_metrics.py) over real Supervision objects and a real
HTTP server: the series, and the scrape token as the only way in when authentication is on."""
from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from cli.restarts import FAILED, RestartPolicy, Supervision
from cli.supervisor_metrics import SupervisorMetrics
from shared.auth.service_identity import ensure_identities, scrape_token_file


def _samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_restarts_recent_crashes_and_state_per_service(tmp_path):
    policy = RestartPolicy(max_restarts=2, window_s=60.0, base_delay_s=0.0)
    ks = Supervision("knowledge_store", policy)
    rag = Supervision("rag_pipeline", policy)
    now = [1000.0]
    for t in (900.0, 990.0, 995.0, 999.0):         # the first is outside the window, the last one fails it
        ks.crashed(t, "killed by SIGKILL")
        if ks.state != FAILED:
            ks.starting(t)
    metrics = SupervisorMetrics(lambda: {"knowledge_store": ks, "rag_pipeline": rag}, None, clock=lambda: now[0])
    url = metrics.start("127.0.0.1", 0)
    try:
        samples = _samples(httpx.get(url, timeout=5).text)
    finally:
        metrics.close()
    assert samples[("nucleus_supervisor_service_state", (("service", "knowledge_store"), ("state", "failed")))] == 1
    assert samples[("nucleus_supervisor_service_state", (("service", "rag_pipeline"), ("state", "running")))] == 1
    assert samples[("nucleus_supervisor_restarts_total", (("service", "knowledge_store"),))] == ks.restarts >= 2
    assert samples[("nucleus_supervisor_recent_crashes", (("service", "knowledge_store"),))] == 2


def test_with_authentication_only_the_scrape_token_reads_it(tmp_path):
    ensure_identities(tmp_path)
    metrics = SupervisorMetrics(lambda: {}, tmp_path)
    url = metrics.start("127.0.0.1", 0)
    try:
        token = scrape_token_file(tmp_path).read_text().strip()
        assert httpx.get(url, timeout=5).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=5).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5).status_code == 200
        assert httpx.get(url.replace("/metrics", "/other"), timeout=5).status_code == 404
    finally:
        metrics.close()
