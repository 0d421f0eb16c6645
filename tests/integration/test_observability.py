"""Operators can watch it: a real Prometheus (exemplar storage on) scrapes a real authenticated
split stack with the shipped rules; after traffic, every shipped dashboard and recording-rule
expression returns a series, so does every metric a panel, rule or alert reads (storage problems
at 0 for every kind), the RED and stage series move, an exemplar of the SearchAndRank
histogram names a trace that is in the trace files, and a frozen service's `up`-based alert
goes pending. Also: /metrics refuses anything but an operator credential.

One extra stack for this module (started once), Prometheus on an ephemeral loopback port with
its data under the module's temporary directory, every process stopped by pid."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from benchmarks.secure_stack import ingest_corpus, start_secure_stack
from shared.auth.service_identity import ServiceSigner, scrape_token_file
from tests.support.mcp_clients import http_client, structured
from services.knowledge_store.health import KINDS
from tests.support.observability import KIT, alert_rules, dashboard_exprs, rule_exprs
from tests.support import background
from tests.support.processes import ROOT, stop, stop_stack, wait_ready

SERVICES = ("knowledge_store", "llm_orchestration", "rag_pipeline")
QUERY = "incident response for a compromised fleet"
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_address(stack, service: str) -> str:
    return stack.addresses[service]["mcp"].removeprefix("http://").removesuffix("/mcp")


def _prometheus_config(stack, supervisor, token_file: Path, path: Path) -> None:
    """The shipped split scrape config, pointed at this stack's ephemeral ports, every 1 s."""
    config = yaml.safe_load((KIT / "prometheus" / "prometheus-split.yml").read_text())
    config["global"] = {**config.get("global", {}), "scrape_interval": "1s", "scrape_timeout": "900ms",
                        "evaluation_interval": "1s"}
    config.pop("alerting", None)
    rules_dir = KIT / "prometheus" / "rules"
    config["rule_files"] = [str(p) for p in sorted(rules_dir.glob("*.yml"))]
    for job in config["scrape_configs"]:
        if "authorization" in job:
            job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
        for group in job.get("static_configs", []):
            service = group.get("labels", {}).get("service")
            assert service in (*SERVICES, "supervisor"), f"scrape target without a known service label: {group}"
            group["targets"] = [_http_address(stack, service) if service != "supervisor" else
                                supervisor.metrics.url.removeprefix("http://").removesuffix("/metrics")]
    path.write_text(yaml.safe_dump(config))


def _start(data: Path):
    """The foreign RAG server and the secure stack federating to it: ((stack, supervisor, data), stop)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    corpus = data / "foreign.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"f{i}", "title": f"Fleet note {i}",
                                          "text": f"incident response runbook {i} for the fleet"}) + "\n"
                              for i in range(3)))
    foreign = subprocess.Popen([sys.executable, "-m", "tests.support.foreign_rag_server", "--ready-file",
                                str(data / "foreign.json"), "--corpus", str(corpus), "--score", "bm25"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        foreign_url = wait_ready(data / "foreign.json", foreign, "foreign RAG server")["url"]
        sources = data / "sources.json"
        sources.write_text(json.dumps({"sources": [{"id": "foreign", "kind": "rag", "url": foreign_url,
                                                    "tenants": ["acme"], "groups": ["engineering"],
                                                    "timeout_s": 10}]}))
        stack, supervisor = start_secure_stack(data / "stack", extra_env={"NUCLEUS_SOURCES_FILE": str(sources),
                                                                          "NUCLEUS_RAG_RATE_LIMIT_PER_S": "0"})
    except BaseException:
        stop(foreign)
        raise

    def stop_all() -> None:                   # all of it stops at once: the foreign server and the stack
        foreign.terminate()
        stop_stack(supervisor)
        stop(foreign)
    return (stack, supervisor, data), stop_all


def begin_in_background(tmp_path_factory) -> None:
    """Begun at the session's first integration test (tests/integration/conftest.py)."""
    data = tmp_path_factory.mktemp("observed")
    background.begin("observed_stack", lambda: _start(data))


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """(stack, supervisor, prometheus base URL, trace dir); Prometheus starts here, when the module runs."""
    (stack, supervisor, data), stop_all = background.take("observed_stack",
                                                          lambda: _start(tmp_path_factory.mktemp("observed")))
    prometheus = None
    try:
        port = _free_port()
        config = data / "prometheus.yml"
        _prometheus_config(stack, supervisor, scrape_token_file(stack.identity_dir), config)
        log = open(data / "prometheus.log", "wb")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--enable-feature=exemplar-storage",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        yield stack, supervisor, f"http://127.0.0.1:{port}", data / "stack" / "traces"
    finally:
        if prometheus is not None:
            prometheus.terminate()
        stop_all()
        if prometheus is not None:
            stop(prometheus)


