"""What a ranked result costs outside the model, in process (issue 42's pages and highlights).

    HF_HUB_OFFLINE=1 .venv/bin/python -m lab.result_cost [--queries 200] [--part all|search|highlights|why-not|pages] [--model]

1. CPU per SearchAndRank (time.process_time) over a 600-document tenant of random words, the
   store and pipeline in process with a hashing embedder (no model: its CPU would drown the
   difference), top_k_final 10 against
   50 (what ranking every first page five pages deep would cost), alternating, two rounds each;
2. `snippets.highlights` per result (µs) on 200 snippets of random 200-word texts;
3. why-not (services/rag_pipeline/why_not.py): wall time of `why_not` for 5 ids (4 of the
   tenant's documents at random and a made-up one) against a fresh search of the same request
   (`search_for`, what why-not runs inside), alternating per query, on the tenant of 1.: p50 and
   p90 of each and the ratio of the p50s;
4. pages (`--part pages`, `--model` for the real local model): p50 of a first page against its
   second page, ranked from what the first ranked, and (alternate queries) searched again.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline import pages as pages_mod
from services.rag_pipeline.models import Preferences, SearchRequest
from services.rag_pipeline.pages import Pages, _Replay
from services.rag_pipeline.results import highlights, make_snippet
from services.rag_pipeline.why_not import why_not
from shared.inprocess import InProcessCaller
from shared.records import ArtifactMeta, DocumentIn
from shared.settings import KnowledgeStoreSettings, RagPipelineSettings

EXPLAIN = Preferences(explain=True)
WORDS = ["pump", "seal", "valve", "pressure", "gasket", "the", "of", "battery", "firmware"] + \
        [f"w{i}" for i in range(400)]


class HashingModel:
    """Word-hashing unit vectors of the store's dimension: the model's port without the model."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    async def embed(self, texts, *, purpose: str = "query", timeout_s: float | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, hash(word) % self.dimension] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)

    async def close(self) -> None:
        pass


async def tenant(n: int, llm=None) -> tuple[RagPipeline, KnowledgeStore, list[str]]:
    """The in-process store and pipeline over 600 random-word documents, and `n` queries
    (`llm`: the model's port, default the hashing one)."""
    settings = KnowledgeStoreSettings(data_dir=Path(tempfile.mkdtemp()))
    llm = llm or HashingModel(settings.dimension)
    store = KnowledgeStore(settings, llm)
    knowledge = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
    pipeline = RagPipeline(RagPipelineSettings(), llm=llm, knowledge=knowledge)
    rng = random.Random(1)
    await store.ingest("t", "", [DocumentIn(ArtifactMeta(artifact_id=f"d{i}", title=f"T {i}"),
                                            " ".join(rng.choice(WORDS) for _ in range(180))) for i in range(600)])
    return pipeline, store, [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(n)]


async def search_cpu(n: int) -> None:
    pipeline, store, queries = await tenant(n)
    try:
        for k in (10, 50, 10, 50):
            started = time.process_time()
            for q in queries:
                await pipeline.search_and_rank(SearchRequest(query=q, tenant_id="t", top_k_final=k, top_k_initial=50))
            print(f"top_k_final {k}: {(time.process_time() - started) * 1000 / n:.2f} ms CPU a query")
    finally:
        await pipeline.close()
        store.close()


async def why_not_cost(n: int) -> None:
    pipeline, store, queries = await tenant(n)
    rng = random.Random(2)
    fresh, why = [], []
    try:
        for q in queries:
            request = SearchRequest(query=q, tenant_id="t", top_k_final=10, top_k_initial=50, prefs=EXPLAIN)
            ids = [f"d{i}" for i in rng.sample(range(600), 4)] + ["no-such-document"]
            started = time.perf_counter()
            await pipeline.search_for(request, None, None)
            fresh.append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = await why_not(pipeline, None, request, None, ids)
            why.append(time.perf_counter() - started)
            assert len(answer.documents) == 5
    finally:
        await pipeline.close()
        store.close()
    (f50, f90), (w50, w90) = (np.percentile(np.asarray(x) * 1000, [50, 90]) for x in (fresh, why))
    print(f"fresh search: p50 {f50:.2f} ms, p90 {f90:.2f} ms; why_not (5 ids): p50 {w50:.2f} ms, p90 {w90:.2f} ms; "
          f"ratio of p50s {w50 / f50:.2f}x ({n} queries)")


