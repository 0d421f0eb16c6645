"""What score completion costs a query, measured against the running stack in the same run.

For every query (agent-sized: `top_k` candidates per leg, one phrase) the harness does what
SearchAndRank does, through gRPC: the keyword leg starts while LlmOrchestration embeds the
query; then the vector call, once without completion (`candidates_by_vector`, the call before
completion) and once with it (`candidates_by_vector_with_completion`, naming the keyword
leg's rows), in alternating order; then the merge of the legs without and with completion,
in the same order.
The cost of completion per query is

    wait     how much longer the keyword leg ran after the embedding was ready (the vector
             call now waits for it: it names the keyword leg's rows)
    call     vector call with completion - vector call without (the store's extra work and
             the larger message)
    merge    merge with completion - merge without (RAGPipeline's extra work)
    total    wait + call + merge

reported as p50 / p95 over the queries (paired differences, client clock).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from benchmarks.metrics import latency_summary
from services.rag_pipeline.merge import merge
from shared.records import RetrievalRequest, SearchFilters

DESCRIPTION = ("Per query, through gRPC against the benchmark stack: the keyword leg beside the query embedding, "
               "then the vector call without and with completion (alternating order), then the merge without "
               "and with it. wait = keyword leg still running after the embedding (the vector call now waits "
               "for it); call / merge = paired differences; total = wait + call + merge.")


async def measure(ks_target: str, llm_target: str, tenant: str, queries: Sequence[str], top_k: int,
                  timeout_s: float = 30.0) -> dict:
    from services.knowledge_store.client import KnowledgeStoreClient
    from services.llm_orchestration.client import LlmOrchestrationClient

    ks = KnowledgeStoreClient(ks_target, timeout_s=timeout_s)
    llm = LlmOrchestrationClient(llm_target, timeout_s=timeout_s)
    ms: dict[str, list[float]] = {k: [] for k in ("plain call", "completed call", "wait", "call", "merge", "total")}
    filters = SearchFilters()
    try:
        for i, text in enumerate(queries):
            keyword_task = asyncio.create_task(
                ks.retrieve(RetrievalRequest(tenant, text, top_k, filters, keyword=True)))
            vectors = await llm.embed([text])
            t0 = time.perf_counter()
            keyword = (await keyword_task).keyword
            wait = time.perf_counter() - t0
            timed = {}
            for variant in (("plain", "completed") if i % 2 == 0 else ("completed", "plain")):
                t0 = time.perf_counter()
                if variant == "plain":
                    plain = RetrievalRequest(tenant, text, top_k, filters, vectors=vectors)
                    timed[variant] = ((await ks.retrieve(plain)).dense, None)
                else:
                    answer = await ks.retrieve(RetrievalRequest(tenant, text, top_k, filters, vectors=vectors,
                                                                complete=True, complete_rows=keyword.row_ids))
                    timed[variant] = answer.dense, answer.completion
                timed[variant + " s"] = time.perf_counter() - t0
            merged = {}
            for variant in (("plain", "completed") if i % 2 == 0 else ("completed", "plain")):
                t0 = time.perf_counter()
                merge(timed[variant][0], keyword, completion=timed[variant][1])
                merged[variant] = time.perf_counter() - t0
            call = timed["completed s"] - timed["plain s"]
            merge_cost = merged["completed"] - merged["plain"]
            for key, seconds in (("plain call", timed["plain s"]), ("completed call", timed["completed s"]),
                                 ("wait", wait), ("call", call), ("merge", merge_cost),
                                 ("total", wait + call + merge_cost)):
                ms[key].append(seconds * 1000.0)
    finally:
        await ks.close()
        await llm.close()
    return {"queries": len(queries), "top_k": top_k, "description": DESCRIPTION,
            "ms": {k: latency_summary(v) for k, v in ms.items()}}
