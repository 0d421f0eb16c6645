"""Re-scoring remote hits on the local scale, measured (`python -m benchmarks.federate --rescore-only`).

Per round, 20 remote hits and one evaluated query:

    re-embedded   snippet-length texts (the first 300 characters of a SciFact abstract) as a
                  foreign server returns them: first seen (a fresh cache, texts new to the
                  model), then the same hits again (cached)
    vectors       the tenant's own stored chunks as a trusted remote Nucleus of the same model
                  sends them (GetEntries include_vectors and include_terms, through the wire
                  format and its checks: peer_vectors.encode / decode / keyword_facts), scored
                  two ways in the same round: with the analysed terms the remote sends (BM25
                  from them, no text read: what a peer Nucleus gets) and without them (the texts
                  analysed by ScoreKeywords, as before the terms travelled)

`--in-process` scores against the KnowledgeStore in this process, through the in-process client
`nucleus up --mode single` uses (its own data directory under the cache, the same tenant plan,
ingested once with the stack's LlmOrchestration); else through the stack's gRPC KnowledgeStore
(what split mode pays). Figures only: nothing is asserted here.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Sequence

from benchmarks.beir import BeirDataset
from benchmarks.metrics import latency_summary
from benchmarks.tenants import TenantPlan, ingest_plan

SNIPPET_CHARS = 300
RESCORE_HITS = 20


async def peer_hits(ks, tenant: str, hits, digest: str, dimension: int) -> list:
    """`hits` (RemoteHits of entries `ks` holds for `tenant`) as a trusted remote Nucleus of the
    same model sends them: each with its stored vector, analysed terms and richness, through the
    wire format and the receiving side's checks."""
    from services.rag_pipeline.federation.peer_vectors import (
        VECTORS_META, decode, encode_entries, keyword_facts, with_vectors)
    got = await ks.get_peer_entries(tenant, [h.id for h in hits])
    meta = {VECTORS_META: encode_entries(got, digest, dimension) or {}}
    sent, refused = decode(meta, digest, dimension, {h.id for h in hits})
    if refused:
        raise RuntimeError(refused)
    return with_vectors(hits, sent, keyword_facts(meta, sent))


async def _timed_rescore(rescorer, tenant: str, query: str, qv, hits, timeout_s: float):
    """One re-scoring of `hits` for the query: (its result, wall ms)."""
    t = time.perf_counter()
    got = await rescorer.rescore(tenant, [query], qv, hits, timeout_s=timeout_s)
    return got, (time.perf_counter() - t) * 1000.0


async def _round_query(llm, ds: BeirDataset, qids: Sequence[str], rnd: int):
    """The query of round `rnd` (the evaluated queries in turn) and its vectors."""
    query = ds.queries[qids[rnd % len(qids)]]
    return query, await llm.embed([query])


async def measure_rescoring(ks, llm, ds: BeirDataset, rows: Sequence[int], qids: Sequence[str], tenant: str,
                            rounds: int, timeout_s: float, parts: dict[str, list[float]] | None = None
                            ) -> tuple[list[float], list[float]]:
    """Re-scoring 20 snippet-length remote hits, ms per round: first seen (a fresh cache, texts
    new to the model), then the same hits again."""
    from services.rag_pipeline.federation.hits import RemoteHit
    from services.rag_pipeline.federation.rescore import Rescorer

    rescorer = Rescorer(ks, llm)
    cold, warm = [], []
    for rnd in range(rounds):
        chunk = list(rows[rnd * RESCORE_HITS:(rnd + 1) * RESCORE_HITS])
        if len(chunk) < RESCORE_HITS:
            break
        hits = [RemoteHit("bench", ds.corpus[r].id, ds.corpus[r].text[:SNIPPET_CHARS], title=ds.corpus[r].title)
                for r in chunk]
        query, qv = await _round_query(llm, ds, qids, rnd)
        first, ms = await _timed_rescore(rescorer, tenant, query, qv, hits, timeout_s)
        cold.append(ms)
        if parts is not None:
            parts.setdefault("embed_ms", []).append(first.embed_ms)
            parts.setdefault("keywords_ms", []).append(first.keywords_ms)
        again, ms = await _timed_rescore(rescorer, tenant, query, qv, hits, timeout_s)
        warm.append(ms)
        if again.embedded:
            raise RuntimeError("hits seen before were embedded again")
    return cold, warm


