"""RAGPipeline process: gRPC + MCP (HTTP at /mcp, or stdio) over one RagPipeline core."""
from __future__ import annotations

import asyncio

from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from services.llm_orchestration.client import LlmOrchestrationClient
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.grpc_api import RagPipelineServicer
from services.rag_pipeline.mcp_api import build_mcp
from shared.log import configure_logging
from shared.service_main import apply_overrides, parse_args
from shared.service_runner import ServiceSpec, run_service, run_stdio
from shared.settings import RagPipelineSettings


def build(settings: RagPipelineSettings, *, stdio: bool) -> ServiceSpec:
    pipeline = RagPipeline(
        settings,
        KnowledgeStoreClient(settings.knowledge_store_target, timeout_s=settings.retrieval_timeout_s),
        LlmOrchestrationClient(settings.llm_target, timeout_s=settings.embed_timeout_s),
    )
    mcp = build_mcp(pipeline, allow_local_identity=stdio or not settings.require_auth)
    return ServiceSpec(
        name="rag_pipeline",
        grpc_service_name="nucleus.v1.RagPipeline",
        add_servicers=lambda server: rag_grpc.add_RagPipelineServicer_to_server(RagPipelineServicer(pipeline), server),
        mcp_server=mcp,
        close=pipeline.close,
    )


async def serve(settings: RagPipelineSettings, *, stdio: bool, ready_file=None) -> None:
    """Build inside the running loop: gRPC aio channels belong to the loop that creates them."""
    spec = build(settings, stdio=stdio)
    await (run_stdio(spec) if stdio else run_service(spec, settings, ready_file=ready_file))


def main() -> None:
    args = parse_args("nucleus-rag-pipeline", "Nucleus RAGPipeline: SearchAndRank and the RAG MCP tools")
    settings = apply_overrides(RagPipelineSettings(), args)
    configure_logging(settings.log_level)
    asyncio.run(serve(settings, stdio=args.stdio, ready_file=args.ready_file))


if __name__ == "__main__":
    main()