async def pages_cost(n: int, model: bool) -> None:
    """p50 of a first page (a fresh search, through Pages as every tool searches) against its
    second page, the second page ranked from what the first ranked (pages.py `_Replay`) and,
    alternating, searched again five pages deep (the way a first page with a learned model or
    folded copies still takes)."""
    llm = None
    if model:                               # the real model, in process: what a fresh search pays
        from services.llm_orchestration.core import LlmOrchestrator
        from services.llm_orchestration.inprocess_client import InProcessLlmOrchestrationClient
        from shared.settings import LlmOrchestrationSettings
        core = LlmOrchestrator(LlmOrchestrationSettings())
        await core.start()
        llm = InProcessLlmOrchestrationClient(core, InProcessCaller(None, "llm_orchestration", False), timeout_s=120)
    pipeline, store, queries = await tenant(n, llm)
    pages, replay_of = Pages(pipeline, b"k" * 32), _Replay.of
    times: dict[str, list[float]] = {"fresh": [], "page 2": [], "page 2 searched again": []}
    try:
        for i, q in enumerate(queries):
            again = i % 2 == 1
            pages_mod._Replay.of = (lambda *_: None) if again else replay_of      # type: ignore[method-assign]
            request = SearchRequest(query=q, tenant_id="t", top_k_final=10, top_k_initial=50, prefs=EXPLAIN)
            started = time.perf_counter()
            first = await pages.search(request, None)
            times["fresh"].append(time.perf_counter() - started)
            started = time.perf_counter()
            second = await pages.search(request, None, cursor=first.cursor_after(10))
            times["page 2 searched again" if again else "page 2"].append(time.perf_counter() - started)
            assert len(second.response.results) == 10
    finally:
        pages_mod._Replay.of = replay_of                                        # type: ignore[method-assign]
        await pipeline.close()
        store.close()
    p50 = {k: float(np.percentile(np.asarray(v) * 1000, 50)) for k, v in times.items()}
    print(f"{'MiniLM' if model else 'hashing'} embedder, {n} queries: fresh search (page 1) p50 {p50['fresh']:.2f} ms; "
          f"page 2 p50 {p50['page 2']:.2f} ms = {p50['page 2'] / p50['fresh']:.2f}x; searched again "
          f"{p50['page 2 searched again']:.2f} ms = {p50['page 2 searched again'] / p50['fresh']:.2f}x")


def highlight_cost() -> None:
    rng = random.Random(1)
    query = "pump gasket valve pressure"
    snippets = [make_snippet(" ".join(rng.choice(WORDS) for _ in range(200)), query) for _ in range(200)]
    for _ in range(2):
        started = time.perf_counter()
        for s in snippets:
            highlights(s, query)
        print(f"highlights: {(time.perf_counter() - started) / len(snippets) * 1e6:.1f} µs a result")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m lab.result_cost")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--part", choices=("all", "search", "highlights", "why-not", "pages"), default="all")
    p.add_argument("--model", action="store_true", help="pages: embed with the real local model")
    args = p.parse_args()
    if args.part in ("all", "search"):
        asyncio.run(search_cpu(args.queries))
    if args.part in ("all", "highlights"):
        highlight_cost()
    if args.part in ("all", "why-not"):
        asyncio.run(why_not_cost(args.queries))
    if args.part in ("all", "pages"):
        asyncio.run(pages_cost(args.queries, args.model))


if __name__ == "__main__":
    main()
