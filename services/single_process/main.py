"""One process, three services (`nucleus up --mode single`): the composition root that decides the
ports are in-process adapters.

    LlmOrchestration  its core, started once          ─┐ each still serves its own gRPC service,
    KnowledgeStore    its store, embedding through    │ health, reflection and MCP endpoint at
                      LlmOrchestration in process     │ the addresses and ports its settings
    RAGPipeline       its pipeline, over the store    │ name (NUCLEUS_LLM_*, NUCLEUS_KS_*,
                      and the model in process        ─┘ NUCLEUS_RAG_*), exactly as in split mode

Only the calls between the services change: `InProcessKnowledgeStoreClient` and
`InProcessLlmOrchestrationClient` call the store and the orchestrator with the same typed
records (no serialising, no gRPC), apply the same caller policy with the caller the callee's
auth interceptor would have verified (`shared.inprocess`: with authentication on, a call
without a caller is refused), and make an INTERNAL span named as the RPC. Each service's spans
go to its own trace file and resource (`shared.inprocess`), so a trace reads the same
in both modes. Nothing below this module knows which mode runs.

The ready file holds `{"service": "single", "pid", "tls", "services": {name: the address each
service's own ready file would hold}}`; the supervisor (cli/supervisor.py) restarts this process
as it restarts a service. SIGTERM/SIGINT stop the services in reverse dependency order
(RAGPipeline, KnowledgeStore, LlmOrchestration), each drained as in its own process.

    python -m services.single_process.main --ready-file run/single.ready.json
"""
from __future__ import annotations

import services._openmp  # noqa: F401  (first: before torch/faiss load OpenMP)

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from services.knowledge_store import main as ks_main
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from services.llm_orchestration import main as llm_main
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.inprocess_client import InProcessLlmOrchestrationClient
from services.llm_orchestration.microbatch import SINGLE_LAYOUT, SPLIT_LAYOUT, BatchLayout
from services.rag_pipeline import main as rag_main
from shared.inprocess import InProcessCaller
from shared.log import configure_logging, register_secret
from shared.service_runner import ServiceSpec, run_service, settle_heap, write_ready
from shared.settings import (KnowledgeStoreSettings, LlmOrchestrationSettings, RagPipelineSettings,
                             ServiceSettings, warn_unknown_env)
from shared.inprocess import CURRENT_SERVICE, in_service, setup_routed_telemetry

log = logging.getLogger(__name__)

SERVICES = ("llm_orchestration", "knowledge_store", "rag_pipeline")     # start order; stop is reversed


def model_layout(settings: LlmOrchestrationSettings) -> BatchLayout:
    """The model's layout in one process: SINGLE_LAYOUT (microbatch.py, docs/SCALE.md) with the
    local model; as in split mode when the embeddings come from an API (no local model shares the
    cores, and larger batches mean fewer requests)."""
    return SINGLE_LAYOUT if settings.embedding_provider == "local" else SPLIT_LAYOUT


def in_process_caller(caller: str, caller_settings: ServiceSettings, callee: str,
                      callee_settings: ServiceSettings) -> InProcessCaller:
    """As across processes: the callee requires a caller when it has identities; the caller is
    known when it has its own identity (else its calls carry none, and are refused)."""
    return InProcessCaller(service=caller if caller_settings.identity_dir is not None else None, callee=callee,
                           require_auth=callee_settings.identity_dir is not None)


