"""shared.telemetry API modules: gRPC aio interceptors on a real server on 127.0.0.1, content
gating, GenAI spans."""
from __future__ import annotations

import asyncio

import time

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.trace import SpanKind, StatusCode

from shared.telemetry.client_interceptor import ClientTracingInterceptor
from shared.telemetry.genai import CONTENT_MAX_CHARS, set_content_attribute
from shared.telemetry.genai import embeddings_span, end_embeddings, retrieval_attributes
from shared.grpc_handlers import split_method
from shared.telemetry.rpc import RPC_METER_NAME, RpcDurations, parse_target
from shared.telemetry.server_interceptor import ServerTracingInterceptor

SERVICE = "test.v1.Echo"
in_server_loop = pytest.mark.asyncio(loop_scope="session")   # the server fixture and the calls share a loop


class Echo:
    """Raw-bytes unary handlers: echo, abort NOT_FOUND, crash, set UNAVAILABLE without abort."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    async def say(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.metadata.append({k: v for k, v in context.invocation_metadata() if isinstance(v, str)})
        if request == b"missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        if request == b"crash":
            raise RuntimeError("handler bug")
        if request == b"unavailable":
            context.set_code(grpc.StatusCode.UNAVAILABLE)
            context.set_details("down")
            return b""
        return request


@pytest_asyncio.fixture(loop_scope="session")
async def served(pipeline):
    """(target, echo) for a real aio server with the tracing server interceptor."""
    echo = Echo()
    server = grpc.aio.server(interceptors=[ServerTracingInterceptor(
        tracer_provider=pipeline.tracer_provider, meter_provider=pipeline.meter_provider)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Say": grpc.unary_unary_rpc_method_handler(echo.say)}),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", echo
    await server.stop(0)


def _channel(target: str, pipeline) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target, interceptors=[ClientTracingInterceptor(
        target, tracer_provider=pipeline.tracer_provider, meter_provider=pipeline.meter_provider)])


def _by_kind(spans, kind):
    return [s for s in spans if s.kind == kind]


@in_server_loop
async def test_server_span_is_the_child_of_the_client_span_across_the_wire(pipeline, served):
    target, echo = served
    tracer = pipeline.tracer_provider.get_tracer("test")
    async with _channel(target, pipeline) as channel:
        with tracer.start_as_current_span("caller") as caller:
            assert await channel.unary_unary(f"/{SERVICE}/Say")(b"hi", timeout=5) == b"hi"
    spans = pipeline.spans()
    [client] = _by_kind(spans, SpanKind.CLIENT)
    [server] = _by_kind(spans, SpanKind.SERVER)
    trace_id = caller.get_span_context().trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}
    assert client.parent.span_id == caller.get_span_context().span_id
    assert server.parent.span_id == client.context.span_id
    assert server.parent.is_remote
    assert echo.metadata[0]["traceparent"].split("-")[1] == format(trace_id, "032x")


@in_server_loop
async def test_spans_follow_rpc_semantic_conventions(pipeline, served):
    target, _ = served
    async with _channel(target, pipeline) as channel:
        await channel.unary_unary(f"/{SERVICE}/Say")(b"hi", timeout=5)
    client = _by_kind(pipeline.spans(), SpanKind.CLIENT)[0]
    server = _by_kind(pipeline.spans(), SpanKind.SERVER)[0]
    for span in (client, server):
        assert span.name == f"{SERVICE}/Say"
        assert span.attributes["rpc.system"] == "grpc"
        assert span.attributes["rpc.service"] == SERVICE
        assert span.attributes["rpc.method"] == "Say"
        assert span.attributes["rpc.grpc.status_code"] == 0
        assert span.status.status_code is StatusCode.UNSET
        assert "error.type" not in span.attributes
    host, port = target.split(":")
    assert client.attributes["server.address"] == host
    assert client.attributes["server.port"] == int(port)
    assert server.attributes["client.address"] == "127.0.0.1"


@in_server_loop
async def test_caller_metadata_is_kept_next_to_traceparent(pipeline, served):
    target, echo = served
    async with _channel(target, pipeline) as channel:
        with pipeline.tracer_provider.get_tracer("t").start_as_current_span("caller"):
            await channel.unary_unary(f"/{SERVICE}/Say")(b"hi", timeout=5, metadata=(("x-request-id", "r-1"),))
    assert echo.metadata[0]["x-request-id"] == "r-1"
    assert "traceparent" in echo.metadata[0]


@in_server_loop
async def test_without_an_active_trace_nothing_is_injected(served):
    """No SDK in this process (the API is a no-op): the call goes out untouched."""
    target, echo = served
    async with grpc.aio.insecure_channel(target, interceptors=[ClientTracingInterceptor(target)]) as channel:
        assert await channel.unary_unary(f"/{SERVICE}/Say")(b"hi", timeout=5) == b"hi"
    assert "traceparent" not in echo.metadata[0]


@in_server_loop
@pytest.mark.parametrize("payload,code,server_error", [
    (b"missing", grpc.StatusCode.NOT_FOUND, False),      # a caller's mistake: not a server error
    (b"crash", grpc.StatusCode.UNKNOWN, True),
    (b"unavailable", grpc.StatusCode.UNAVAILABLE, True),
])
async def test_status_codes_are_recorded_and_errors_marked(pipeline, served, payload, code, server_error):
    target, _ = served
    async with _channel(target, pipeline) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await channel.unary_unary(f"/{SERVICE}/Say")(payload, timeout=5)
    assert err.value.code() == code
    deadline = time.monotonic() + 5      # the server span may end just after the client has its answer
    while not _by_kind(pipeline.spans(), SpanKind.SERVER) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    client = _by_kind(pipeline.spans(), SpanKind.CLIENT)[0]
    server = _by_kind(pipeline.spans(), SpanKind.SERVER)[0]
    for span in (client, server):
        assert span.attributes["rpc.grpc.status_code"] == code.value[0]
        assert span.attributes["error.type"] == code.name
    assert client.status.status_code is StatusCode.ERROR
    assert (server.status.status_code is StatusCode.ERROR) == server_error


@in_server_loop
async def test_health_checks_are_not_traced(pipeline, served):
    target, _ = served
    async with _channel(target, pipeline) as channel:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert pipeline.spans() == []


@in_server_loop
async def test_call_durations_are_recorded_per_method_and_status(pipeline, served):
    target, _ = served
    async with _channel(target, pipeline) as channel:
        say = channel.unary_unary(f"/{SERVICE}/Say")
        await say(b"a", timeout=5)
        await say(b"b", timeout=5)
        with pytest.raises(grpc.aio.AioRpcError):
            await say(b"missing", timeout=5)
    for name in ("rpc.client.call.duration", "rpc.server.call.duration"):
        # The server span of the last call may end just after the client has its answer: wait for it.
        deadline = time.monotonic() + 5
        while True:
            points = {p.attributes["rpc.grpc.status_code"]: p for p in pipeline.metric_points(name)}
            if (5 in points and points[5].count == 1) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert points[0].count == 2 and points[5].count == 1, name
        assert points[0].attributes["rpc.method"] == "Say"
        assert points[0].sum > 0


@in_server_loop
async def test_calls_whose_spans_a_sampler_drops_are_still_counted():
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    from tests.unit.shared.telemetry.conftest import Pipeline

    unsampled = Pipeline(sampler=ALWAYS_OFF)
    server = grpc.aio.server(interceptors=[ServerTracingInterceptor(
        tracer_provider=unsampled.tracer_provider, meter_provider=unsampled.meter_provider)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Say": grpc.unary_unary_rpc_method_handler(Echo().say)}),))
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        async with _channel(target, unsampled) as channel:
            say = channel.unary_unary(f"/{SERVICE}/Say")
            for _ in range(3):
                await say(b"a", timeout=5)
            with pytest.raises(grpc.aio.AioRpcError):
                await say(b"missing", timeout=5)
    finally:
        await server.stop(0)
    assert unsampled.spans() == []
    for name in ("rpc.client.call.duration", "rpc.server.call.duration"):
        points = {p.attributes["rpc.grpc.status_code"]: p for p in unsampled.metric_points(name)}
        assert points[0].count == 3 and points[5].count == 1, name
        assert points[5].attributes["error.type"] == "NOT_FOUND"
    unsampled.tracer_provider.shutdown()
    unsampled.meter_provider.shutdown()


def test_rpc_durations_come_from_grpc_spans_only(pipeline):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    durations = RpcDurations(MeterProvider(metric_readers=[reader]).get_meter(RPC_METER_NAME))
    tracer = pipeline.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("not an rpc", kind=SpanKind.CLIENT):
        pass
    with tracer.start_as_current_span("svc/M", kind=SpanKind.CLIENT, attributes={
            "rpc.system": "grpc", "rpc.service": "svc", "rpc.method": "M", "rpc.grpc.status_code": 0,
            "server.address": "127.0.0.1", "server.port": 5, "client.address": "never a label"}):
        pass
    plain, rpc = pipeline.spans()
    assert durations.record_span(plain) is False
    assert durations.record_span(rpc) is True
    [metric] = [m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics]
    [point] = metric.data.data_points
    assert metric.name == "rpc.client.call.duration" and point.count == 1
    assert dict(point.attributes) == {"rpc.system": "grpc", "rpc.service": "svc", "rpc.method": "M",
                                      "rpc.grpc.status_code": 0, "server.address": "127.0.0.1",
                                      "server.port": 5}


def test_content_attributes_are_left_out_by_default(pipeline):
    with pipeline.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
        set_content_attribute(span, "gen_ai.retrieval.query.text", "what is the travel limit")
        retrieval_attributes(span, data_source="knowledge_store.keyword", top_k=50, query=["q1", "q2"])
    [s] = pipeline.spans()
    assert "gen_ai.retrieval.query.text" not in s.attributes
    assert s.attributes["gen_ai.operation.name"] == "retrieval"
    assert s.attributes["gen_ai.data_source.id"] == "knowledge_store.keyword"
    assert s.attributes["gen_ai.request.top_k"] == 50


def test_content_attributes_are_recorded_truncated_when_capture_is_on(pipeline, content_capture):
    with pipeline.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
        set_content_attribute(span, "gen_ai.retrieval.query.text", "x" * 5000)
        set_content_attribute(span, "nucleus.phrases.text", ["a", "b"])
    [s] = pipeline.spans()
    assert s.attributes["gen_ai.retrieval.query.text"] == "x" * CONTENT_MAX_CHARS
    assert s.attributes["nucleus.phrases.text"] == ("a", "b")


@pytest.mark.parametrize("provider,kind,system", [
    ("local", SpanKind.INTERNAL, "sentence_transformers"),
    ("openai", SpanKind.CLIENT, "openai"),
])
def test_embeddings_span_follows_genai_conventions(pipeline, provider, kind, system):
    with embeddings_span("all-MiniLM-L6-v2", provider, 3,
                         tracer_provider=pipeline.tracer_provider) as span:
        end_embeddings(span, model="all-MiniLM-L6-v2", dimension=384, cache_hits=1)
    [s] = pipeline.spans()
    assert s.name == "embeddings all-MiniLM-L6-v2"
    assert s.kind == kind
    assert s.attributes["gen_ai.operation.name"] == "embeddings"
    assert s.attributes["gen_ai.request.model"] == "all-MiniLM-L6-v2"
    assert s.attributes["gen_ai.response.model"] == "all-MiniLM-L6-v2"
    assert s.attributes["gen_ai.provider.name"] == system
    assert s.attributes["gen_ai.system"] == system
    assert s.attributes["gen_ai.embeddings.dimension.count"] == 384


@pytest.mark.parametrize("target,expected", [
    ("127.0.0.1:50061", ("127.0.0.1", 50061)),
    ("dns:///ks.nucleus.svc:50061", ("ks.nucleus.svc", 50061)),
    ("[::1]:8080", ("::1", 8080)),
    ("localhost", ("localhost", None)),
])
def test_parse_target(target, expected):
    assert parse_target(target) == expected


def test_split_method():
    assert split_method(b"/nucleus.v1.KnowledgeStore/IngestDocuments") == ("nucleus.v1.KnowledgeStore",
                                                                           "IngestDocuments")
