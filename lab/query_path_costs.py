"""Where a single-mode query's CPU outside the model went, part by part (issue 41, 2026-12-08).

    HF_HUB_OFFLINE=1 .venv/bin/python -m lab.query_path_costs --dataset ../shared/data/scifact \\
        [--stack-dir .bench-cache/modes-stack] [--part all|gc|store|hop|text]

`--stack-dir` is a stack directory holding the ingested SciFact tenant (`lab.deployment_modes`
leaves one there). Parts, each printing figures only:

    gc     the in-process single-mode composition (services/single_process/main.py's ports, the
           real model, telemetry as the single process installs it), 16 concurrent searches,
           960 queries with CPython's collector as it starts and 960 after
           `service_runner.settle_heap()`, in turn three times (`gc.unfreeze` between): event-loop
           CPU a query (`time.thread_time`) and the collections' CPU a query by generation
           (`gc.callbacks`)
    store  the store's primitives alone, one thread, 300 SciFact queries each: the candidate-row
           join of 60 random rows (and the memory a cached row takes), the dense leg, the keyword
           leg, keyword leg + completion with the keyword index's score columns kept and not kept,
           GetEntries of 10
    hop    one in-process hop: `rpc_span` and `in_process_call` against the generator version
           around `start_as_current_span` they replaced (kept below), telemetry routed as served,
           four times in turn, each after 3 s for the span export queue to drain
    text   `term_spans(text, only)` and `make_snippet` against the versions they replaced (kept
           below) on SciFact abstracts: identical answers counted, µs each
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from benchmarks.beir import load_dataset

ROOT = Path(__file__).resolve().parents[1]


def _settings_env(stack: Path) -> None:
    os.environ.update(NUCLEUS_DATA_DIR=str(stack), NUCLEUS_KS_DATA_DIR=str(stack / "knowledge_store"),
                      NUCLEUS_LLM_CACHE_SIZE="0", HF_HUB_OFFLINE="1")


async def part_gc(queries: list[str]) -> None:
    from services.knowledge_store import main as ks_main
    from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
    from services.llm_orchestration.core import LlmOrchestrator
    from services.llm_orchestration.inprocess_client import InProcessLlmOrchestrationClient
    from services.rag_pipeline.core import RagPipeline
    from services.rag_pipeline.models import SearchRequest
    from services.single_process.main import in_process_caller, model_layout
    from shared.inprocess import setup_routed_telemetry
    from shared.service_runner import settle_heap
    from shared.settings import KnowledgeStoreSettings, LlmOrchestrationSettings, RagPipelineSettings

    setup_routed_telemetry(("llm_orchestration", "knowledge_store", "rag_pipeline"), default="rag_pipeline")
    llm_s, ks_s, rag_s = LlmOrchestrationSettings(), KnowledgeStoreSettings(), RagPipelineSettings()
    core = LlmOrchestrator(llm_s, layout=model_layout(llm_s))
    await core.start()
    _, store = ks_main.compose(ks_s, stdio=False, llm=InProcessLlmOrchestrationClient(
        core, in_process_caller("knowledge_store", ks_s, "llm_orchestration", llm_s)))
    pipeline = RagPipeline(rag_s, knowledge=InProcessKnowledgeStoreClient(
        store, in_process_caller("rag_pipeline", rag_s, "knowledge_store", ks_s)), llm=InProcessLlmOrchestrationClient(
        core, in_process_caller("rag_pipeline", rag_s, "llm_orchestration", llm_s)))
    spent = {0: 0.0, 1: 0.0, 2: 0.0}
    started: list[float] = []

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[:] = [time.thread_time()]
        else:
            spent[info["generation"]] += time.thread_time() - started[0]

    async def rep(n: int = 960) -> None:
        work = iter(range(n))

        async def worker() -> None:
            for i in work:
                await pipeline.search(SearchRequest(query=queries[i % len(queries)], tenant_id="scifact",
                                                    top_k_initial=50, top_k_final=10), None)
        for g in spent:
            spent[g] = 0.0
        cpu = time.thread_time()
        await asyncio.gather(*(worker() for _ in range(16)))
        print(f"  event loop {1000 * (time.thread_time() - cpu) / n:.2f} ms a query; collections "
              + ", ".join(f"gen {g} {1000 * s / n:.3f}" for g, s in spent.items()) + " ms a query")

    try:
        await rep(64)                                  # warm: first-use imports, the tenant opened
        gc.callbacks.append(timed)
        for settled in (False, True) * 3:              # in turn: as CPython starts, then settled
            if settled:
                settle_heap()
            else:
                gc.unfreeze()
                gc.set_threshold(700, 10, 10)
            print("after settle_heap():" if settled else "CPython's collector as it starts:")
            await rep()
    finally:
        gc.callbacks.remove(timed)
        store.close()
        await core.close()


async def part_store(queries: list[str]) -> None:
    from services.knowledge_store import main as ks_main
    from services.knowledge_store.embedded import keyword_index, storage
    from shared.records import SearchFilters
    from shared.settings import KnowledgeStoreSettings

    _, store = ks_main.compose(KnowledgeStoreSettings(), stdio=False)
    nothing, rng = SearchFilters(), np.random.default_rng(0)
    vectors = rng.standard_normal((len(queries), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    try:
        [columns] = await store.dense("scifact", vectors[:1], 50, nothing)
        tenant = await store._tenants.get("scifact")
        with tenant.db.read() as conn:
            rids = [r for (r,) in conn.execute("SELECT rid FROM entries")]
            picks = [random.Random(i).sample(rids, 60) for i in range(len(queries))]
            cpu = time.thread_time()
            for rows in picks:
                storage.entries.candidate_rows(conn, rows)
            print(f"candidate-row join, 60 rows       {1000 * (time.thread_time() - cpu) / len(picks):.3f} ms")
            tracemalloc.start()
            every = storage.entries.candidate_rows(conn, rids)
            held = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            print(f"a cached candidate row            {held / len(every):.0f} bytes (allowed_cache.ROW_BYTES)")

        async def hybrid(i: int) -> None:
            keyword, _ = await store.keyword("scifact", queries[i], [], 50, nothing)
            await store.complete("scifact", vectors[i][None], 50, nothing, keywords=queries[i],
                                 complete_rows=keyword.row_ids)

        ids = list(columns.entry_ids[:10])
        kept = keyword_index.MEMO_MAX_POSITIONS
        for name, call in (("dense leg, 50", lambda i: store.dense("scifact", vectors[i][None], 50, nothing)),
                           ("keyword leg, 50", lambda i: store.keyword("scifact", queries[i], [], 50, nothing)),
                           ("keyword + completion, kept", hybrid), ("keyword + completion, not kept", hybrid),
                           ("GetEntries of 10", lambda i: store.get_entries("scifact", ids))):
            keyword_index.MEMO_MAX_POSITIONS = 0 if name.endswith("not kept") else kept
            tenant.keywords._memo.clear()
            for i in range(20):
                await call(i)
            cpu = time.thread_time()
            for i in range(len(queries)):
                await call(i)
            print(f"{name:<34} {1000 * (time.thread_time() - cpu) / len(queries):.3f} ms")
        keyword_index.MEMO_MAX_POSITIONS = kept
    finally:
        store.close()


@contextmanager
def _generator_rpc_span(service: str, method: str, *, callee: str = ""):
    """The in-process hop span before 2026-12-08: a generator around `start_as_current_span`."""
    import grpc
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from shared import inprocess
    from shared.errors import NucleusError
    from shared.telemetry.rpc import SERVER_ERROR_CODES

    attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method,
                  inprocess.TRANSPORT_ATTRIBUTE: "in-process"}
    token = inprocess.CURRENT_SERVICE.set(callee) if callee else None
    try:
        with inprocess._tracer.start_as_current_span(f"{service}/{method}", kind=SpanKind.INTERNAL,
                                                     attributes=attributes, record_exception=False,
                                                     set_status_on_exception=False) as span:
            code = grpc.StatusCode.OK
            try:
                yield span
            except BaseException as err:
                code = inprocess.error_code(err)
                if not isinstance(err, NucleusError):
                    span.set_attribute("exception.type", type(err).__qualname__)
                raise
            finally:
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code is not grpc.StatusCode.OK:
                    span.set_attribute("error.type", code.name)
                    if code in SERVER_ERROR_CODES:
                        span.set_status(Status(StatusCode.ERROR, code.name))
    finally:
        if token is not None:
            inprocess.CURRENT_SERVICE.reset(token)


def part_hop(n: int = 1000) -> None:
    from shared import inprocess

    inprocess.setup_routed_telemetry(("llm_orchestration", "knowledge_store", "rag_pipeline"), default="rag_pipeline")
    caller = inprocess.InProcessCaller(None, "llm_orchestration", False)
    loop = asyncio.new_event_loop()

    async def call() -> None:
        async with inprocess.in_process_call(caller, service="LlmOrchestration", callee="llm_orchestration",
                                             rpc_service="nucleus.v1.LlmOrchestration", method="GenerateEmbeddings",
                                             timeout_s=5):
            pass

    def span(make):
        def run() -> None:
            with make("nucleus.v1.LlmOrchestration", "GenerateEmbeddings", callee="llm_orchestration"):
                pass
        return run

    with inprocess.in_service("rag_pipeline"):
        variants = (("generator span (before)", span(_generator_rpc_span)), ("rpc_span", span(inprocess.rpc_span)),
                    ("in_process_call", lambda: loop.run_until_complete(call())),
                    ("an empty loop run (to subtract)", lambda: loop.run_until_complete(asyncio.sleep(0))))
        for name, run in variants * 4:      # four times, in turn; each after the export queue has drained
            time.sleep(3)
            for _ in range(100):
                run()
            cpu = time.thread_time()
            for _ in range(n):
                run()
            print(f"{name:<34} {1e6 * (time.thread_time() - cpu) / n:6.1f} µs (the main thread's CPU)")


def _term_spans_before(text: str, only: frozenset[str]) -> list[tuple[int, int, str]]:
    """`term_spans(text, only)` before 2026-12-08: every word located and analysed."""
    from shared.analysis import _WORD, _word_terms
    return [(*m.span(), t) for m in _WORD.finditer(text) for t in _word_terms(m.group()) if t in only]


def _snippet_start_before(text: str, terms: tuple[str, ...], limit: int) -> int:
    """`make_snippet`'s densest window before 2026-12-08: a set of terms per starting hit."""
    from services.rag_pipeline.results import _term_hits
    start, best, reach, hits = 0, 0, limit * 3 // 4, _term_hits(text, terms)
    for i, (pos, _) in enumerate(hits):
        seen = {term for at, term in hits[i:] if at - pos <= reach}
        if len(seen) > best:
            best, start = len(seen), pos
    return start


