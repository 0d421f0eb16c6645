"""How much product code one SearchAndRank passes through in the single-mode composition (the
in-process ports of services/single_process/main.py, the real model and store): every product
module and function entered, counted with `sys.setprofile` / `threading.setprofile` from
`RagPipeline.search` down.

Run as a script to print the counts (the same file run in a checkout of 14ae235 gives its own):

    HF_HUB_OFFLINE=1 .venv/bin/python -m tests.integration.test_query_path
"""
from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.inprocess_client import InProcessLlmOrchestrationClient
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import Preferences, SearchRequest
from shared.inprocess import InProcessCaller
from shared.settings import LlmOrchestrationSettings, RagPipelineSettings
from tests.unit.knowledge_store.helpers import doc, settings_for

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = tuple(str(ROOT / d) + "/" for d in ("services", "shared", "ranking", "nucleus"))
#: Counted with this file (distinct product modules, functions), the warm search's log write
#: settled first: on 14ae235 (43, 236); now (32, 249) (cohesive modules merged: the in-process
#: caller and its telemetry, ranking's inputs / query / factors, the fetch stage with results,
#: the caller policy into the front, folding into merge, the learned ranking into feedback; the
#: candidate-row cache beside the allowed sets is entered since 2026-12-08).
#: The issue's target is half the modules and 0.6x the functions; not reached yet, so this holds
#: the line: a change that lengthens the query path fails here.
NOW = (32, 249)
#: Entered on some runs only (a cache's first miss, a timing branch, the model's runtime).
SLACK = (2, 15)

DOCS = [doc(f"n{i}", f"Pump {i} seals wear after {i * 100} hours; replace the gasket and check the valve "
                    f"pressure. Battery controller {i} resets when the firmware hangs.", title=f"Pump note {i}")
        for i in range(40)]


async def count(tmp: Path) -> tuple[set[str], set[tuple[str, str]]]:
    core = LlmOrchestrator(LlmOrchestrationSettings())
    await core.start()
    store = KnowledgeStore(settings_for(tmp), InProcessLlmOrchestrationClient(
        core, InProcessCaller(None, "llm_orchestration", False)))
    knowledge = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
    llm = InProcessLlmOrchestrationClient(core, InProcessCaller(None, "llm_orchestration", False))
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=llm)
    modules: set[str] = set()
    functions: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(PRODUCT):
                modules.add(path)
                functions.add((path, frame.f_code.co_qualname))

    try:
        await store.ingest("qp", "", DOCS)
        request = SearchRequest(query="pump gasket valve pressure", tenant_id="qp", top_k_final=5,
                                prefs=Preferences(explain=True))
        warm = await pipeline.search(request, None)   # warm: first-use imports and caches
        # The warm search's log write is a task of its own (feedback.py): let it finish, so that
        # it is not counted as part of the measured search (whose own write runs after it).
        await pipeline.search_log.settled(warm.search_id)
        request = SearchRequest(query="battery firmware reset", tenant_id="qp", top_k_final=5,
                                prefs=Preferences(explain=True))
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            response = await pipeline.search(request, None)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        assert response.results and not response.degraded
    finally:
        store.close()
        await core.close()
    return modules, functions


def test_one_search_passes_no_more_modules_and_functions_than_counted(tmp_path):
    modules, functions = asyncio.run(count(tmp_path))
    assert len(modules) <= NOW[0] + SLACK[0], sorted(modules)
    assert len(functions) <= NOW[1] + SLACK[1], len(functions)


if __name__ == "__main__":
    import tempfile

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    with tempfile.TemporaryDirectory() as tmp:
        mods, funcs = asyncio.run(count(Path(tmp)))
    for m in sorted(mods):
        print(m[len(str(ROOT)) + 1:])
    by_trace: dict[int, list[str]] = {}
    for span in exporter.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, []).append(span.name)
    query = next(names for names in reversed(by_trace.values()) if "rag.search_and_rank" in names)
    print(f"spans of the last search: {len(query)}: {sorted(query)}")
    print(f"{len(mods)} modules, {len(funcs)} functions")
