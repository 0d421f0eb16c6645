"""Prometheus metrics: one registry per service, fed from the spans (one instrumentation path).

Every request, call and stage is already a span: the gRPC server and client interceptors, the
MCP SDK's server middleware (one SERVER span per message, `tools/call <tool>`), the cores'
stage spans (`rag.embed`, `rag.retrieve.keyword`, `knowledge_store.ingest`, ...) and the
federation client (`tools/call <source>__<tool>`, CLIENT). `ServiceMetrics.record_span` turns an
ended span into the RED and stage series below, with the span's trace id as the exemplar of
the latency histograms; `shared.telemetry.stage_metrics.StageMetricsProcessor` calls it on its
worker thread, so the request path pays only for the span it already makes. State that no span
carries (open tenants, memory, breaker state, disk, federated sources) is read when Prometheus
scrapes, by collectors the service registers (`ServiceMetrics.add_collector`).

    service_metrics(name)      the registry of one service in this process (made on first use)
    ServiceMetrics             .record_span(span), .add_collector(fn), .exposition(accept)
    metrics_app(service, auth) the Starlette endpoint `GET /metrics` (OpenMetrics or text 0.0.4)
    HttpMetricsMiddleware      nucleus_http_requests_total per route and status (ASGI)

In one process (`nucleus up --mode single`) each service keeps its own registry, fed by its own
TracerProvider (`shared.inprocess`), so each port exposes only its own service's
series; the process series (`process_*`, `python_*`) belong to the first registry made in the
process (`shared.inprocess` makes RAGPipeline's first), so sums never double count.

Label sets are bounded: methods and tools are the served ones (an unknown tool is "other"),
stages are span names under a cap, federated sources are the configured ids under a cap; no
user, tenant or query value is ever a label. Label values known in code (stages, reasons, kinds,
fields, upstreams) exist at 0 from the start ("avoid missing metrics": a dashboard reads 0, not
"No data"). The metric reference is docs/OPERATIONS.md.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.gc_collector import GCCollector

from shared.telemetry.rpc import DURATION_BUCKETS_S, status_code

disable_created_metrics()       # no `_created` series: they double the series count for nothing here

#: gRPC service name -> the service the call goes to (the `peer` label of client series).
PEERS = {
    "nucleus.v1.KnowledgeStore": "knowledge_store",
    "nucleus.v1.LlmOrchestration": "llm_orchestration",
    "nucleus.v1.RagPipeline": "rag_pipeline",
    "nucleus.v1.RAGPipeline": "rag_pipeline",
}
#: Stage spans: the cores' own span names start with one of these.
STAGE_PREFIXES = ("rag.", "knowledge_store.", "llm.", "embeddings", "chat ", "openai.", "rerank_api.")
#: Calls to a paid upstream (an OpenAI-compatible API, a rerank API): `llm.attempts` per call.
UPSTREAM_PREFIXES = ("openai.", "rerank_api.")
MAX_STAGES = 64
MAX_SOURCES = 64
MAX_MCP_METHODS = 32
MAX_REJECTION_FIELDS = 32
#: The fields a rejection usually names (services/knowledge_store/preparation.py `rejected_fields`).
KNOWN_REJECTION_FIELDS = ("content", "content_type", "artifact.artifact_id", "document")
OTHER = "other"
#: A call between services of one process (`nucleus up --mode single`): an INTERNAL span named and
#: attributed as the RPC (shared/inprocess.py), counted as the callee's request with
#: transport="in-process", so the callee's RED reads the same in both modes.
IN_PROCESS = "in-process"
#: Why a credential was refused (shared/auth: TokenRejected reasons, and a caller not allowed).
REFUSAL_REASONS = ("malformed", "unknown_key", "disabled", "expired", "algorithm", "bad_signature",
                   "wrong_issuer", "wrong_audience", "claims", "tenant", "caller_not_allowed")
#: Stage spans each service makes (docs/OPERATIONS.md); `embeddings <model>`, `chat <model>` and the
#: upstream calls are named after what is configured, so they come with use.
KNOWN_STAGES = {
    "rag_pipeline": ("rag.search_and_rank", "rag.embed", "rag.expand", "rag.retrieve.keyword", "rag.retrieve.vector",
                     "rag.retrieve.hybrid", "rag.merge", "rag.rank", "rag.rerank", "rag.fetch",
                     "rag.federation.fanout", "rag.federation.rescore", "rag.synthesize"),
    "knowledge_store": ("knowledge_store.ingest", "knowledge_store.ingest.chunk", "knowledge_store.ingest.embed",
                        "knowledge_store.ingest.commit", "knowledge_store.fingerprint"),
    "llm_orchestration": ("llm.embed", "llm.expand", "llm.rerank", "llm.synthesize"),
}
#: The paid upstreams (UPSTREAM_PREFIXES) and the errors their calls end with (services/llm_orchestration:
#: openai_client.py and rerank_api.py `_translate`).
UPSTREAMS = ("openai", "rerank_api")
UPSTREAM_ERROR_KINDS = ("DeadlineExceeded", "Unavailable", "ResourceExhausted", "UpstreamFailed")
#: Label sets whose prometheus_client children are cached (each metric's own label bounds come first).
MAX_CHILDREN = 20_000
#: At most one exemplar per series per second.
EXEMPLAR_INTERVAL_NS = 1_000_000_000
#: Batch sizes of the embedding micro-batcher (texts per model call).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class _Bounded:
    """A label value kept as is while fewer than `limit` distinct values were seen, else OTHER."""

    def __init__(self, limit: int, allowed: Iterable[str] = ()) -> None:
        self._limit = limit
        self._seen: set[str] = set(allowed)
        self._fixed = bool(self._seen)
        self._lock = threading.Lock()

    def allow(self, values: Iterable[str]) -> None:
        with self._lock:
            self._seen.update(values)
            self._fixed = True

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if self._fixed:
            return OTHER
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return OTHER


class _Callback:
    """A collector over a function returning metric families (read at scrape time)."""

    def __init__(self, fn: Callable[[], Iterable[Metric]]) -> None:
        self._fn = fn

    def collect(self) -> Iterable[Metric]:
        try:
            return list(self._fn())
        except Exception:       # noqa: BLE001 - a failing reader must not fail the scrape
            return []

    def describe(self) -> Iterable[Metric]:
        return []


class ServiceMetrics:
    """The Prometheus series of one service (module docstring); thread-safe."""

    def __init__(self, service: str, *, process_series: bool) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        if process_series:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        self.tools = _Bounded(256)
        self.mcp_methods = _Bounded(MAX_MCP_METHODS)
        self.stages = _Bounded(MAX_STAGES)
        self.sources = _Bounded(MAX_SOURCES)
        self.build_info = Gauge("nucleus_build_info", "1 per service process: version and deployment mode",
                                ["service", "version", "mode"], registry=r)
        self.requests = Counter("nucleus_requests", "Requests served, by transport, method and status code",
                                ["service", "transport", "method", "code"], registry=r)
        self.request_duration = Histogram(
            "nucleus_request_duration_seconds", "Duration of served requests (exemplar: trace id)",
            ["service", "transport", "method"], buckets=DURATION_BUCKETS_S, registry=r)
        self.client_requests = Counter(
            "nucleus_client_requests", "Calls this service made to another service, by status code",
            ["service", "peer", "method", "code"], registry=r)
        self.client_duration = Histogram(
            "nucleus_client_request_duration_seconds", "Duration of calls to another service, retries included",
            ["service", "peer", "method"], buckets=DURATION_BUCKETS_S, registry=r)
        self.stage_duration = Histogram(
            "nucleus_stage_duration_seconds", "Duration per stage (span name; exemplar: trace id)",
            ["service", "stage"], buckets=DURATION_BUCKETS_S, registry=r)
        self.stage_errors = Counter("nucleus_stage_errors", "Stages that ended with an error",
                                    ["service", "stage"], registry=r)
        self.degraded = Counter("nucleus_search_degraded", "SearchAndRank answers flagged degraded, by reason",
                                ["service", "reason"], registry=r)
        self.federation_calls = Counter(
            "nucleus_federation_calls", "Calls to federated RAG MCP sources, by source and outcome",
            ["service", "source", "code"], registry=r)
        self.federation_duration = Histogram(
            "nucleus_federation_call_duration_seconds", "Duration of calls to federated sources",
            ["service", "source"], buckets=DURATION_BUCKETS_S, registry=r)
        self.ingest_documents = Counter("nucleus_ingest_documents", "Documents offered to ingest",
                                        ["service"], registry=r)
        self.ingest_rejected = Counter("nucleus_ingest_rejected_documents",
                                       "Documents ingest refused, by the field at fault", ["service", "field"],
                                       registry=r)
        self.rejected_fields = _Bounded(MAX_REJECTION_FIELDS)
        self.ingest_bytes = Counter("nucleus_ingest_bytes", "UTF-8 bytes of the documents offered to ingest",
                                    ["service"], registry=r)
        self.ingest_truncated = Counter("nucleus_ingest_truncated_documents",
                                        "Documents offered to ingest that a conversion limit cut short",
                                        ["service"], registry=r)
        self.rescore_texts = Counter("nucleus_federation_rescore_texts",
                                     "Remote texts re-scoring needed embedded (distinct per query)",
                                     ["service"], registry=r)
        self.rescore_embedded = Counter("nucleus_federation_rescore_embedded",
                                        "Of those, texts the vector cache lacked (sent to the model)",
                                        ["service"], registry=r)
        self.ingest_entries = Counter("nucleus_ingest_entries", "Entries (chunks) written by ingest",
                                      ["service"], registry=r)
        self.embedded_texts = Counter("nucleus_llm_embedded_texts", "Texts embedded (cache hits included)",
                                      ["service", "purpose"], registry=r)
        self.embedding_cache_hits = Counter("nucleus_llm_embedding_cache_hits", "Embeddings served from cache",
                                            ["service"], registry=r)
        self.batch_size = Histogram("nucleus_llm_batch_size", "Texts per embedding model call",
                                    ["service"], buckets=BATCH_BUCKETS, registry=r)
        self.tokens = Counter("nucleus_llm_tokens", "Tokens used on the OpenAI-compatible upstream",
                              ["service", "kind"], registry=r)
        self.upstream_errors = Counter("nucleus_llm_upstream_errors", "Failed calls to a paid upstream, by kind",
                                       ["service", "upstream", "kind"], registry=r)
        self.upstream_retries = Counter("nucleus_llm_upstream_retries", "Retried attempts on a paid upstream",
                                        ["service", "upstream"], registry=r)
        self.auth_refusals = Counter("nucleus_auth_refusals", "Credentials refused, by reason (no secret, no user)",
                                     ["service", "reason"], registry=r)
        self.refusal_reasons = _Bounded(len(REFUSAL_REASONS) + 4, REFUSAL_REASONS)
        self.http_requests = Counter("nucleus_http_requests", "HTTP requests, by route and status code",
                                     ["service", "route", "code"], registry=r)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._exemplar_at: dict[tuple[int, tuple[str, ...]], int] = {}
        for metric, *labels in self._known_series():    # at 0 from the start: a panel reads 0, not "No data"
            self._child(metric, *labels)

    def _known_series(self) -> list[tuple[Any, ...]]:
        """The span-fed counters of this service whose label values are known in code (open-ended
        ones, methods, codes, sources and routes, come with use)."""
        known: list[tuple[Any, ...]] = [*((self.auth_refusals, reason) for reason in REFUSAL_REASONS),
                                        *((self.stage_errors, stage) for stage in KNOWN_STAGES.get(self.service, ()))]
        if self.service == "knowledge_store":
            known += [(self.ingest_documents,), (self.ingest_entries,), (self.ingest_bytes,), (self.ingest_truncated,),
                      *((self.ingest_rejected, field) for field in KNOWN_REJECTION_FIELDS)]
        elif self.service == "llm_orchestration":
            known += [(self.embedding_cache_hits,), *((self.embedded_texts, p) for p in ("query", "document", OTHER)),
                      *((self.tokens, kind) for kind in ("input", "output")),
                      *((self.upstream_retries, upstream) for upstream in UPSTREAMS),
                      *((self.upstream_errors, upstream, kind) for upstream in UPSTREAMS
                        for kind in UPSTREAM_ERROR_KINDS)]
        elif self.service == "rag_pipeline":
            known += [(self.rescore_texts,), (self.rescore_embedded,),
                      *((self.degraded, reason) for reason in dict.fromkeys([*map(_reason, DEGRADED_REASONS), OTHER]))]
        return known

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(service, *labels)`, cached (the label lookup is most of a record's cost)."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = metric.labels(self.service, *labels)
            if len(self._children) < MAX_CHILDREN:
                self._children[key] = child
        return child

    def _exemplar(self, span: Any, metric: Any, *labels: str) -> dict[str, str] | None:
        """The span's trace id as exemplar, at most once per EXEMPLAR_INTERVAL_NS per series
        (Prometheus keeps the latest exemplar of a series per scrape anyway)."""
        key = (id(metric), labels)
        if span.context is None or span.end_time - self._exemplar_at.get(key, 0) < EXEMPLAR_INTERVAL_NS:
            return None
        if len(self._exemplar_at) < MAX_CHILDREN:
            self._exemplar_at[key] = span.end_time
        return {"trace_id": format(span.context.trace_id, "032x")}

    # ------------------------------------------------------------------ fed from spans
    def record_span(self, span: Any) -> None:
        """One ended span (`ReadableSpan`) into the series it belongs to; never raises."""
        if span.end_time is None or span.start_time is None:
            return
        seconds = (span.end_time - span.start_time) / 1e9
        attributes = span.attributes or {}
        error = span.status.status_code is StatusCode.ERROR
        if span.kind is SpanKind.SERVER or attributes.get("nucleus.transport") == IN_PROCESS:
            self._server(span, attributes, seconds, error)
        elif span.kind is SpanKind.CLIENT and ("rpc.system" in attributes or "nucleus.source.id" in attributes):
            self._client(attributes, seconds, error)
        elif span.name.startswith(STAGE_PREFIXES):
            self._stage(span, attributes, seconds, error)

    def _server(self, span: Any, attributes: Any, seconds: float, error: bool) -> None:
        if attributes.get("rpc.system") == "grpc":
            transport = IN_PROCESS if attributes.get("nucleus.transport") == IN_PROCESS else "grpc"
            method = f"{attributes.get('rpc.service', '')}/{attributes.get('rpc.method', '')}"
            code = status_code(attributes.get("rpc.grpc.status_code", 0)).name
        elif "mcp.method.name" in attributes:
            transport = "mcp"
            mcp_method = str(attributes["mcp.method.name"])
            if mcp_method == "tools/call":
                method = self.tools(str(attributes.get("gen_ai.tool.name", "")))
            else:
                method = self.mcp_methods(mcp_method)
            code = str(attributes.get("error.type", "error"))[:32] if error else "ok"
        else:
            return
        self._child(self.requests, transport, method, code).inc()
        self._child(self.request_duration, transport, method).observe(
            seconds, self._exemplar(span, self.request_duration, transport, method))

    def _client(self, attributes: Any, seconds: float, error: bool) -> None:
        if attributes.get("rpc.system") == "grpc":
            service = str(attributes.get("rpc.service", ""))
            peer = PEERS.get(service, OTHER)
            method = str(attributes.get("rpc.method", "")) if peer != OTHER else OTHER
            code = status_code(attributes.get("rpc.grpc.status_code", 0)).name
            self._child(self.client_requests, peer, method, code).inc()
            self._child(self.client_duration, peer, method).observe(seconds)
        elif "nucleus.source.id" in attributes:
            source = self.sources(str(attributes["nucleus.source.id"]))
            code = str(attributes.get("error.type", "error"))[:32] if error else "ok"
            self._child(self.federation_calls, source, code).inc()
            self._child(self.federation_duration, source).observe(seconds)

    def _stage(self, span: Any, attributes: Any, seconds: float, error: bool) -> None:
        name = span.name
        stage = self.stages(name)
        self._child(self.stage_duration, stage).observe(seconds, self._exemplar(span, self.stage_duration, stage))
        if error:
            self._child(self.stage_errors, stage).inc()
        if name == "rag.search_and_rank" and attributes.get("nucleus.degraded") is True:
            reasons = attributes.get("nucleus.degraded_reasons") or (OTHER,)
            for reason in reasons:
                self._child(self.degraded, _reason(str(reason))).inc()
        elif name == "knowledge_store.ingest":
            self._child(self.ingest_documents).inc(int(attributes.get("nucleus.documents", 0)))
            rejected = int(attributes.get("nucleus.rejected", 0))
            fields = list(attributes.get("nucleus.rejected_fields") or ())
            for field in [*fields, *[OTHER] * max(0, rejected - len(fields))]:
                self._child(self.ingest_rejected, self.rejected_fields(str(field)[:48])).inc()
            self._child(self.ingest_entries).inc(int(attributes.get("nucleus.entries", 0)))
            self._child(self.ingest_bytes).inc(int(attributes.get("nucleus.bytes", 0)))
            self._child(self.ingest_truncated).inc(int(attributes.get("nucleus.truncated", 0)))
        elif name == "rag.federation.rescore":
            self._child(self.rescore_texts).inc(int(attributes.get("nucleus.rescore.texts", 0)))
            self._child(self.rescore_embedded).inc(int(attributes.get("nucleus.rescore.embedded", 0)))
        elif name == "llm.embed" or name.startswith("embeddings"):
            if "llm.embed.count" in attributes:     # the core's embedding: its own span, or GenerateEmbeddings'
                count = int(attributes.get("llm.embed.count", 0))
                purpose = str(attributes.get("llm.embed.purpose", OTHER))
                self._child(self.embedded_texts, purpose if purpose in ("query", "document") else OTHER).inc(count)
                self._child(self.embedding_cache_hits).inc(int(attributes.get("llm.embed.cache_hits", 0)))
            if name.startswith("embeddings"):
                count = int(attributes.get("nucleus.embeddings.count", 0)) - int(
                    attributes.get("nucleus.embeddings.cache_hits", 0))
                if count > 0:
                    self._child(self.batch_size).observe(count)
        if name.startswith("chat "):
            for kind in ("input", "output"):
                tokens = attributes.get(f"gen_ai.usage.{kind}_tokens")
                if isinstance(tokens, int) and tokens > 0:
                    self._child(self.tokens, kind).inc(tokens)
        if name.startswith(UPSTREAM_PREFIXES):
            upstream = name.split(".", 1)[0]
            attempts = int(attributes.get("llm.attempts", 1))
            if attempts > 1:
                self._child(self.upstream_retries, upstream).inc(attempts - 1)
            if error:
                kind = str(attributes.get("error.type") or span.status.description or "error")[:32]
                self._child(self.upstream_errors, upstream, kind).inc()

    # ------------------------------------------------------------------ read at scrape time
    def add_collector(self, fn: Callable[[], Iterable[Metric]]) -> None:
        """`fn()` returns metric families (prometheus_client.core.*MetricFamily) at each scrape."""
        self.registry.register(_Callback(fn))

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The registry in the format `accept` asks for: OpenMetrics (with exemplars) or text 0.0.4."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


#: Degraded reasons as bounded labels: the first of these words a reason's text contains.
DEGRADED_REASONS = ("expansion", "embedding", "embed", "keyword", "vector", "rerank", "re-rank", "federat",
                    "deadline")


def _reason(reason: str) -> str:
    """A degraded reason's text as a bounded label (DEGRADED_REASONS, else "other")."""
    text = reason.lower()
    for word in DEGRADED_REASONS:
        if word in text:
            return {"embed": "embedding", "re-rank": "rerank", "federat": "federation"}.get(word, word)
    return OTHER