async def serve(ready_file: Path | None) -> int:
    telemetry = setup_routed_telemetry(SERVICES, default="rag_pipeline")
    llm_settings, ks_settings = LlmOrchestrationSettings(), KnowledgeStoreSettings()
    rag_settings = RagPipelineSettings()
    register_secret(llm_settings.openai_api_key.get_secret_value())
    if rag_settings.require_auth and (ks_settings.identity_dir is None or llm_settings.identity_dir is None):
        raise SystemExit("single: NUCLEUS_RAG_REQUIRE_AUTH is set but NUCLEUS_KS_IDENTITY_DIR / "
                         "NUCLEUS_LLM_IDENTITY_DIR are not; every service of the stack needs its identity")

    with in_service("llm_orchestration"):
        core = LlmOrchestrator(llm_settings, layout=model_layout(llm_settings))
        await core.start()
        llm_spec = llm_main.build(llm_settings, core, stdio=False)
    with in_service("knowledge_store"):
        ks_llm = InProcessLlmOrchestrationClient(
            core, in_process_caller("knowledge_store", ks_settings, "llm_orchestration", llm_settings),
            timeout_s=ks_settings.rpc_timeout_s)
        ks_spec, store = ks_main.compose(ks_settings, stdio=False, llm=ks_llm)
    with in_service("rag_pipeline"):
        knowledge = InProcessKnowledgeStoreClient(
            store, in_process_caller("rag_pipeline", rag_settings, "knowledge_store", ks_settings),
            timeout_s=rag_settings.retrieval_timeout_s)
        llm = InProcessLlmOrchestrationClient(
            core, in_process_caller("rag_pipeline", rag_settings, "llm_orchestration", llm_settings),
            timeout_s=rag_settings.embed_timeout_s)
        rag_spec = rag_main.build(rag_settings, stdio=False, knowledge=knowledge, llm=llm)

    specs: dict[str, tuple[ServiceSpec, ServiceSettings]] = {
        "llm_orchestration": (llm_spec, llm_settings), "knowledge_store": (ks_spec, ks_settings),
        "rag_pipeline": (rag_spec, rag_settings)}
    stops = {name: asyncio.Event() for name in SERVICES}
    addresses: dict[str, dict[str, Any]] = {}
    tasks: dict[str, asyncio.Task[None]] = {}
    for name in SERVICES:
        spec, settings = specs[name]
        with in_service(name):      # its servers' tasks (gRPC handlers, uvicorn) inherit it
            tasks[name] = asyncio.create_task(run_service(
                spec, settings, stop=stops[name], own_process=False,
                on_ready=lambda address, name=name: addresses.__setitem__(name, address)), name=name)

    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_requested.set)
    stopper = asyncio.create_task(stop_requested.wait())
    ready = False
    code = 0
    while True:
        done, _ = await asyncio.wait([stopper, *tasks.values()], timeout=0.05,
                                     return_when=asyncio.FIRST_COMPLETED)
        if not ready and len(addresses) == len(SERVICES):
            ready = True
            settle_heap()
            if ready_file is not None:
                write_ready(ready_file, {"service": "single", "pid": os.getpid(),
                                          "tls": any(a.get("tls") for a in addresses.values()),
                                          "services": {n: addresses[n] for n in SERVICES}})
            log.info("single process serving %s", ", ".join(f"{n} on {addresses[n]['grpc']}" for n in SERVICES))
        if stopper in done:
            break
        ended = [t for t in done if t is not stopper]
        if ended:
            for task in ended:
                error = task.exception()
                log.error("%s stopped serving%s; stopping the process", task.get_name(),
                          f": {error!r}" if error else "")
            code = 1
            break

    for name in reversed(SERVICES):        # RAGPipeline first: it calls the other two
        stops[name].set()
        try:
            await tasks[name]
        except Exception:  # noqa: BLE001 - already reported; stop the others regardless
            log.exception("%s failed while stopping", name)
    stopper.cancel()
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)
    _shutdown_telemetry(telemetry)
    return code


def _shutdown_telemetry(installed: list[Any], timeout_s: float = 3.0) -> None:
    """Export what is buffered and stop, giving up after `timeout_s` (an unreachable collector
    never stretches a shutdown), as `shared.telemetry.providers.shutdown_telemetry` does."""
    import threading

    def stop_all() -> None:
        for telemetry in installed:
            telemetry.shutdown()

    worker = threading.Thread(target=stop_all, name="otel-shutdown", daemon=True)
    worker.start()
    worker.join(timeout_s)


class _ServiceName(logging.Filter):
    """Adds `service` to every record: the service whose code logged it (`in_service`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = CURRENT_SERVICE.get() or "single"
        return True


def _log_service_names() -> None:
    """One log for the three services, each line naming the service it belongs to."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ServiceName())
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(service)s] %(name)s: %(message)s"))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m services.single_process.main",
                                     description="Nucleus RAG: the three services in one process")
    parser.add_argument("--ready-file", type=Path, help="write the bound addresses here as JSON when serving")
    args = parser.parse_args()
    configure_logging(RagPipelineSettings().log_level)
    warn_unknown_env(log)
    _log_service_names()
    sys.exit(asyncio.run(serve(args.ready_file)))


if __name__ == "__main__":
    main()
