"""The KnowledgeStore's in-process client (`nucleus up --mode single`): each call of the front
(front.py `CALLS`) made in this process, with what the gRPC path would give it.

The same methods, records and errors as `KnowledgeStoreClient` (client.py); one generic wrapper
per call instead of one hand-written method: the verified caller the gRPC servicer would have
seen (`shared.auth.in_process_call`: the calling service and the end user it works for), one
INTERNAL span named as the RPC (`nucleus.v1.KnowledgeStore/<Method>`), and the call's deadline
(`timeout_s=`, else the client's; long work the ingest deadline). The front applies the caller
policy. A call whose front method is an async iterator (a streamed call) holds its caller, span
and deadline for its whole iteration.
"""
from __future__ import annotations

import inspect
from typing import Any

from opentelemetry.trace import TracerProvider

from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.front import CALLS, RPC_SERVICE, StoreFront
from shared.inprocess import InProcessCaller, in_process_call

SERVICE = "KnowledgeStore"
CALLEE = "knowledge_store"


class InProcessKnowledgeStoreClient:
    """A KnowledgeSource (services/rag_pipeline/ports.py) over a store in this process."""

    def __init__(self, store: StoreBackend, caller: InProcessCaller, *, timeout_s: float = 10.0,
                 ingest_timeout_s: float = 600.0, tracer_provider: TracerProvider | None = None) -> None:
        self._front = StoreFront(store)
        self._caller = caller
        self._tracer_provider = tracer_provider         # None: the process's (tests pass their own)
        self.timeout_s = timeout_s
        self.ingest_timeout_s = ingest_timeout_s

    async def close(self) -> None:
        """The store belongs to the KnowledgeStore service, which closes it."""

    def data_id(self, tenant_id: str) -> str:
        """The tenant's data id (StoreBackend.data_id) now: as the gRPC client's after its last read."""
        return self._front.store.data_id(tenant_id)

    def __getattr__(self, name: str) -> Any:
        call = CALLS.get(name)
        if call is None:
            raise AttributeError(f"the KnowledgeStore has no call '{name}'")
        method = getattr(self._front, name)
        default_s = self.ingest_timeout_s if call.long else self.timeout_s

        def opened(timeout_s: float | None):
            return in_process_call(self._caller, service=SERVICE, rpc_service=RPC_SERVICE, callee=CALLEE,
                                   method=call.rpc, timeout_s=timeout_s or default_s,
                                   tracer_provider=self._tracer_provider)

        if inspect.isasyncgenfunction(method):
            async def streamed(*args: Any, timeout_s: float | None = None, **kwargs: Any):
                async with opened(timeout_s) as principal:
                    async for item in method(principal, *args, **kwargs):
                        yield item
            wrapper = streamed
        else:
            async def unary(*args: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
                async with opened(timeout_s) as principal:
                    return await method(principal, *args, **kwargs)
            wrapper = unary
        wrapper.__name__ = name
        setattr(self, name, wrapper)        # made once per client and call
        return wrapper


__all__ = ["InProcessKnowledgeStoreClient"]