def part_text(texts: list[str], queries: list[str]) -> None:
    from services.rag_pipeline import results
    from shared.analysis import analyse, term_spans

    onlys = [frozenset(analyse(queries[i // 10 % len(queries)])) for i in range(len(texts))]
    same = sum(term_spans(t, o) == _term_spans_before(t, o) for t, o in zip(texts, onlys))
    print(f"term_spans: the same spans on {same} of {len(texts)} abstracts")
    for name, fn in (("term_spans before", _term_spans_before), ("term_spans", term_spans)):
        cpu = time.thread_time()
        for t, o in zip(texts, onlys):
            fn(t, o)
        print(f"  {name:<24} {1e6 * (time.thread_time() - cpu) / len(texts):6.1f} µs an abstract")
    terms = [results._snippet_terms(queries[i % len(queries)]) for i in range(len(texts))]
    cpu = time.thread_time()
    for t, q in zip(texts, terms):
        _snippet_start_before(t.strip(), q, results.SNIPPET_CHARS)
    before = 1e6 * (time.thread_time() - cpu) / len(texts)
    cpu = time.thread_time()
    for i, t in enumerate(texts):
        results.make_snippet(t, queries[i % len(queries)])
    print(f"  snippet window before {before:6.1f} µs an abstract (the window alone); make_snippet now "
          f"{1e6 * (time.thread_time() - cpu) / len(texts):6.1f} µs (the whole snippet)")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m lab.query_path_costs", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", type=Path, required=True, help="BEIR dataset directory (SciFact)")
    p.add_argument("--stack-dir", type=Path, default=ROOT / ".bench-cache" / "modes-stack")
    p.add_argument("--part", choices=("all", "gc", "store", "hop", "text"), default="all")
    args = p.parse_args()
    dataset = load_dataset(args.dataset)
    queries = list(dataset.queries.values())[:300]
    _settings_env(args.stack_dir.resolve())
    if args.part in ("all", "text"):
        part_text([d.title + ". " + d.body for d in dataset.corpus][:3000], queries)
    if args.part in ("all", "hop"):
        part_hop()
    if args.part in ("all", "store"):
        asyncio.run(part_store(queries))
    if args.part in ("all", "gc"):
        asyncio.run(part_gc(queries))


if __name__ == "__main__":
    main()
