"""One connected trace per query across the three services, exported over real OTLP/HTTP.

A small OTLP/HTTP receiver runs in the test on 127.0.0.1 (POST /v1/traces and /v1/metrics,
protobuf, decoded with opentelemetry-proto). The three services are real processes started by
the supervisor with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it; MCP over HTTP requires a bearer
API key. Documents are ingested over gRPC, then SearchAndRank runs through MCP with a W3C
traceparent in the tools/call `_meta`, and the spans the receiver got must form one tree.
"""
from __future__ import annotations

import gzip
import json
import secrets
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from cli.supervisor import Supervisor
from shared.auth.service_auth import operator_interceptors
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from shared.auth.api_keys import add_key
from cli.main import main as cli_main
from tests.support.mcp_clients import http_client, structured
from tests.support import background
from tests.support.processes import stop_stack

pytestmark = pytest.mark.integration

TENANT = "trace-tenant"
SERVICES = {"nucleus-rag-pipeline", "nucleus-knowledge-store", "nucleus-llm-orchestration"}
QUERY = "quokkaflux resonator calibration steps"
DOC_MARKER = "xylocarpine"          # a word only the documents contain
WAIT_S = 30.0
_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


# ---------------------------------------------------------------------------- OTLP receiver
def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attrs(kvs) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpReceiver:
    """What a collector would receive: spans (flattened) and metric names, thread-safe."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: list[dict[str, Any]] = []
        self.requests = 0
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(415)
                    return
                if self.path == "/v1/traces":
                    receiver._add_traces(ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    receiver._add_metrics(ExportMetricsServiceRequest.FromString(body))
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _add_traces(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for rs in request.resource_spans:
            resource = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append({
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None, "name": s.name,
                        "kind": _KINDS[s.kind], "service": resource.get("service.name"), "resource": resource,
                        "scope": ss.scope.name, "attributes": _attrs(s.attributes),
                        "events": [{"name": e.name, "attributes": _attrs(e.attributes)} for e in s.events],
                        "status": _STATUS[s.status.code], "status_message": s.status.message,
                        "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                    })
        with self._cond:
            self.spans.extend(found)
            self.requests += 1
            self._cond.notify_all()

    def _add_metrics(self, request: ExportMetricsServiceRequest) -> None:
        found = []
        for rm in request.resource_metrics:
            service = _attrs(rm.resource.attributes).get("service.name")
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    points = getattr(m, kind).data_points
                    found.append({"name": m.name, "service": service,
                                  "points": [_attrs(p.attributes) for p in points]})
        with self._cond:
            self.metrics.extend(found)
            self._cond.notify_all()

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout=timeout):
                raise AssertionError(f"the receiver did not get {what} within {timeout:.0f}s "
                                     f"({len(self.spans)} spans so far)")

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self._cond:
            return [s for s in self.spans if s["trace_id"] == trace_id]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


# ---------------------------------------------------------------------------- fixtures
def _start(data_dir: Path, auth_dir: Path):
    """The receiver, an API key, and the three services exporting to the receiver; content capture
    off (the default)."""
    receiver = OtlpReceiver().__enter__()
    try:
        config = auth_dir / "auth.json"
        key, _ = add_key(config, tenant=TENANT, user="tracer", groups=[], trusted_platform=False)
        supervisor = Supervisor(data_dir, ephemeral_ports=True, extra_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
            "NUCLEUS_OTEL_ENVIRONMENT": "itest",
            "NUCLEUS_OTEL_CAPTURE_CONTENT": "false",
            "NUCLEUS_RAG_REQUIRE_AUTH": "1",
            "NUCLEUS_RAG_AUTH_CONFIG": str(config),
        })
        addresses = supervisor.start(timeout_s=240)
    except BaseException:
        receiver.__exit__(None, None, None)
        raise

    def stop() -> None:
        stop_stack(supervisor)
        receiver.__exit__(None, None, None)
    return (receiver, (key, config), {"addresses": addresses, "data_dir": data_dir}), stop


def begin_in_background(tmp_path_factory) -> None:
    """Begun at the session's first integration test (tests/integration/conftest.py)."""
    data_dir, auth_dir = tmp_path_factory.mktemp("traced-stack"), tmp_path_factory.mktemp("auth")
    background.begin("traced_stack", lambda: _start(data_dir, auth_dir))


@pytest.fixture(scope="module")
def _traced(tmp_path_factory):
    value, stop = background.take("traced_stack", lambda: _start(tmp_path_factory.mktemp("traced-stack"),
                                                                 tmp_path_factory.mktemp("auth")))
    yield value
    stop()


@pytest.fixture(scope="module")
def receiver(_traced) -> OtlpReceiver:
    return _traced[0]