def count_refusal(service: str, reason: str) -> None:
    """One refused credential of `service` (shared/auth), by its reason (REFUSAL_REASONS; other)."""
    with _registries_lock:
        metrics = _registries.get(service)
    if metrics is not None:                 # no registry: not a service process (a CLI, a test)
        metrics._child(metrics.auth_refusals, metrics.refusal_reasons(reason)).inc()


_registries: dict[str, ServiceMetrics] = {}
_registries_lock = threading.Lock()


def service_metrics(service: str) -> ServiceMetrics:
    """The ServiceMetrics of `service` in this process; the first one made owns the process series."""
    with _registries_lock:
        metrics = _registries.get(service)
        if metrics is None:
            metrics = ServiceMetrics(service, process_series=not _registries)
            _registries[service] = metrics
        return metrics


class HttpMetricsMiddleware:
    """ASGI middleware: nucleus_http_requests_total{route, code} (refusals such as 401 at the HTTP
    layer never reach a tool span). Routes are bounded: the first path segment when it is one
    of `routes`, else "other"."""

    def __init__(self, app: Any, service: str, routes: Iterable[str] = ("/mcp", "/metrics", "/documents",
                                                                          "/.well-known", "/console")) -> None:
        self.app = app
        self._metrics = service_metrics(service)
        self._routes = tuple(routes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = next((r for r in self._routes if path == r or path.startswith(r + "/")), OTHER)
        status = {"code": 500}

        async def send_status(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status["code"] = int(message.get("status", 500))
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self._metrics.http_requests.labels(self._metrics.service, route, str(status["code"])).inc()


def metrics_endpoint(service: str, authorize: Callable[[str], bool] | None) -> Callable[[Any], Any]:
    """The `GET /metrics` handler of `service`: `authorize(authorization_header)` decides when
    authentication is on (None: open, the 127.0.0.1 development stack)."""
    from starlette.responses import Response

    metrics = service_metrics(service)

    async def endpoint(request: Any) -> Any:
        if authorize is not None and not authorize(request.headers.get("authorization", "")):
            return Response("metrics need an operator credential: Authorization: Bearer <token>\n",
                            status_code=401, media_type="text/plain",
                            headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
        body, content_type = metrics.exposition(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    return endpoint


__all__ = ["HttpMetricsMiddleware", "PEERS", "ServiceMetrics", "metrics_endpoint", "service_metrics"]
