"""The span-derived Prometheus series (shared/telemetry/prometheus.py) and the /metrics guard
(shared/auth/scrape.py): real spans from a real SDK TracerProvider, the real exposition."""
from __future__ import annotations

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from shared.auth.scrape import ScrapeAuth
from shared.auth.service_identity import ServiceSigner, ensure_identities, scrape_token_file
from shared.telemetry.prometheus import OTHER, ServiceMetrics


class _Feed(SpanExporter):
    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def export(self, spans):
        for span in spans:
            self.metrics.record_span(span)
        return SpanExportResult.SUCCESS


@pytest.fixture
def fed():
    metrics = ServiceMetrics("rag_pipeline", process_series=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_Feed(metrics)))
    return metrics, provider.get_tracer("test")


def samples(metrics: ServiceMetrics, accept: str = "text/plain") -> dict[tuple[str, tuple], float]:
    body, _ = metrics.exposition(accept)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def value(metrics: ServiceMetrics, name: str, **labels: str) -> float:
    want = tuple(sorted({"service": metrics.service, **labels}.items()))
    return samples(metrics).get((name, want), 0.0)


def test_a_grpc_server_span_counts_by_method_and_code_and_times_the_request(fed):
    metrics, tracer = fed
    for code in (grpc.StatusCode.OK, grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT):
        with tracer.start_as_current_span("nucleus.v1.RagPipeline/SearchAndRank", kind=SpanKind.SERVER, attributes={
                "rpc.system": "grpc", "rpc.service": "nucleus.v1.RagPipeline", "rpc.method": "SearchAndRank",
                "rpc.grpc.status_code": code.value[0]}):
            pass
    method = "nucleus.v1.RagPipeline/SearchAndRank"
    assert value(metrics, "nucleus_requests_total", transport="grpc", method=method, code="OK") == 2
    assert value(metrics, "nucleus_requests_total", transport="grpc", method=method, code="INVALID_ARGUMENT") == 1
    assert value(metrics, "nucleus_request_duration_seconds_count", transport="grpc", method=method) == 3


def test_mcp_tool_names_are_the_served_ones_and_an_unknown_tool_is_other(fed):
    metrics, tracer = fed
    metrics.tools.allow(["search_and_rank"])
    for tool in ("search_and_rank", "no_such_tool_1", "no_such_tool_2"):
        with tracer.start_as_current_span(f"tools/call {tool}", kind=SpanKind.SERVER, attributes={
                "mcp.method.name": "tools/call", "gen_ai.tool.name": tool}):
            pass
    assert value(metrics, "nucleus_requests_total", transport="mcp", method="search_and_rank", code="ok") == 1
    assert value(metrics, "nucleus_requests_total", transport="mcp", method=OTHER, code="ok") == 2


def test_stage_latency_carries_the_trace_id_as_exemplar_in_openmetrics_only(fed):
    metrics, tracer = fed
    with tracer.start_as_current_span("rag.search_and_rank") as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
    openmetrics, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    lines = [line for line in openmetrics.decode().splitlines()
             if line.startswith("nucleus_stage_duration_seconds_bucket") and "rag.search_and_rank" in line]
    assert any(f'trace_id="{trace_id}"' in line for line in lines)
    text, content_type = metrics.exposition("text/plain")
    assert content_type.startswith("text/plain") and b"trace_id" not in text


def test_degraded_answers_count_by_a_bounded_reason(fed):
    metrics, tracer = fed
    with tracer.start_as_current_span("rag.search_and_rank", attributes={
            "nucleus.degraded": True,
            "nucleus.degraded_reasons": ["query expansion unavailable: timeout after 2s", "weird thing"]}):
        pass
    assert value(metrics, "nucleus_search_degraded_total", reason="expansion") == 1
    assert value(metrics, "nucleus_search_degraded_total", reason=OTHER) == 1


def test_stages_fold_into_other_past_the_cap(fed):
    metrics, tracer = fed
    for i in range(80):
        with tracer.start_as_current_span(f"rag.made_up_{i}"):
            pass
    stages = {dict(labels)["stage"] for (name, labels) in samples(metrics)
              if name == "nucleus_stage_duration_seconds_count"}
    assert OTHER in stages and len(stages) <= 65


