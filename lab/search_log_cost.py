"""What the search log costs (services/knowledge_store/search_log.py, services/rag_pipeline/feedback.py).

    python -m lab.search_log_cost [--docs 200] [--queries 300] [--writes 2000] [--keep 1000]

1. The store's write of one search (10 results) in the embedded backend (SQLite, WAL,
   synchronous=FULL: one fsync per write): p50 / p95 over `--writes` writes, with the log cap
   lowered to `--keep` so pruning runs; the rows left at the end show the bound holds
   (at most keep + PRUNE_EVERY).
2. SearchAndRank in one process as `nucleus up --mode single` composes it (the real store and
   LlmOrchestration with its local model, in-process clients; `--docs` documents): p50 of
   `RagPipeline.search` for a verified user (answers get a search id, the log is written beside
   the answer) against `search_and_rank` (no search id), the two alternated per query.

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from services.knowledge_store import main as ks_main
from services.knowledge_store import search_log
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.inprocess_client import InProcessLlmOrchestrationClient
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import SearchRequest
from shared.inprocess import InProcessCaller
from shared.identity import Principal
from shared.records import ArtifactMeta, DocumentIn, SearchLogItem, SearchLogRecord
from shared.settings import KnowledgeStoreSettings, LlmOrchestrationSettings, RagPipelineSettings

WORDS = ("battery controller reset firmware hotel travel expense policy turbine gearbox inspection sensor "
         "calibration network outage incident report safety procedure wheel motor charging cycle").split()


def _text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(60))


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def main(args: argparse.Namespace) -> dict:
    search_log.MAX_SEARCHES_PER_TENANT = args.keep
    with tempfile.TemporaryDirectory() as tmp:
        core = LlmOrchestrator(LlmOrchestrationSettings())
        await core.start()
        model = InProcessLlmOrchestrationClient(core, InProcessCaller(None, "llm_orchestration", False))
        _, store = ks_main.compose(KnowledgeStoreSettings(data_dir=Path(tmp)), stdio=False, llm=model)
        await store.ingest("t", "", [DocumentIn(artifact=ArtifactMeta(artifact_id=f"d{i}", title=f"Doc {i}"),
                                                content=_text(i), content_type="text/plain")
                                     for i in range(args.docs)])
        writes = []
        for n in range(args.writes):
            record = SearchLogRecord("t", f"lab{n:020d}", "alice", int(time.time()),
                                     hashlib.sha256(str(n).encode()).hexdigest(),
                                     tuple(SearchLogItem(f"d{k}#0", f"d{k}", k + 1) for k in range(10)))
            t0 = time.perf_counter()
            await store.record_search(record)
            writes.append((time.perf_counter() - t0) * 1000.0)
        db = sqlite3.connect(Path(tmp) / "tenants" / "t" / "store.sqlite")
        rows = db.execute("SELECT count(*) FROM searches").fetchone()[0]
        db.close()

        knowledge = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
        pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=model)
        alice = Principal(tenant_id="t", user_id="alice", auth_method="api_key")
        logged, plain = [], []
        for q in range(args.queries):
            request = SearchRequest(tenant_id="t", query=" ".join(WORDS[q % len(WORDS):][:3]) or "battery")
            for fn, out in ((lambda: pipeline.search(request, alice), logged),
                            (lambda: pipeline.search_and_rank(request), plain)):
                t0 = time.perf_counter()
                await fn()
                out.append((time.perf_counter() - t0) * 1000.0)
        await pipeline.search_log.close()
        store.close()
    return {"write_p50_ms": round(statistics.median(writes), 3), "write_p95_ms": round(_pct(writes, 0.95), 3),
            "writes": args.writes, "keep": args.keep, "rows_left": rows, "bound": args.keep + search_log.PRUNE_EVERY,
            "search_logged_p50_ms": round(statistics.median(logged), 3),
            "search_plain_p50_ms": round(statistics.median(plain), 3), "queries": args.queries}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--keep", type=int, default=1000)
    figures = asyncio.run(main(parser.parse_args()))
    print(json.dumps(figures))
