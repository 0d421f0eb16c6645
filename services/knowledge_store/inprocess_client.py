"""The KnowledgeStore's in-process client (`nucleus up --mode single`): each call of the front
(front.py `CALLS`) made in this process, with what the gRPC path would give it.

The same methods, records and errors as `KnowledgeStoreClient` (client.py), through the generic
in-process adapter (`shared.inprocess.InProcessClient`) over the front's call table: the
verified caller the gRPC servicer would have seen (the calling service and the end user it works
for), one INTERNAL span named as the RPC (`nucleus.v1.KnowledgeStore/<Method>`), and the call's
deadline (`timeout_s=`, else the client's; long work the ingest deadline). The front applies the
caller policy.
"""
from __future__ import annotations

from opentelemetry.trace import TracerProvider

from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.front import CALLS, RPC_SERVICE, StoreFront
from shared.inprocess import InProcessCaller, InProcessClient


class InProcessKnowledgeStoreClient(InProcessClient):
    """A KnowledgeSource (services/rag_pipeline/ports.py) over a store in this process."""

    def __init__(self, store: StoreBackend, caller: InProcessCaller, *, timeout_s: float = 10.0,
                 ingest_timeout_s: float = 600.0, tracer_provider: TracerProvider | None = None) -> None:
        super().__init__(StoreFront(store), CALLS, caller, service="KnowledgeStore", rpc_service=RPC_SERVICE,
                         timeout_s=timeout_s, long_timeout_s=ingest_timeout_s, tracer_provider=tracer_provider)

    def data_id(self, tenant_id: str) -> str:
        """The tenant's data id (StoreBackend.data_id) now: as the gRPC client's after its last read."""
        return self._target.store.data_id(tenant_id)


__all__ = ["InProcessKnowledgeStoreClient"]
