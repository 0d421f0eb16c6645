"""KnowledgeStore process: gRPC + MCP over one KnowledgeStore core; embeds through LlmOrchestration."""
from __future__ import annotations

import services._openmp  # noqa: F401  (first: before torch/faiss load OpenMP)

import asyncio
import logging
from typing import Any

import numpy as np

from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from services.knowledge_store.backend import StoreBackend, open_store
from services.knowledge_store.embedded import search_depth, vector_index
from services.knowledge_store import metrics as ks_metrics
from services.knowledge_store.grpc_api import KnowledgeStoreServicer
from services.knowledge_store.mcp_api import build_mcp
from services.knowledge_store.title_vectors import keep_backfilling
from services.llm_orchestration.client import LlmOrchestrationClient
from shared.auth.mcp_http import service_auth_settings
from shared.auth.service_auth import ServiceAuth
from shared.log import configure_logging
from shared.service_main import apply_overrides, parse_args
from shared.service_runner import ServiceSpec, serve
from shared.settings import KnowledgeStoreSettings, warn_unknown_env


class GrpcEmbedder:
    """The KnowledgeStore's embedder: LlmOrchestration.GenerateEmbeddings through its client
    (over gRPC, or in process in `nucleus up --mode single`)."""

    def __init__(self, client: Any, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._name = ""

    async def model_name(self) -> str:
        """LlmOrchestration's embedding model (GetModelInfo), asked once."""
        if not self._name:
            self._name = await self._client.embedding_model(timeout_s=self._timeout_s)
        return self._name

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await self._client.embed(texts, purpose="document", timeout_s=self._timeout_s)


def build(settings: KnowledgeStoreSettings, *, stdio: bool) -> ServiceSpec:
    return compose(settings, stdio=stdio)[0]


def compose(settings: KnowledgeStoreSettings, *, stdio: bool, llm: Any = None) -> tuple[ServiceSpec, StoreBackend]:
    """The service and its store. `llm`: LlmOrchestration's client (anything with `embed` and
    `close`, e.g. the in-process one of `nucleus up --mode single`); None: the gRPC client."""
    vector_index.set_threads(vector_index.FAISS_THREADS)
    search_depth.set_recall_target(settings.hnsw_recall_target)
    auth = ServiceAuth.load("knowledge_store", settings.identity_dir)   # None: authentication off
    if llm is None:
        llm = LlmOrchestrationClient(settings.llm_target, timeout_s=settings.rpc_timeout_s,
                                     interceptors=auth.client_interceptors("llm_orchestration") if auth else None,
                                     tls_ca_file=settings.tls_ca_file)
    embedder = GrpcEmbedder(llm, settings.rpc_timeout_s)
    store = open_store(settings, embedder)                                   # embedded | qdrant

    async def close() -> None:
        store.close()
        await llm.close()

    return ServiceSpec(
        name="knowledge_store",
        grpc_service_name="nucleus.v1.KnowledgeStore",
        add_servicers=lambda server: ks_grpc.add_KnowledgeStoreServicer_to_server(KnowledgeStoreServicer(store),
                                                                                   server),
        mcp_server=build_mcp(store, allow_local_identity=auth is None or stdio,
                             token_verifier=auth.mcp_token_verifier() if auth and not stdio else None,
                             auth=service_auth_settings() if auth and not stdio else None),
        close=close,
        grpc_interceptors=[auth.server_interceptor()] if auth else [],
        # nucleus.v1.KnowledgeStore.storage: NOT_SERVING while a tenant has a storage problem
        watch_health=lambda report: store.health.watch(lambda serving: report("storage", serving)),
        metrics=ks_metrics.register(store),             # tenants, memory, storage, disk on /metrics
        # artifacts stored before titles were embedded get their title vectors (title_vectors.py)
        background=lambda: keep_backfilling(store, embedder, settings),
    ), store


def main() -> None:
    args = parse_args("nucleus-knowledge-store", "Nucleus KnowledgeStore: FAISS + BM25 + metadata, tenant-scoped")
    settings = apply_overrides(KnowledgeStoreSettings(), args)
    configure_logging(settings.log_level)
    warn_unknown_env(logging.getLogger(__name__))
    asyncio.run(serve(lambda: build(settings, stdio=args.stdio), settings, stdio=args.stdio,
                      ready_file=args.ready_file))


if __name__ == "__main__":
    main()