@pytest.fixture(scope="module")
def api_key(_traced) -> tuple[str, Path]:
    return _traced[1]


@pytest.fixture(scope="module")
def traced_stack(_traced) -> dict:
    return _traced[2]


def _documents() -> list[DocumentIn]:
    docs = []
    for i, (title, body) in enumerate([
        ("Quokkaflux resonator calibration", "Calibrate the quokkaflux resonator in three steps: warm it up "
         f"for ten minutes, zero the {DOC_MARKER} gauge, then tune the flux dial until the lamp is green."),
        ("Resonator safety", f"Never open the resonator housing while the {DOC_MARKER} coil is charged. "
         "Discharge it with the grounding rod first and wear insulated gloves."),
    ]):
        docs.append(DocumentIn(
            artifact=ArtifactMeta(artifact_id=f"trace-doc-{i}", title=title, source_type="wiki",
                                  source_id="wiki", modified_unix=1_760_000_000),
            content=f"# {title}\n\n{body}\n", content_type="text/markdown"))
    return docs


@pytest.fixture(scope="module")
async def ingested(traced_stack, receiver):
    """Two documents ingested over gRPC; returns the ingest trace's spans."""
    client = KnowledgeStoreClient(traced_stack["addresses"]["knowledge_store"]["grpc"],
                                  interceptors=operator_interceptors(traced_stack["data_dir"] / "identity",
                                                                     "knowledge_store"))
    try:
        report = await client.ingest(TENANT, "", _documents())
    finally:
        await client.close()
    assert report.total_entries >= 2
    receiver.wait_for("the ingest commit span", lambda: any(
        s["name"] == "knowledge_store.ingest.commit" for s in receiver.spans))
    [commit] = [s for s in receiver.spans if s["name"] == "knowledge_store.ingest.commit"]
    trace_id = commit["trace_id"]
    receiver.wait_for("the whole ingest trace", lambda: _complete(receiver.trace(trace_id), INGEST_SPANS))
    return trace_id


@pytest.fixture(scope="module")
async def query_trace(traced_stack, receiver, ingested, api_key):
    """SearchAndRank through MCP, continuing the agent's trace `trace_id` from span `parent_id`."""
    trace_id, parent_id = secrets.randbits(128), secrets.randbits(64)
    traceparent = f"00-{trace_id:032x}-{parent_id:016x}-01"
    agent_span = NonRecordingSpan(SpanContext(trace_id, parent_id, is_remote=True,
                                              trace_flags=TraceFlags(TraceFlags.SAMPLED)))
    url = traced_stack["addresses"]["rag_pipeline"]["mcp"]
    async with http_client(url, headers={"Authorization": f"Bearer {api_key[0]}"}) as client:
        token = otel_context.attach(trace.set_span_in_context(agent_span))
        try:
            result = await client.call_tool("search_and_rank", {"user_query_text": QUERY, "top_k_final_rank": 2},
                                            meta={"traceparent": traceparent})
        finally:
            otel_context.detach(token)
    body = structured(result)
    assert body["results"], body
    tid = f"{trace_id:032x}"
    receiver.wait_for("the whole query trace", lambda: _complete(receiver.trace(tid), QUERY_SPANS,
                                                                 outside_parent=f"{parent_id:016x}"))
    return {"trace_id": tid, "parent_id": f"{parent_id:016x}", "spans": receiver.trace(tid), "body": body}


# Every service's innermost spans: once these and all their ancestors have arrived, a trace is whole.
QUERY_SPANS = {"tools/call search_and_rank", "rag.merge", "rag.rank", "nucleus.v1.KnowledgeStore/Retrieve",
               "nucleus.v1.LlmOrchestration/GenerateEmbeddings"}
INGEST_SPANS = {"knowledge_store.ingest.chunk", "knowledge_store.ingest.commit",
                "nucleus.v1.LlmOrchestration/GenerateEmbeddings"}


def _complete(spans: list[dict], required: set[str], outside_parent: str | None = None) -> bool:
    """All `required` span names present and every span's parent present (or the caller's span)."""
    ids = {s["span_id"] for s in spans}
    return required <= {s["name"] for s in spans} and all(
        s["parent_span_id"] in ids or s["parent_span_id"] == outside_parent for s in spans)


def _eventually(predicate: Callable[[], bool], timeout: float = WAIT_S) -> bool:
    """Poll `predicate` every 50 ms for at most `timeout` seconds (files have no notifications)."""
    tick = threading.Event()
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        tick.wait(0.05)
    return True


def _named(spans: list[dict], name: str) -> dict:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, f"expected one {name!r} span, got {len(found)}: {sorted(s['name'] for s in spans)}"
    return found[0]


