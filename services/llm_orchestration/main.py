"""LlmOrchestration process: gRPC + MCP over one LlmOrchestrator core (model loaded before serving)."""
from __future__ import annotations

import services._openmp  # noqa: F401  (first: before torch/faiss load OpenMP)

import asyncio
import logging

from nucleus.v1 import llm_orchestration_pb2_grpc as llm_grpc
from services.llm_orchestration import metrics as llm_metrics
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.grpc_api import LlmOrchestrationServicer
from services.llm_orchestration.mcp_api import build_mcp
from shared.auth.mcp_http import service_auth_settings
from shared.auth.service_auth import ServiceAuth
from shared.log import configure_logging, register_secret
from shared.service_main import apply_overrides, parse_args
from shared.service_runner import ServiceSpec, run_service, run_stdio
from shared.settings import LlmOrchestrationSettings, warn_unknown_env


async def serve(settings: LlmOrchestrationSettings, *, stdio: bool, ready_file=None) -> None:
    core = LlmOrchestrator(settings)
    await core.start()
    spec = build(settings, core, stdio=stdio)
    await (run_stdio(spec) if stdio else run_service(spec, settings, ready_file=ready_file))


def build(settings: LlmOrchestrationSettings, core: LlmOrchestrator, *, stdio: bool) -> ServiceSpec:
    """The service over a started core (`nucleus up --mode single` shares the core in process)."""
    auth = ServiceAuth.load("llm_orchestration", settings.identity_dir)   # None: authentication off
    http_auth = auth is not None and not stdio
    return ServiceSpec(
        name="llm_orchestration",
        grpc_service_name="nucleus.v1.LlmOrchestration",
        add_servicers=lambda server: llm_grpc.add_LlmOrchestrationServicer_to_server(
            LlmOrchestrationServicer(core), server),
        mcp_server=build_mcp(core, token_verifier=auth.mcp_token_verifier() if http_auth else None,
                             auth=service_auth_settings() if http_auth else None),
        close=core.close,
        grpc_interceptors=[auth.server_interceptor()] if auth else [],
        metrics=llm_metrics.register(core),             # breaker state, batcher counters on /metrics
    )


def main() -> None:
    args = parse_args("nucleus-llm-orchestration", "Nucleus LlmOrchestration: embeddings, expansion, rerank, synthesis")
    settings = apply_overrides(LlmOrchestrationSettings(), args)
    configure_logging(settings.log_level)
    warn_unknown_env(logging.getLogger(__name__))
    register_secret(settings.openai_api_key.get_secret_value())
    asyncio.run(serve(settings, stdio=args.stdio, ready_file=args.ready_file))


if __name__ == "__main__":
    main()