def test_federation_client_spans_count_per_source_and_outcome(fed):
    metrics, tracer = fed
    with tracer.start_as_current_span("tools/call foreign__search", kind=SpanKind.CLIENT,
                                      attributes={"nucleus.source.id": "foreign"}):
        pass
    with tracer.start_as_current_span("tools/call foreign__search", kind=SpanKind.CLIENT,
                                      attributes={"nucleus.source.id": "foreign", "error.type": "timeout"}) as span:
        span.set_status(StatusCode.ERROR)
    assert value(metrics, "nucleus_federation_calls_total", source="foreign", code="ok") == 1
    assert value(metrics, "nucleus_federation_calls_total", source="foreign", code="timeout") == 1


def test_upstream_retries_and_errors(fed):
    metrics, tracer = fed
    with tracer.start_as_current_span("openai.chat", attributes={"llm.attempts": 3}) as span:
        span.set_status(StatusCode.ERROR, "UpstreamFailed")
    assert value(metrics, "nucleus_llm_upstream_retries_total", upstream="openai") == 2
    assert value(metrics, "nucleus_llm_upstream_errors_total", upstream="openai", kind="UpstreamFailed") == 1


def test_the_scrape_token_and_operator_tokens_pass_and_nothing_else(tmp_path):
    ensure_identities(tmp_path)
    token = scrape_token_file(tmp_path).read_text().strip()
    assert scrape_token_file(tmp_path).stat().st_mode & 0o777 == 0o600
    guard = ScrapeAuth(tmp_path, "rag_pipeline")
    assert guard.allows(f"Bearer {token}")
    assert not guard.allows(f"Bearer {token}x") and not guard.allows("") and not guard.allows(f"Basic {token}")
    operator = ServiceSigner.load(tmp_path, "operator").token("rag_pipeline")
    service = ServiceSigner.load(tmp_path, "knowledge_store").token("rag_pipeline")
    assert guard.allows(f"Bearer {operator}")
    assert not guard.allows(f"Bearer {service}")          # a service's own token is not an operator's
    assert not ScrapeAuth(tmp_path, "knowledge_store").allows(f"Bearer {operator}")   # audience is checked


def test_ingest_rejections_count_by_the_field_at_fault(fed):
    metrics, tracer = fed
    with tracer.start_as_current_span("knowledge_store.ingest", attributes={
            "nucleus.documents": 5, "nucleus.rejected": 3, "nucleus.rejected_fields": ["content", "content"]}):
        pass
    assert value(metrics, "nucleus_ingest_documents_total") == 5
    assert value(metrics, "nucleus_ingest_rejected_documents_total", field="content") == 2
    assert value(metrics, "nucleus_ingest_rejected_documents_total", field=OTHER) == 1      # beyond the list


@pytest.mark.parametrize("service, known", [
    ("knowledge_store", [("nucleus_ingest_documents_total", {}), ("nucleus_ingest_bytes_total", {}),
                         ("nucleus_ingest_rejected_documents_total", {"field": "content_type"}),
                         ("nucleus_stage_errors_total", {"stage": "knowledge_store.ingest"})]),
    ("llm_orchestration", [("nucleus_llm_tokens_total", {"kind": "output"}),
                           ("nucleus_llm_embedded_texts_total", {"purpose": "query"}),
                           ("nucleus_llm_upstream_retries_total", {"upstream": "rerank_api"}),
                           ("nucleus_llm_upstream_errors_total", {"upstream": "openai", "kind": "Unavailable"}),
                           ("nucleus_stage_errors_total", {"stage": "llm.embed"})]),
    ("rag_pipeline", [("nucleus_search_degraded_total", {"reason": "federation"}),
                      ("nucleus_search_degraded_total", {"reason": OTHER}),
                      ("nucleus_federation_rescore_texts_total", {}),
                      ("nucleus_stage_errors_total", {"stage": "rag.search_and_rank"})]),
])
def test_a_fresh_registry_has_its_known_label_values_at_zero(service, known):
    """"Avoid missing metrics": before any span, each known label value is a series at 0."""
    exposed = samples(ServiceMetrics(service, process_series=False))
    for name, labels in known:
        assert exposed.get((name, tuple(sorted({"service": service, **labels}.items())))) == 0, (name, labels)
    assert ("nucleus_auth_refusals_total", (("reason", "expired"), ("service", service))) in exposed
    stages = {dict(labels)["stage"] for name, labels in exposed if name == "nucleus_stage_errors_total"}
    assert all(stage.startswith(service.split("_")[0]) for stage in stages)     # only the service's own stages