def _api(base: str, path: str, **params) -> dict:
    response = httpx.get(f"{base}/api/v1/{path}", params=params, timeout=10)
    body = response.json()
    assert body.get("status") == "success", f"{path} {params}: {body}"
    return body["data"]


def _until(check, what: str, timeout_s: float = 30.0):
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what} (last: {last})")


def _scalar(base: str, query: str) -> float:
    result = _api(base, "query", query=query)["result"]
    return sum(float(r["value"][1]) for r in result)


async def _traffic(stack) -> None:
    """SearchAndRank over gRPC (local and federated) and over MCP, as the user `eng`."""
    metadata = (("authorization", f"Bearer {stack.keys['eng']}"),)
    async with grpc.aio.insecure_channel(stack.addresses["rag_pipeline"]["grpc"]) as channel:
        stub = rag_grpc.RagPipelineStub(channel)
        for sources in ((), ("foreign",), ("local", "foreign")):
            request = rag_pb.SearchAndRankRequest(user_query_text=QUERY, top_k_final_rank=3, sources=list(sources))
            await stub.SearchAndRank(request, metadata=metadata, timeout=60)
    async with http_client(stack.mcp_url, stack.headers("eng")) as client:
        structured(await client.call_tool("search_and_rank", {"user_query_text": QUERY, "top_k_final_rank": 2}))


def test_metrics_need_an_operator_credential(observed):
    stack, supervisor, _, _ = observed
    assert httpx.get(supervisor.metrics.url, timeout=10).status_code == 401
    assert httpx.get(supervisor.metrics.url, headers=stack.headers("eng"), timeout=10).status_code == 401
    url = f"{stack.base_url}/metrics"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers=stack.headers("eng"), timeout=10).status_code == 401      # a user's API key
    service_token = ServiceSigner.load(stack.identity_dir, "knowledge_store").token("rag_pipeline")
    assert httpx.get(url, headers={"Authorization": f"Bearer {service_token}"}, timeout=10).status_code == 401
    operator = ServiceSigner.load(stack.identity_dir, "operator").token("rag_pipeline")
    answer = httpx.get(url, headers={"Authorization": f"Bearer {operator}"}, timeout=10)
    assert answer.status_code == 200 and "nucleus_build_info" in answer.text
    token = scrape_token_file(stack.identity_dir).read_text().strip()
    openmetrics = httpx.get(url, headers={"Authorization": f"Bearer {token}",
                                          "Accept": "application/openmetrics-text; version=1.0.0"}, timeout=10)
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.rstrip().endswith("# EOF")


