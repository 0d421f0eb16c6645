"""RAGPipeline process: gRPC + MCP (HTTP at /mcp, or stdio) over one RagPipeline core.

Identity on MCP over HTTP: with `NUCLEUS_RAG_REQUIRE_AUTH=1` every /mcp request needs a bearer
token (an API key or JWT from the auth config at `NUCLEUS_RAG_AUTH_CONFIG`), checked by the
MCP SDK's middleware (HTTP 401 otherwise). Without it (local development, the default) and
over stdio, the local principal (`NUCLEUS_LOCAL_TENANT` / `_USER` / `_GROUPS`) is used.

This is the one module that knows the gRPC clients of KnowledgeStore and LlmOrchestration: it
plugs them into the pipeline's ports (ports.py) for the core, the RAG tools and the access policy.
"""
from __future__ import annotations

import services._openmp  # noqa: F401  (first: before torch/faiss load OpenMP)

import asyncio
import logging
from typing import Any, Mapping
from urllib.parse import urlsplit

from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from services.llm_orchestration.client import LlmOrchestrationClient
from services.rag_pipeline import personas
from services.rag_pipeline.access import AccessPolicy
from services.rag_pipeline.chat import ChatGate
from services.rag_pipeline.chat_mcp import register_chat_tool
from services.rag_pipeline.console.app import Console, console_routes
from services.rag_pipeline.console.datasets import ConsoleDatasets
from services.rag_pipeline.console.login import Credentials
from services.rag_pipeline.console.query_sets import EvalRuns
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.federation.fanout import Federation, McpRemoteSearch
from services.rag_pipeline.federation.peer_vectors import fingerprint_of
from services.rag_pipeline.federation.runtime import FederationRuntime, request_headers
from services.rag_pipeline.federation import metrics as federation_metrics
from services.rag_pipeline.federation.sources import default_sources_path
from services.rag_pipeline.grpc_api import RagPipelineServicer
from services.rag_pipeline.ports import KnowledgeSource, LanguageModel
from services.rag_pipeline.topics import TopicTools
from services.rag_pipeline.mcp_api import build_mcp
from services.rag_pipeline.tools import RagTools
from shared.audit import AuditLog
from shared.auth.config import EMPTY_CONFIG, load_auth_config
from shared.auth.mcp_http import auth_settings
from shared.auth.grpc_auth import AuthServerInterceptor
from shared.auth.principals import RequestIdentity, grpc_principal
from shared.auth.service_auth import ServiceAuth
from shared.auth.service_identity import bearer
from shared.auth.verifier import NucleusTokenVerifier
from shared.errors import InvalidArgument
from shared.identity import Principal, local_principal
from shared.log import configure_logging
from shared.service_main import apply_overrides, parse_args
from shared.ratelimit import RateLimiter
from shared.ratelimit_adapters import RateLimitInterceptor
from shared.service_runner import ServiceSpec, serve
from shared.settings import RagPipelineSettings, TelemetrySettings, default_data_dir, warn_unknown_env
from shared.signing import LinkSigner

log = logging.getLogger(__name__)


def _public_hosts(base_url: str) -> list[str]:
    """Host header values to accept besides the bind address: the public URL's host."""
    parts = urlsplit(base_url)
    if not parts.hostname:
        return []
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return sorted({host, f"{host}:*"})


def stack_tenants(config: Any, http_auth: bool) -> set[str]:
    """The tenants this stack serves, as far as it knows: the local principal's with
    authentication off; else the auth config's (its keys and tenant rules). JWTs may name any
    tenant, so with JWTs every source must name its tenants (sources.py `check_tenants`)."""
    if not http_auth or config is None:
        return {local_principal().tenant_id}
    tenants = {k.tenant for k in config.api_keys} | set(config.tenants)
    if config.jwt is not None:
        tenants.add("any tenant a JWT names")
    return tenants


