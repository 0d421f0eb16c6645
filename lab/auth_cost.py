"""What zero trust inside the stack costs SearchAndRank, measured in one run.

Two stacks side by side on this machine, the same documents in each: one with authentication
off (the development stack), one with it on everywhere (`NUCLEUS_RAG_REQUIRE_AUTH=1`: the
caller's API key verified by RAGPipeline, every internal call signed — an on-behalf-of
assertion per user — and verified by KnowledgeStore and LlmOrchestration). The queries go to
both in turn, alternating which goes first, so drift of the machine's speed hits both alike.

    .venv/bin/python -m lab.auth_cost --dataset ../shared/data/scifact [--docs 1000] [--queries 200]

Prints p50 / p95 of SearchAndRank (client clock, agent-sized 50/10) for both and the
difference; `--json PATH` writes them. Not part of `make test`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import tempfile
import time
from pathlib import Path

from benchmarks.beir import load_dataset
from benchmarks.metrics import latency_summary
from benchmarks.stack import own_stack
from benchmarks.tenants import document_for
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from services.knowledge_store.client import KnowledgeStoreClient
from shared.auth.api_keys import hash_key
from shared.auth.service_auth import operator_interceptors
from shared.grpc_client import aio_channel, call

TENANT = "bench"


def _auth_config(directory: Path) -> tuple[Path, str]:
    key = f"nrk_bench_{secrets.token_urlsafe(24)}"
    path = directory / "auth.json"
    path.write_text(json.dumps({"version": 1, "api_keys": [
        {"key_id": "k-bench", "sha256": hash_key(key), "tenant": TENANT, "user": "bench", "groups": []}]}))
    return path, key


async def _ingest(target: str, docs: list, interceptors: list | None) -> None:
    client = KnowledgeStoreClient(target, interceptors=interceptors)
    try:
        for i in range(0, len(docs), 64):
            await client.ingest(TENANT, "", docs[i:i + 64])
    finally:
        await client.close()


async def measure(args: argparse.Namespace, work: Path) -> dict:
    dataset = load_dataset(args.dataset)
    docs = [document_for(dataset, row) for row in range(min(args.docs, len(dataset.corpus)))]
    texts = [dataset.queries[q] for q in dataset.evaluated_query_ids][:args.queries]
    config, key = _auth_config(work)
    stacks = {"off": own_stack(work / "off"),
              "on": own_stack(work / "on", extra_env={
                  "NUCLEUS_RAG_REQUIRE_AUTH": "1", "NUCLEUS_RAG_AUTH_CONFIG": str(config),
                  # one benchmark key sends every query: lift the per-principal rate limit
                  "NUCLEUS_RAG_RATE_LIMIT_PER_S": "1000000", "NUCLEUS_RAG_RATE_LIMIT_BURST": "1000000"})}
    try:
        operator = operator_interceptors(work / "on" / "identity", "knowledge_store")
        assert operator is not None, "the authenticated stack made no operator key"
        await _ingest(stacks["off"].grpc("knowledge_store"), docs, None)
        await _ingest(stacks["on"].grpc("knowledge_store"), docs, operator)
        channels = {name: aio_channel(s.grpc("rag_pipeline")) for name, s in stacks.items()}
        stubs = {name: rag_grpc.RagPipelineStub(c) for name, c in channels.items()}
        metadata = {"off": None, "on": (("authorization", f"Bearer {key}"),)}
        timings: dict[str, list[float]] = {"off": [], "on": []}

        async def one(name: str, text: str) -> float:
            request = rag_pb.SearchAndRankRequest(tenant_id=TENANT if name == "off" else "", user_query_text=text,
                                                  top_k_initial_retrieve=50, top_k_final_rank=10)
            started = time.perf_counter()
            response = await call(stubs[name].SearchAndRank, request, timeout=30, service="RagPipeline",
                                  metadata=metadata[name])
            assert response.results and not response.degraded, f"{name}: {response.degraded_reasons}"
            return (time.perf_counter() - started) * 1000

        for text in texts[:10]:                                   # warm-up, not counted
            for name in ("off", "on"):
                await one(name, text)
        for i, text in enumerate(texts):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for name in order:
                timings[name].append(await one(name, text))
        for channel in channels.values():
            await channel.close()
    finally:
        for stack in stacks.values():
            stack.stop()
    out = {"docs": len(docs), "queries": len(texts)}
    for name, values in timings.items():
        summary = latency_summary(values)
        out[name] = {"p50_ms": round(summary["p50"], 2), "p95_ms": round(summary["p95"], 2)}
    out["p50_delta_ms"] = round(out["on"]["p50_ms"] - out["off"]["p50_ms"], 2)
    out["p50_ratio"] = round(out["on"]["p50_ms"] / out["off"]["p50_ms"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.auth_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=Path("../shared/data/scifact"))
    parser.add_argument("--docs", type=int, default=1000, help="documents ingested into each stack")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nucleus-auth-cost-") as work:
        out = asyncio.run(measure(args, Path(work)))
    print(f"SearchAndRank, {out['queries']} queries over {out['docs']} documents, agent-sized 50/10, same run:")
    for name, label in (("off", "auth off"), ("on", "auth on (user key + signed service calls)")):
        print(f"  {label:45s} p50 {out[name]['p50_ms']:7.2f} ms   p95 {out[name]['p95_ms']:7.2f} ms")
    print(f"  difference at p50: {out['p50_delta_ms']:+.2f} ms ({out['p50_ratio']:.3f}x)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
