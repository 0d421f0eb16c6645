"""An LlmOrchestrator served over real gRPC on a loopback port, and a client of it."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc

from nucleus.v1 import llm_orchestration_pb2_grpc as llm_grpc
from services.llm_orchestration.client import LlmOrchestrationClient
from services.llm_orchestration.grpc_api import LlmOrchestrationServicer


@contextlib.asynccontextmanager
async def served_over_grpc(orch) -> AsyncIterator[LlmOrchestrationClient]:
    """A gRPC server (127.0.0.1, an ephemeral port) for `orch` and a client of it; both closed after."""
    server = grpc.aio.server()
    llm_grpc.add_LlmOrchestrationServicer_to_server(LlmOrchestrationServicer(orch), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = LlmOrchestrationClient(f"127.0.0.1:{port}", timeout_s=10)
    try:
        yield client
    finally:
        await client.close()
        await server.stop(None)
