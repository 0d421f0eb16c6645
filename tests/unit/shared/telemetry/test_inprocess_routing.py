"""One process, three services (`nucleus up --mode single`): each span goes to the provider (resource,
trace file) of the service whose code started it, and an in-process call is an INTERNAL span
of the callee, child of the caller's span, so the trace stays one tree."""
from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from shared.errors import Unavailable
from shared.inprocess import RoutedTracerProvider, in_service, rpc_span


def _providers(*names: str) -> tuple[dict[str, TracerProvider], dict[str, InMemorySpanExporter]]:
    providers, exporters = {}, {}
    for name in names:
        exporters[name] = InMemorySpanExporter()
        providers[name] = TracerProvider(resource=Resource.create({"service.name": f"nucleus-{name}"}))
        providers[name].add_span_processor(SimpleSpanProcessor(exporters[name]))
    return providers, exporters


async def test_spans_go_to_the_service_whose_code_runs_and_form_one_tree():
    providers, exporters = _providers("rag_pipeline", "knowledge_store")
    routed = RoutedTracerProvider(providers, default="rag_pipeline")
    tracer = routed.get_tracer("test")

    async def store_work() -> None:
        with tracer.start_as_current_span("ks.search"):
            await asyncio.sleep(0)

    with in_service("rag_pipeline"):
        with tracer.start_as_current_span("rag.query") as root:
            with rpc_span("nucleus.v1.KnowledgeStore", "GetEntries", callee="knowledge_store",
                          tracer_provider=routed):
                await asyncio.create_task(store_work())       # a task started inside inherits the service
            with tracer.start_as_current_span("rag.rank"):
                pass

    rag = {s.name: s for s in exporters["rag_pipeline"].get_finished_spans()}
    ks = {s.name: s for s in exporters["knowledge_store"].get_finished_spans()}
    assert set(rag) == {"rag.query", "rag.rank"}
    assert set(ks) == {"nucleus.v1.KnowledgeStore/GetEntries", "ks.search"}
    call = ks["nucleus.v1.KnowledgeStore/GetEntries"]
    assert call.kind is SpanKind.INTERNAL and call.parent.span_id == root.get_span_context().span_id
    assert ks["ks.search"].parent.span_id == call.context.span_id
    assert rag["rag.rank"].parent.span_id == root.get_span_context().span_id
    trace_ids = {s.context.trace_id for s in [*rag.values(), *ks.values()]}
    assert trace_ids == {root.get_span_context().trace_id}
    assert call.resource.attributes["service.name"] == "nucleus-knowledge_store"


def test_an_error_is_recorded_as_the_status_code_the_rpc_would_have_had():
    providers, exporters = _providers("llm_orchestration")
    try:
        with rpc_span("nucleus.v1.LlmOrchestration", "Rerank", tracer_provider=providers["llm_orchestration"]):
            raise Unavailable("the reranker is down")
    except Unavailable:
        pass
    (span,) = exporters["llm_orchestration"].get_finished_spans()
    assert span.attributes["rpc.grpc.status_code"] == 14 and span.attributes["error.type"] == "UNAVAILABLE"
    assert span.status.status_code is trace.StatusCode.ERROR