async def test_prometheus_scrapes_every_service_and_the_shipped_expressions_return_series(observed):
    stack, _, base, traces = observed
    await ingest_corpus(stack)

    def targets_up():
        active = _api(base, "targets")["activeTargets"]
        up = {t["labels"].get("service") for t in active if t["health"] == "up"}
        return up if up >= {*SERVICES, "supervisor"} else None

    _until(targets_up, "every service's target and the supervisor's up", timeout_s=60)
    running = _api(base, "query", query='nucleus_supervisor_service_state{state="running"} == 1')["result"]
    assert {r["metric"]["service"] for r in running} == set(SERVICES)
    problems = _api(base, "query", query="nucleus_ks_storage_problems")["result"]      # healthy: 0, not absent
    assert {r["metric"]["kind"]: float(r["value"][1]) for r in problems} == dict.fromkeys(KINDS, 0.0)
    search = 'sum(nucleus_requests_total{method="nucleus.v1.RagPipeline/SearchAndRank"})'
    stage = 'sum(nucleus_stage_duration_seconds_count{stage="rag.search_and_rank"})'
    before_requests, before_stage = _scalar(base, search), _scalar(base, stage)
    await _traffic(stack)
    _until(lambda: _scalar(base, search) >= before_requests + 3, "the gRPC RED series moved")
    _until(lambda: _scalar(base, stage) >= before_stage + 4, "the SearchAndRank stage series moved")
    _until(lambda: _scalar(base, 'sum(nucleus_requests_total{transport="mcp",method="search_and_rank"})') >= 1,
           "the MCP RED series moved")
    _until(lambda: _scalar(base, 'sum(nucleus_federation_calls_total{source="foreign"})') >= 1,
           "the federation series moved")
    exprs = [(f"rule {name}", expr) for name, expr in rule_exprs()]
    exprs += [(f"dashboard {board}", expr) for board, expr in dashboard_exprs()]
    assert len(exprs) >= 20
    for where, expr in exprs:
        assert not re.search(r"\bvector\s*\(|\babsent\s*\(", expr), f"{where}: constant fallback in {expr}"

    def evaluate() -> tuple[list, list]:
        empty, invalid = [], []
        for where, expr in exprs:
            query = expr
            for variable, value in GRAFANA_VARIABLES.items():
                query = query.replace(variable, value)
            response = httpx.get(f"{base}/api/v1/query", params={"query": query}, timeout=10).json()
            if response.get("status") != "success":
                invalid.append((where, expr, response.get("error")))
            elif not response["data"]["result"]:
                empty.append((where, expr))
        return empty, invalid

    # A few more scrapes and rule evaluations (1 s each) until every expression has a series, or 30 s.
    end = time.monotonic() + 30
    empty, invalid = evaluate()
    while empty and not invalid and time.monotonic() < end:
        time.sleep(0.5)
        empty, invalid = evaluate()
    assert not invalid, f"invalid PromQL: {invalid}"
    assert not empty, f"no series: {empty}"
    # Every metric a panel, a rule or an alert reads has a series on this healthy stack (0 when
    # nothing happened): an alert's filter may be empty, its metric may not.
    read = {name for expr in [e for _, e in exprs] + [rule["expr"] for rule in alert_rules()]
            for name in re.findall(r"(?<![\w:])(?:nucleus_\w+|process_\w+|up)(?![\w:])", expr)}
    assert len(read) >= 40
    names = "|".join(sorted(read))
    result = _api(base, "query", query=f'count by (__name__) ({{__name__=~"{names}"}})')["result"]
    scraped = {r["metric"]["__name__"] for r in result}
    assert read - scraped == set(), f"metrics read by the kit with no series: {sorted(read - scraped)}"


def test_an_exemplar_of_search_latency_names_a_trace_in_the_trace_files(observed):
    stack, _, base, traces = observed
    now = time.time()

    def exemplar_trace_ids():
        data = _api(base, "query_exemplars", query='nucleus_stage_duration_seconds_bucket{stage="rag.search_and_rank"}',
                    start=now - 600, end=now + 60)
        return {e["labels"].get("trace_id") for series in data for e in series["exemplars"]} - {None}

    trace_ids = _until(exemplar_trace_ids, "an exemplar on the SearchAndRank histogram")

    def in_files():
        found = set()
        for path in traces.glob("rag_pipeline*.jsonl"):
            for line in path.read_text().splitlines():
                span = json.loads(line)
                if span.get("name") == "rag.search_and_rank" and span.get("trace_id") in trace_ids:
                    found.add(span["trace_id"])
        return found

    assert _until(in_files, "an exemplar's trace id in rag_pipeline's trace file", timeout_s=15)


def test_a_frozen_service_makes_its_down_alert_pending(observed):
    stack, _, base, _ = observed
    pid = stack.addresses["llm_orchestration"]["pid"]
    address = _http_address(stack, "llm_orchestration")
    os.kill(pid, signal.SIGSTOP)
    try:
        def pending():
            alerts = _api(base, "alerts")["alerts"]
            return [a for a in alerts if a["labels"].get("alertname") == "NucleusServiceDown"
                    and a["labels"].get("instance") == address and a["state"] in ("pending", "firing")]

        assert _until(pending, "NucleusServiceDown pending for the frozen LlmOrchestration", timeout_s=30)
        assert _scalar(base, f'up{{instance="{address}"}}') == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    _until(lambda: _scalar(base, f'up{{instance="{address}"}}') == 1, "the thawed service scraped again")