def build(settings: RagPipelineSettings, *, stdio: bool, knowledge: KnowledgeSource | None = None,
          llm: LanguageModel | None = None) -> ServiceSpec:
    """The service. `knowledge` / `llm`: the ports' adapters (the in-process clients of
    `nucleus up --mode single`); None: the gRPC clients of the other two services."""
    try:
        config = load_auth_config(settings.auth_config) if settings.auth_config else None
    except InvalidArgument as err:
        raise SystemExit(f"rag_pipeline: {err}") from None
    http_auth = settings.require_auth and not stdio
    if http_auth and config is None:
        raise SystemExit("rag_pipeline: NUCLEUS_RAG_REQUIRE_AUTH is set but NUCLEUS_RAG_AUTH_CONFIG is not; "
                         "create one with `python -m shared.auth new-key --config auth.json --tenant T --user U`")
    service_auth = ServiceAuth.load("rag_pipeline", settings.identity_dir)   # None: no auth inside the stack
    if service_auth is not None and not settings.require_auth and not stdio:
        raise SystemExit("rag_pipeline: NUCLEUS_RAG_IDENTITY_DIR is set (authentication inside the stack) but "
                         "NUCLEUS_RAG_REQUIRE_AUTH is not; set both, so that no port of the stack is open")
    if settings.require_auth and stdio:
        log.info("stdio MCP: the caller is the local user who started the process (NUCLEUS_LOCAL_* principal)")
    audit = AuditLog(settings.audit_log)
    if knowledge is None:
        knowledge = KnowledgeStoreClient(
            settings.knowledge_store_target, timeout_s=settings.retrieval_timeout_s,
            interceptors=service_auth.client_interceptors("knowledge_store") if service_auth else None,
            tls_ca_file=settings.tls_ca_file)
    if llm is None:
        llm = LlmOrchestrationClient(
            settings.llm_target, timeout_s=settings.embed_timeout_s,
            interceptors=service_auth.client_interceptors("llm_orchestration") if service_auth else None,
            tls_ca_file=settings.tls_ca_file)
    access = AccessPolicy(knowledge, config or EMPTY_CONFIG)
    # Remote sources (docs/FEDERATION.md): the sources file, its watcher, the probes, the MCP clients.
    federation_runtime = FederationRuntime.create(default_sources_path(), audit=audit,
                                                  stack_tenants=stack_tenants(config, http_auth))
    registry = federation_runtime.registry
    federation_runtime.prober.fingerprint = fingerprint_of(llm)      # trusted peers' vectors (peer_vectors.py)
    federation = Federation(registry.current, McpRemoteSearch(
        federation_runtime.pool, stack_id=federation_runtime.stack_id, signer=federation_runtime.signer,
        tenants_of=lambda source: registry.current().tenants_of(source),
        vectors_of=federation_runtime.prober.vectors_of), stack_id=federation_runtime.stack_id)
    pipeline = RagPipeline(settings, knowledge, llm, access=access, federation=federation)
    verifier = NucleusTokenVerifier(config, audit) if config is not None else None
    identity = RequestIdentity(config, allow_local=not http_auth, verifier=verifier,
                               stack_id=federation_runtime.stack_id)
    signer = LinkSigner.from_secret_text(settings.link_secret.get_secret_value(), settings.public_base_url,
                                         settings.link_ttl_s)
    tools = RagTools(pipeline, knowledge, llm, identity, access, signer,
                     audit, synth_timeout_s=max(settings.deadline_s, 30.0), verify_ttl_s=settings.verify_cache_ttl_s)
    base_is_set = "public_base_url" in settings.model_fields_set
    # RFC 9728 metadata (which authorization server issues tokens for us) only makes sense with
    # JWTs from a real issuer and a known public URL; API keys need no discovery.
    advertise = base_is_set and config is not None and config.jwt is not None
    auth = auth_settings(config, settings.public_base_url, advertise_resource=advertise) if http_auth else None
    limiter = RateLimiter(settings.rate_limit_per_s, settings.rate_limit_burst)   # MCP and gRPC share it
    topic_tools = TopicTools(tools)
    mcp = build_mcp(pipeline, tools, token_verifier=verifier if http_auth else None, auth=auth, limiter=limiter,
                    topic_tools=topic_tools)
    federation_runtime.attach(mcp, lambda ctx: identity.principal(request_headers(ctx)))
    chat_gate = ChatGate.from_settings(                                                      # docs/MODELS.md
        llm, settings, require_caller=settings.require_auth,
        persona_model=lambda persona_id, who: personas.persona_model(pipeline, knowledge, persona_id, who))
    register_chat_tool(mcp, chat_gate, lambda ctx: identity.principal(request_headers(ctx)))
    federation_runtime.start()
    telemetry = TelemetrySettings()       # the Traces page reads the services' local trace files
    console = Console(pipeline, _console_credentials(config, verifier, service_auth) if http_auth else None,
                      limiter=limiter, trace_dir=telemetry.resolved_trace_dir() if telemetry.trace_file else None,
                      federation=federation_runtime, topics=topic_tools, data_dir=default_data_dir(),
                      runs=EvalRuns(default_data_dir()),       # background query-set runs outlive a restart
                      datasets=ConsoleDatasets.load(settings.console_datasets) if settings.console_datasets else None)

    async def close() -> None:
        await federation_runtime.close()
        await pipeline.close()

    if not http_auth and not stdio:
        log.warning("MCP over HTTP without authentication (NUCLEUS_RAG_REQUIRE_AUTH is off): every caller "
                    "acts as the local principal")

    # gRPC callers authenticate when auth is required (stdio mode serves no gRPC): end users with
    # the same API keys / JWTs as MCP, operators with a token from the stack's trust bundle.
    grpc_interceptors = []
    if settings.require_auth and config is not None:
        grpc_verifier = verifier or NucleusTokenVerifier(config, audit)

        def authenticate(metadata: Mapping[str, str]) -> Principal:
            if service_auth is not None and service_auth.verifier.knows(bearer(metadata)):
                return service_auth.authenticate(metadata)
            return grpc_principal(grpc_verifier, config, metadata)

        grpc_interceptors.append(AuthServerInterceptor(authenticate))
    grpc_interceptors.append(RateLimitInterceptor(limiter))   # after auth: it reads the verified caller

    def on_bound(mcp_url: str) -> None:
        if not base_is_set:     # links must point at the port actually bound (ephemeral in tests)
            parts = urlsplit(mcp_url)
            host = "127.0.0.1" if parts.hostname in ("0.0.0.0", "::") else parts.netloc.rsplit(":", 1)[0]
            signer.base_url = f"{parts.scheme}://{host}:{parts.port}"
        log.info("signed document links point at %s/documents/", signer.base_url)

    return ServiceSpec(
        name="rag_pipeline",
        grpc_service_name="nucleus.v1.RagPipeline",
        add_servicers=lambda server: rag_grpc.add_RagPipelineServicer_to_server(
            RagPipelineServicer(pipeline, topic_tools, chat=chat_gate, pages=tools.pages), server),
        mcp_server=mcp,
        close=close,
        allowed_hosts=_public_hosts(settings.public_base_url) if base_is_set else [],
        on_mcp_bound=on_bound,
        grpc_interceptors=grpc_interceptors,
        metrics=federation_metrics.register(registry),      # per-source state on /metrics
        http_routes=console_routes(console),
    )


def _console_credentials(config: Any, verifier: NucleusTokenVerifier | None,
                         service_auth: ServiceAuth | None) -> Credentials:
    """The console's logins: the API keys and JWTs of /mcp, and the operator's token of the trust bundle."""
    if service_auth is None:
        return Credentials(config, verifier or NucleusTokenVerifier(config))
    return Credentials(config, verifier or NucleusTokenVerifier(config), knows_operator=service_auth.verifier.knows,
                       operator=lambda secret: service_auth.authenticate({"authorization": f"Bearer {secret}"}))


def main() -> None:
    args = parse_args("nucleus-rag-pipeline", "Nucleus RAGPipeline: SearchAndRank and the RAG MCP tools")
    settings = apply_overrides(RagPipelineSettings(), args)
    configure_logging(settings.log_level)
    warn_unknown_env(log)
    asyncio.run(serve(lambda: build(settings, stdio=args.stdio), settings, stdio=args.stdio,
                      ready_file=args.ready_file))


if __name__ == "__main__":
    main()