async def measure_carried(ks, llm, ds: BeirDataset, rows: Sequence[int], qids: Sequence[str], tenant: str,
                          rounds: int, timeout_s: float, parts: dict[str, list[float]] | None = None
                          ) -> tuple[list[float], int]:
    """Re-scoring 20 hits a trusted Nucleus remote of the same model sends with their vectors and
    analysed terms (the local share's own entries), ms per round, and the embedding calls made (0
    expected). `parts` gets, per round, the ScoreKeywords call and the rest, and the same hits
    scored without the terms (`texts_ms`: their texts analysed by ScoreKeywords)."""
    from services.rag_pipeline.federation.hits import RemoteHit
    from services.rag_pipeline.federation.peer_vectors import LocalFingerprint
    from services.rag_pipeline.federation.rescore import Rescorer

    fp = await LocalFingerprint(llm).get()
    counting = _CountingModel(llm)
    rescorer = Rescorer(ks, counting, keyword_cache=False)
    ids = [f"{ds.corpus[r].id}#0" for r in rows]
    held: list = []                             # the tenant's entries, as RemoteHits
    for i in range(0, len(ids), 200):
        found = await ks.get_entries(tenant, ids[i:i + 200])
        held += [RemoteHit("bench", h.entry.id, h.entry.text, title=h.artifact.title, context=h.entry.headline)
                 for h in found]
    if len(held) < RESCORE_HITS:
        raise RuntimeError(f"the tenant holds {len(held)} of the entries, {RESCORE_HITS} needed")
    out: list[float] = []
    for rnd in range(rounds):
        pick = [held[(rnd * RESCORE_HITS + j) % len(held)] for j in range(RESCORE_HITS)]
        query, qv = await _round_query(llm, ds, qids, rnd)
        with_terms = await peer_hits(ks, tenant, pick, fp.digest, fp.dimension)
        texts_only = [replace(h, terms=None) for h in with_terms]            # the same hits, text analysed here
        got, ms = await _timed_rescore(rescorer, tenant, query, qv, with_terms, timeout_s)
        out.append(ms)
        plain, plain_ms = await _timed_rescore(rescorer, tenant, query, qv, texts_only, timeout_s)
        if got.carried != RESCORE_HITS or got.analysed != RESCORE_HITS or plain.analysed:
            raise RuntimeError(f"{got.carried} / {got.analysed} of {RESCORE_HITS} hits with vectors / terms")
        if parts is not None:
            parts.setdefault("keywords_ms", []).append(got.keywords_ms)       # the ScoreKeywords call
            parts.setdefault("local_ms", []).append(got.total_ms - got.keywords_ms)   # dense + bookkeeping
            parts.setdefault("texts_ms", []).append(plain_ms)
            parts.setdefault("texts_keywords_ms", []).append(plain.keywords_ms)
    return out, counting.embed_calls


class _CountingModel:
    """The LanguageModel, counting embed calls."""

    def __init__(self, llm) -> None:
        self._llm, self.embed_calls = llm, 0

    async def embed(self, texts, **kw):
        self.embed_calls += 1
        return await self._llm.embed(texts, **kw)


async def _in_process_store(args: argparse.Namespace, llm, plan: TenantPlan):
    """The KnowledgeStore in this process, behind the in-process client single mode uses, holding
    `plan` (ingested once through `llm`, kept under the cache directory)."""
    from services.knowledge_store.backend import open_store
    from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
    from services.knowledge_store.main import GrpcEmbedder
    from shared.inprocess import InProcessCaller
    from shared.settings import KnowledgeStoreSettings

    directory = args.cache_dir / "federate" / "in-process"
    settings = KnowledgeStoreSettings(data_dir=directory / "knowledge_store")
    store = open_store(settings, GrpcEmbedder(llm, 120.0))
    client = InProcessKnowledgeStoreClient(store, InProcessCaller(service=None, callee="knowledge_store",
                                                                  require_auth=False), timeout_s=args.timeout)
    await ingest_plan(client, plan, directory / "bench")
    return store, client


