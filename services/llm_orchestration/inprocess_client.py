"""LlmOrchestration's in-process client (`nucleus up --mode single`): each call of the front
(front.py `CALLS`) made in this process, with what the gRPC path would give it.

The same methods, results (`results.py`) and errors as `LlmOrchestrationClient` (client.py),
through the generic in-process adapter (`shared.inprocess.InProcessClient`) over the front's call
table: the verified caller the gRPC servicer would have seen (with authentication on, a call
without a caller is refused; an embedding request takes its turn in the micro-batcher's fair queue
as that caller), one INTERNAL span named as the RPC (`nucleus.v1.LlmOrchestration/<Method>`), and
the call's deadline (`timeout_s=`, else the client's). A chat completion streams: its deadline
bounds the wait for each chunk, `timeout_s=` or at least 60 s.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry.trace import TracerProvider

from services.llm_orchestration.front import CALLS, RPC_SERVICE, LlmFront
from shared.inprocess import InProcessCaller, InProcessClient

if TYPE_CHECKING:
    from services.llm_orchestration.core import LlmOrchestrator


class InProcessLlmOrchestrationClient(InProcessClient):
    """A LanguageModel (services/rag_pipeline/ports.py) over the orchestrator in this process."""

    def __init__(self, core: LlmOrchestrator, caller: InProcessCaller, *, timeout_s: float = 10.0,
                 tracer_provider: TracerProvider | None = None) -> None:
        super().__init__(LlmFront(core), CALLS, caller, service="LlmOrchestration", rpc_service=RPC_SERVICE,
                         timeout_s=timeout_s, long_timeout_s=max(timeout_s, 60.0), tracer_provider=tracer_provider)


__all__ = ["InProcessLlmOrchestrationClient"]