# ---------------------------------------------------------------------------- tests
async def test_query_spans_of_all_three_services_form_one_tree(query_trace):
    spans = query_trace["spans"]
    assert {s["service"] for s in spans} == SERVICES
    ids = {s["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_span_id"] not in ids]
    # Only MCP requests the agent sent under its span (the SDK client may list tools before the
    # call) have a parent outside the set, and that parent is the agent's span: no orphans.
    orphans = [f"{r['service']}:{r['name']}" for r in roots if r["parent_span_id"] != query_trace["parent_id"]]
    assert not orphans, f"spans whose parent was never exported: {orphans}"
    assert all(r["kind"] == "SERVER" and r["service"] == "nucleus-rag-pipeline" and "mcp.method.name" in r["attributes"]
               for r in roots), [r["name"] for r in roots]
    assert "tools/call search_and_rank" in {r["name"] for r in roots}
    assert len(ids) == len(spans), "span ids are unique"


async def test_every_grpc_hop_has_a_client_span_whose_child_is_the_server_span(query_trace):
    spans = query_trace["spans"]
    by_id = {s["span_id"]: s for s in spans}
    servers = [s for s in spans if s["kind"] == "SERVER" and s["attributes"].get("rpc.system") == "grpc"]
    assert {(s["service"], s["attributes"]["rpc.method"]) for s in servers} >= {
        ("nucleus-llm-orchestration", "GenerateEmbeddings"),
        ("nucleus-knowledge-store", "Retrieve"),
    }
    for server in servers:
        client = by_id[server["parent_span_id"]]
        assert client["kind"] == "CLIENT" and client["service"] == "nucleus-rag-pipeline"
        assert client["name"] == server["name"] == f"{server['attributes']['rpc.service']}/" \
                                                   f"{server['attributes']['rpc.method']}"
        for span in (client, server):
            assert span["attributes"]["rpc.system"] == "grpc"
            assert isinstance(span["attributes"]["rpc.grpc.status_code"], int)
        assert client["attributes"]["server.address"] == "127.0.0.1"
        assert client["attributes"]["server.port"] > 0


async def test_search_and_rank_stages_carry_their_attributes(query_trace):
    spans = query_trace["spans"]
    root = _named(spans, "rag.search_and_rank")
    a = root["attributes"]
    assert a["nucleus.tenant_id"] == TENANT
    assert a["nucleus.top_k_final"] == 2 and a["nucleus.top_k_initial"] >= 2
    assert a["nucleus.degraded"] is False
    assert a["nucleus.results"] == len(query_trace["body"]["results"])
    assert a["nucleus.profile"]
    by_id = {s["span_id"]: s for s in spans}
    for stage in ("rag.embed", "rag.retrieve.vector", "rag.retrieve.keyword", "rag.merge", "rag.rank"):
        span = _named(spans, stage)
        assert by_id[span["parent_span_id"]]["name"] == "rag.search_and_rank", stage
    for leg in ("rag.retrieve.vector", "rag.retrieve.keyword"):
        attrs = _named(spans, leg)["attributes"]
        assert attrs["nucleus.candidates"] >= 1
        assert attrs["gen_ai.operation.name"] == "retrieval"
        assert attrs["gen_ai.request.top_k"] == a["nucleus.top_k_initial"]
    assert _named(spans, "rag.merge")["attributes"]["nucleus.candidates"] >= 1


async def test_embeddings_follow_the_genai_conventions_inside_the_query_trace(query_trace):
    spans = query_trace["spans"]
    by_id = {s["span_id"]: s for s in spans}
    [embeddings] = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "embeddings"]
    a = embeddings["attributes"]
    assert embeddings["service"] == "nucleus-llm-orchestration"
    assert embeddings["name"] == f"embeddings {a['gen_ai.request.model']}"
    assert a["gen_ai.request.model"] and a["gen_ai.response.model"]
    assert a["gen_ai.provider.name"] and a["gen_ai.embeddings.dimension.count"] > 0
    assert by_id[embeddings["parent_span_id"]]["name"] == "nucleus.v1.LlmOrchestration/GenerateEmbeddings"
    # one span for the embedding in LlmOrchestration: the core's counts ride on it, no `llm.embed` beside it
    assert a["llm.embed.count"] >= 1 and a["llm.embed.purpose"] == "query"
    assert not [s for s in spans if s["name"] == "llm.embed"]