async def run_rescore_only(args: argparse.Namespace, ds: BeirDataset, qids: Sequence[str], rows: Sequence[int]
                           ) -> dict:
    """Only the re-scoring measurements, on the local stack's share of `rows` (the evaluated
    queries and documents of a full run: federate.evaluated_rows)."""
    from benchmarks.stack import open_stack
    from services.knowledge_store.client import KnowledgeStoreClient
    from services.llm_orchestration.client import LlmOrchestrationClient

    tenant = f"{args.tenant}-p1of{args.sources}"
    plan = TenantPlan(tenant, ds, tuple(rows[0::args.sources]))
    stack = open_stack(args, args.cache_dir / "federate" / "local")
    store = None
    try:
        llm = LlmOrchestrationClient(stack.grpc("llm_orchestration"), timeout_s=args.timeout)
        if getattr(args, "in_process", False):
            store, ks = await _in_process_store(args, llm, plan)
        else:
            ks = KnowledgeStoreClient(stack.grpc("knowledge_store"), timeout_s=args.timeout)
            await ingest_plan(ks, plan, stack.data_dir / "bench")
        await measure_rescoring(ks, llm, ds, rows[::-1], qids, tenant, 3, args.timeout)     # warm-up: other texts
        parts: dict[str, list[float]] = {}
        cold, warm = await measure_rescoring(ks, llm, ds, rows, qids, tenant, args.rescore_rounds, args.timeout,
                                             parts)
        carried_parts: dict[str, list[float]] = {}
        carried, calls = await measure_carried(ks, llm, ds, rows, qids, tenant, args.rescore_rounds, args.timeout,
                                               carried_parts)
        await ks.close()
        await llm.close()
        return {"knowledge_store": "in process" if store is not None else "gRPC",
                "rescore_20_hits_cold_ms": latency_summary(cold), "rescore_20_hits_seen_ms": latency_summary(warm),
                **{f"rescore_20_hits_{k}": latency_summary(v) for k, v in parts.items()},
                "vectors_20_hits_ms": latency_summary(carried), "vectors_20_hits_embed_calls": calls,
                **{f"vectors_20_hits_{k}": latency_summary(v) for k, v in carried_parts.items()}}
    finally:
        if store is not None:
            store.close()
        stack.stop()


def print_rescore_only(result: dict, rounds: int) -> None:
    c, w = result["rescore_20_hits_cold_ms"], result["rescore_20_hits_seen_ms"]
    e, k = result["rescore_20_hits_embed_ms"], result["rescore_20_hits_keywords_ms"]
    print(f"KnowledgeStore {result['knowledge_store']}; re-scoring {RESCORE_HITS} snippet-length hits ({rounds} "
          f"rounds): first seen p50 {c['p50']:.1f} ms (p95 {c['p95']:.1f}; of which the embed call p50 "
          f"{e['p50']:.1f} ms, ScoreKeywords p50 {k['p50']:.1f} ms), seen before p50 {w['p50']:.2f} ms")
    v, vk, vl, t, tk = (result[f"vectors_20_hits_{x}"]
                        for x in ("ms", "keywords_ms", "local_ms", "texts_ms", "texts_keywords_ms"))
    print(f"re-scoring {RESCORE_HITS} hits a trusted Nucleus remote sends with their vectors and analysed terms: "
          f"p50 {v['p50']:.2f} ms (p95 {v['p95']:.2f}; ScoreKeywords p50 {vk['p50']:.2f} ms, the rest p50 "
          f"{vl['p50']:.3f} ms), {result['vectors_20_hits_embed_calls']} embedding calls; the same hits without "
          f"the terms (texts analysed by ScoreKeywords) p50 {t['p50']:.2f} ms (ScoreKeywords {tk['p50']:.2f} ms): "
          f"{t['p50'] / v['p50'] if v['p50'] else float('nan'):.1f}x")