def test_ingest_bytes_and_rescoring_cache_counters(fed):
    metrics, tracer = fed
    with tracer.start_as_current_span("knowledge_store.ingest", attributes={"nucleus.documents": 1,
                                                                             "nucleus.bytes": 1234}):
        pass
    with tracer.start_as_current_span("rag.federation.rescore", attributes={"nucleus.rescore.texts": 10,
                                                                             "nucleus.rescore.embedded": 4}):
        pass
    assert value(metrics, "nucleus_ingest_bytes_total") == 1234
    assert value(metrics, "nucleus_federation_rescore_texts_total") == 10
    assert value(metrics, "nucleus_federation_rescore_embedded_total") == 4


def test_refused_credentials_count_by_reason_on_the_service_that_refused(tmp_path):
    from shared.auth.service_identity import ServiceVerifier
    from shared.errors import Unauthenticated
    from shared.telemetry.prometheus import service_metrics

    ensure_identities(tmp_path)
    metrics = service_metrics("knowledge_store")
    before = value(metrics, "nucleus_auth_refusals_total", reason="malformed")
    before_audience = value(metrics, "nucleus_auth_refusals_total", reason="wrong_audience")
    verifier = ServiceVerifier(tmp_path, "knowledge_store")
    with pytest.raises(Unauthenticated):
        verifier.verify("not-a-jwt")
    wrong = ServiceSigner.load(tmp_path, "operator").token("rag_pipeline")
    with pytest.raises(Unauthenticated):
        verifier.verify(wrong)
    assert value(metrics, "nucleus_auth_refusals_total", reason="malformed") == before + 1
    assert value(metrics, "nucleus_auth_refusals_total", reason="wrong_audience") == before_audience + 1
    assert ("nucleus_auth_refusals_total", (("reason", "expired"), ("service", "knowledge_store"))) in samples(metrics)


def test_documents_a_conversion_limit_cut_short_are_counted(fed):
    from services.knowledge_store.preparation import offered_attributes
    from shared.records import ArtifactMeta, DocumentIn

    def doc(truncated: str) -> DocumentIn:
        return DocumentIn(ArtifactMeta(artifact_id="a"), "text", truncated=truncated)

    metrics, tracer = fed
    with tracer.start_as_current_span("knowledge_store.ingest", attributes=offered_attributes(
            [doc(""), doc("1000 rows of sheet 'Data' left out"), doc("")])):
        pass
    assert value(metrics, "nucleus_ingest_documents_total") == 3
    assert value(metrics, "nucleus_ingest_truncated_documents_total") == 1


def test_embedded_texts_count_from_the_genai_span_or_the_cores_own_and_batches_from_the_genai_span(fed):
    metrics, tracer = fed
    embedding = {"llm.embed.count": 3, "llm.embed.purpose": "query", "llm.embed.cache_hits": 1}
    with tracer.start_as_current_span("embeddings all-MiniLM-L6-v2", attributes={       # GenerateEmbeddings
            **embedding, "nucleus.embeddings.count": 3, "nucleus.embeddings.cache_hits": 1}):
        pass
    with tracer.start_as_current_span("llm.embed", attributes={**embedding, "llm.embed.purpose": "document"}):
        pass                                                                            # re-ranking's own
    with tracer.start_as_current_span("embeddings text-embedding-3-small", attributes={"nucleus.embeddings.count": 5}):
        pass                                                                            # no core attributes
    assert value(metrics, "nucleus_llm_embedded_texts_total", purpose="query") == 3
    assert value(metrics, "nucleus_llm_embedded_texts_total", purpose="document") == 3
    assert value(metrics, "nucleus_llm_embedding_cache_hits_total") == 2
    assert value(metrics, "nucleus_llm_batch_size_count") == 2                          # the two GenAI spans