async def test_the_mcp_sdk_span_is_the_only_per_tool_span(query_trace):
    spans = query_trace["spans"]
    mcp = _named(spans, "tools/call search_and_rank")
    assert mcp["attributes"]["mcp.method.name"] == "tools/call"
    assert mcp["attributes"]["gen_ai.tool.name"] == "search_and_rank"
    assert [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"] == [mcp]
    assert _named(spans, "rag.search_and_rank")["parent_span_id"] == mcp["span_id"]


async def test_resources_name_service_version_and_environment(query_trace):
    for span in query_trace["spans"]:
        r = span["resource"]
        assert r["service.name"] in SERVICES
        assert r["service.version"] and r["service.instance.id"]
        assert r["deployment.environment"] == "itest"


async def test_ingest_is_one_trace_with_chunk_embed_commit_counts(receiver, ingested):
    spans = receiver.trace(ingested)
    assert {s["service"] for s in spans} == {"nucleus-knowledge-store", "nucleus-llm-orchestration"}
    ids = {s["span_id"] for s in spans}
    assert [s["name"] for s in spans if s["parent_span_id"] not in ids] == [
        "nucleus.v1.KnowledgeStore/IngestDocuments"]
    ingest = _named(spans, "knowledge_store.ingest")
    for stage in ("chunk", "embed", "commit"):
        assert _named(spans, f"knowledge_store.ingest.{stage}")["parent_span_id"] == ingest["span_id"]
    assert _named(spans, "knowledge_store.ingest.chunk")["attributes"]["nucleus.chunks"] >= 2
    assert _named(spans, "knowledge_store.ingest.embed")["attributes"]["nucleus.texts"] >= 2
    commit = _named(spans, "knowledge_store.ingest.commit")["attributes"]
    assert commit["nucleus.artifacts"] == 2 and commit["nucleus.entries_written"] >= 2
    embed = _named(spans, "knowledge_store.ingest.embed")
    by_id = {s["span_id"]: s for s in spans}
    llm_servers = [s for s in spans if s["name"] == "nucleus.v1.LlmOrchestration/GenerateEmbeddings"
                   and s["kind"] == "SERVER"]
    # the embed stage's calls, and the tenant's first ingest's fingerprint (its own span: the probe texts)
    stages = {embed["span_id"]} | {s["span_id"] for s in spans if s["name"] == "knowledge_store.fingerprint"}
    assert llm_servers and all(by_id[s["parent_span_id"]]["parent_span_id"] in stages for s in llm_servers)
    assert any(by_id[s["parent_span_id"]]["parent_span_id"] == embed["span_id"] for s in llm_servers)


async def test_no_query_document_text_or_token_reaches_the_collector_or_the_files(
        receiver, query_trace, traced_stack, api_key):
    exported = json.dumps(receiver.spans)
    local = "".join(p.read_text() for p in (traced_stack["data_dir"] / "traces").glob("*.jsonl*"))
    for text, where in ((exported, "OTLP export"), (local, "local trace files")):
        assert QUERY not in text, where
        assert "quokkaflux" not in text.lower(), where
        assert DOC_MARKER not in text, where
        assert api_key[0] not in text, where
        assert api_key[0][len("nrk_"):][:16] not in text, where


async def test_metrics_reach_the_collector_per_stage_and_per_rpc(receiver, query_trace):
    def stage_metric() -> bool:
        return any(m["name"] == "nucleus.stage.duration" and m["service"] == "nucleus-rag-pipeline"
                   and any(p.get("nucleus.stage") == "rag.search_and_rank" for p in m["points"])
                   for m in receiver.metrics)

    expected = {("rpc.server.call.duration", "nucleus-knowledge-store"),
                ("rpc.client.call.duration", "nucleus-rag-pipeline"),
                ("nucleus.stage.calls", "nucleus-llm-orchestration")}

    def every_service_exported() -> bool:   # each process exports on its own schedule
        return expected <= {(m["name"], m["service"]) for m in receiver.metrics}

    receiver.wait_for("the per-stage latency histogram", stage_metric)
    receiver.wait_for("the per-RPC and per-stage metrics of every service", every_service_exported)


async def test_nucleus_traces_draws_the_query_from_the_local_files(query_trace, traced_stack, capsys):
    trace_dir = traced_stack["data_dir"] / "traces"

    def all_files_have_it() -> bool:
        return all(query_trace["trace_id"] in (trace_dir / f"{s}.jsonl").read_text()
                   for s in ("rag_pipeline", "knowledge_store", "llm_orchestration")
                   if (trace_dir / f"{s}.jsonl").exists())

    assert _eventually(all_files_have_it), "local trace files lag behind"
    code = cli_main(["--data-dir", str(traced_stack["data_dir"]), "traces", "--trace-id",
                     query_trace["trace_id"][:12]])
    out = capsys.readouterr().out
    assert code == 0
    for name in ("tools/call search_and_rank", "rag.search_and_rank", "nucleus.v1.KnowledgeStore/Retrieve",
                 "rag.retrieve.vector", "embeddings"):
        assert name in out, name
    for service in ("rag-pipeline", "knowledge-store", "llm-orchestration"):
        assert service in out
