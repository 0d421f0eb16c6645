"""What a ranked result costs outside the model, in process (issue 42's pages and highlights).

    HF_HUB_OFFLINE=1 .venv/bin/python -m lab.result_cost [--queries 200]

1. CPU per SearchAndRank (time.process_time) over a 600-document tenant of random words, the
   store and pipeline in process with a hashing embedder (no model: its CPU would drown the
   difference), top_k_final 10 against
   50 (what ranking every first page five pages deep would cost), alternating, two rounds each;
2. `snippets.highlights` per result (µs) on 200 snippets of random 200-word texts.
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
from services.rag_pipeline.models import SearchRequest
from services.rag_pipeline.snippets import highlights, make_snippet
from shared.auth.inprocess import InProcessCaller
from shared.records import ArtifactMeta, DocumentIn
from shared.settings import KnowledgeStoreSettings, RagPipelineSettings

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


async def search_cpu(n: int) -> None:
    settings = KnowledgeStoreSettings(data_dir=Path(tempfile.mkdtemp()))
    llm = HashingModel(settings.dimension)
    store = KnowledgeStore(settings, llm)
    knowledge = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
    pipeline = RagPipeline(RagPipelineSettings(), llm=llm, knowledge=knowledge)
    rng = random.Random(1)
    await store.ingest("t", "", [DocumentIn(ArtifactMeta(artifact_id=f"d{i}", title=f"T {i}"),
                                            " ".join(rng.choice(WORDS) for _ in range(180))) for i in range(600)])
    queries = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(n)]
    try:
        for k in (10, 50, 10, 50):
            started = time.process_time()
            for q in queries:
                await pipeline.search_and_rank(SearchRequest(query=q, tenant_id="t", top_k_final=k, top_k_initial=50))
            print(f"top_k_final {k}: {(time.process_time() - started) * 1000 / n:.2f} ms CPU a query")
    finally:
        await pipeline.close()
        store.close()


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
    args = p.parse_args()
    asyncio.run(search_cpu(args.queries))
    highlight_cost()


if __name__ == "__main__":
    main()
