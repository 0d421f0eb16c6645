"""Federated search on a BEIR dataset: one corpus split across the local store and N−1 remote
RAG MCP servers, ranked four ways, in one run.

    python -m benchmarks.federate --sources 3 --dataset ../shared/data/scifact
    nucleus bench --dataset ../shared/data/scifact --tenant fed --federate 3

Sources (real processes, every one on 127.0.0.1, ephemeral ports):
  local       a Nucleus stack (`.bench-cache/federate/local`, or with `--use-running` the running
              one): tenant `<t>-single` holds the whole evaluated corpus (the single-index
              reference), `<t>-p1of<N>` its share
  nucleus<i>  N−2 more Nucleus stacks (`.bench-cache/federate/remote<i>`), each holding one
              share in its tenant, searched over MCP (`rag_get_raw_results`: 4R scores in [0, 1])
  foreign     `benchmarks/foreign_rag.py`: another RAG server with its own analyser and BM25,
              whose hits carry raw BM25 (or, `--foreign-scale distance`, 1/(1+BM25): lower is better)
Corpus row i of the evaluated set goes to share i mod N (interleaved).

Evaluated set: the first `--queries` judged queries, every document judged for them, and
distractors (every k-th other corpus document) up to `--docs` documents; ingest is model-bound
(~35 docs/s on the reference box), so the default is a fixed subset rather than the whole
corpus; `--docs 0 --queries 0` takes everything. Stacks keep their data and a manifest per
tenant, so a re-run ingests nothing.

Rankings compared (nDCG@10 against the dataset's qrels):
  single     the single-index default: SearchAndRank over `<t>-single`
  unified    SearchAndRank over the local share with every remote source (federation: remote
             hits re-scored on the local scale, same fusion and 4R)
  raw_sort   atlas-ui-3's merge: local results by their overall score and every remote's hits
             by the remote's own score, all sorted by that number
  rrf        reciprocal-rank fusion of the per-source rankings (k = 60)
  vectors    Nucleus to Nucleus: `unified`, the Nucleus remotes' hits carrying their stored vectors
             (read from each remote's KnowledgeStore with GetEntries include_vectors, through the
             float16 wire format of federation/peer_vectors.py): scored with no embedding; the foreign
             server's hits are re-embedded as in `unified`. (The MCP `_meta` hop and the peer
             assertion it needs are covered by tests/integration/test_federation_trust.py.)
  ceiling    the best any merge could do with what the sources returned: every relevant document
             among the local store's first 50 and each remote's hits, ranked first
Also: federated latency (p50 of the whole call, the slowest source, the re-scoring) and the
re-scoring of 20 snippet-length remote hits, first seen (cold) and seen before (warm), and of 20
hits sent with their vectors (a trusted Nucleus remote of the same model): embedding calls and ms.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from benchmarks.beir import BeirDataset, load_dataset
from benchmarks.federate_rescore import (
    RESCORE_HITS,
    measure_carried,
    measure_rescoring,
    peer_hits,
    print_rescore_only,
    run_rescore_only,
)
from benchmarks.metrics import latency_summary, ndcg_at_k
from benchmarks.stack import Stack, add_running_arguments, open_stack, own_stack
from benchmarks.tenants import TenantPlan, ingest_plan

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / ".bench-cache"
RRF_K = 60
CEILING_LOCAL_K = 50          # the local store's candidates counted as "returned" for the ceiling


def evaluated_rows(ds: BeirDataset, queries: int, docs: int) -> tuple[list[str], list[int]]:
    """(query ids, corpus rows): the first `queries` judged queries, their judged documents, and
    evenly spaced distractors up to `docs` documents (0 = all)."""
    qids = ds.evaluated_query_ids[:queries] if queries else list(ds.evaluated_query_ids)
    row_of = {d.id: i for i, d in enumerate(ds.corpus)}
    judged = sorted({row_of[d] for q in qids for d in ds.qrels[q] if d in row_of})
    if not docs or docs >= len(ds.corpus):
        return qids, list(range(len(ds.corpus)))
    chosen = set(judged)
    others = [i for i in range(len(ds.corpus)) if i not in chosen]
    need = max(0, docs - len(chosen))
    step = max(1, len(others) // need) if need else 1
    chosen.update(others[::step][:need])
    return qids, sorted(chosen)


def write_foreign_corpus(ds: BeirDataset, rows: Sequence[int], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            d = ds.corpus[r]
            f.write(json.dumps({"id": d.id, "title": d.title.strip(), "text": d.text if d.text.strip() else d.title})
                    + "\n")


def start_foreign(corpus: Path, scale: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / "foreign-ready.json"
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.foreign_rag", "--corpus", str(corpus), "--scale", scale,
                             "--ready-file", str(ready)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(workdir / "foreign.log", "w"))
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the foreign RAG server did not start (see {workdir / 'foreign.log'})")
        time.sleep(0.1)
    return proc, json.loads(ready.read_text())["url"]


class WithStoredVectors:
    """A RemoteSearch whose Nucleus sources' hits carry their stored vectors and analysed terms, as
    a trusted remote Nucleus of the same model sends them: read from the remote's KnowledgeStore
    (GetEntries include_vectors, include_terms) and passed through the wire format and its checks
    (federate_rescore.peer_hits)."""

    def __init__(self, inner, stores: dict, digest: str, dimension: int) -> None:
        self.inner, self.stores, self.digest, self.dimension = inner, stores, digest, dimension

    async def __call__(self, source, query, deadline_s):
        hits = await self.inner(source, query, deadline_s)
        if source.id not in self.stores or not hits:
            return hits
        ks, tenant = self.stores[source.id]
        return await peer_hits(ks, tenant, hits, self.digest, self.dimension)


def _note(debug: str, name: str) -> int:
    """A `name=N` note of a SearchResponse's debug line."""
    for part in debug.replace(";", " ").split():
        if part.startswith(name + "="):
            return int(part.split("=", 1)[1])
    return 0


class Recorder:
    """A RemoteSearch that keeps what each source answered for the current query."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.last: dict[str, list] = {}

    async def __call__(self, source, query, deadline_s):
        hits = await self.inner(source, query, deadline_s)
        self.last[source.id] = hits
        return hits


def doc_of(artifact_id: str) -> str:
    """The dataset's doc id of a result: remote results are `<source>:<doc id>`."""
    return artifact_id.split(":", 1)[1] if ":" in artifact_id else artifact_id


def rrf(lists: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    scores: dict[str, float] = {}
    for ranking in lists:
        for rank, d in enumerate(ranking, start=1):
            scores[d] = scores.get(d, 0.0) + 1.0 / (k + rank)
    return [d for d, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))]


async def run(args: argparse.Namespace) -> dict:
    from services.knowledge_store.client import KnowledgeStoreClient
    from services.llm_orchestration.client import LlmOrchestrationClient
    from services.rag_pipeline.core import RagPipeline
    from services.rag_pipeline.federation.fanout import Federation, McpRemoteSearch
    from services.rag_pipeline.federation.peer_vectors import LocalFingerprint
    from services.rag_pipeline.federation.remote import RemotePool
    from services.rag_pipeline.federation.sources import Source, SourcesConfig
    from services.rag_pipeline.models import SearchRequest
    from shared.settings import RagPipelineSettings

    n = args.sources
    if n < 2:
        raise SystemExit("--sources: at least 2 (the local store and one remote)")
    ds = load_dataset(args.dataset, args.split)
    qids, rows = evaluated_rows(ds, args.queries, args.docs)
    shares = [rows[i::n] for i in range(n)]
    base = args.cache_dir / "federate"
    prefix = args.tenant
    single_tenant, local_tenant = f"{prefix}-single", f"{prefix}-p1of{n}"
    print(f"{ds.name}: {len(qids)} queries, {len(rows)} documents split over {n} sources "
          f"(local {len(shares[0])}, nucleus x{n - 2}, foreign {len(shares[-1])})", flush=True)

    stacks: list[Stack] = []
    procs: list[subprocess.Popen] = []
    workdir = Path(tempfile.mkdtemp(prefix="federate-"))
    try:
        t = time.perf_counter()
        local = open_stack(args, base / "local", extra_env={"NUCLEUS_LOCAL_TENANT": local_tenant})
        stacks.append(local)
        remotes: list[tuple[str, Stack, str]] = []
        for i in range(1, n - 1):
            tenant = f"{prefix}-p{i + 1}of{n}"
            stack = own_stack(base / f"remote{i}", extra_env={"NUCLEUS_LOCAL_TENANT": tenant})
            stacks.append(stack)
            remotes.append((tenant, stack, f"nucleus{i}"))
        write_foreign_corpus(ds, shares[-1], workdir / "foreign.jsonl")
        proc, foreign_url = start_foreign(workdir / "foreign.jsonl", args.foreign_scale, workdir)
        procs.append(proc)
        print(f"stacks up in {time.perf_counter() - t:.1f}s", flush=True)

        ks = KnowledgeStoreClient(local.grpc("knowledge_store"), timeout_s=args.timeout, ingest_timeout_s=600)
        llm = LlmOrchestrationClient(local.grpc("llm_orchestration"), timeout_s=args.timeout)
        ingests = [ingest_plan(ks, TenantPlan(single_tenant, ds, tuple(rows)), local.data_dir / "bench"),
                   ingest_plan(ks, TenantPlan(local_tenant, ds, tuple(shares[0])), local.data_dir / "bench")]
        remote_ks = []
        for i, (tenant, stack, _sid) in enumerate(remotes, start=1):
            client = KnowledgeStoreClient(stack.grpc("knowledge_store"), timeout_s=args.timeout, ingest_timeout_s=600)
            remote_ks.append(client)
            ingests.append(ingest_plan(client, TenantPlan(tenant, ds, tuple(shares[i])),
                                       base / f"remote{i}" / "bench"))
        t = time.perf_counter()
        outcomes = [await x for x in ingests]       # one at a time: ingest is model-bound on 2 cores
        ingest_s = time.perf_counter() - t
        for o in outcomes:
            print(f"  ingest {o.tenant}: {o.documents} docs ({o.ingested_now} now, {o.seconds:.1f}s)", flush=True)

        sources = [Source(id=sid, url=stack.services["rag_pipeline"]["mcp"], timeout_s=args.source_timeout,
                          reputation=0.5) for _t, stack, sid in remotes]
        sources.append(Source(id="foreign", url=foreign_url, timeout_s=args.source_timeout, reputation=0.5))
        config = SourcesConfig(tuple(sources), version=1, default_tenants=frozenset({local_tenant}))
        pool = RemotePool()
        recorder = Recorder(McpRemoteSearch(pool))
        settings = RagPipelineSettings(deadline_s=max(10.0, args.timeout))
        pipeline = RagPipeline(settings, ks, llm, federation=Federation(lambda: config, recorder))
        pipeline.remote_hits = args.remote_hits
        fingerprint = await LocalFingerprint(llm).get()
        stores = {sid: (client, tenant) for (tenant, _s, sid), client in zip(remotes, remote_ks)}
        with_vectors = WithStoredVectors(McpRemoteSearch(pool), stores, fingerprint.digest, fingerprint.dimension)
        peer_pipeline = RagPipeline(settings, ks, llm, federation=Federation(lambda: config, with_vectors))
        peer_pipeline.remote_hits = args.remote_hits
        peer_ms, peer_rescore_ms, peer_carried, peer_embedded = [], [], [], []

        def request(tenant: str, query: str) -> SearchRequest:
            return SearchRequest(tenant_id=tenant, query=query, top_k_final=10, top_k_initial=args.top_k_initial)

        for w in ("warm up the federation", "how are sources merged"):           # sessions, resources, caches
            await pipeline.search_and_rank(request(local_tenant, w))
        runs: dict[str, dict[str, list[str]]] = {m: {} for m in ("single", "unified", "raw_sort", "rrf", "local_only",
                                                                 "ceiling", "vectors")}
        total_ms, slowest_ms, rescore_ms, failures = [], [], [], 0
        degraded: dict[str, list[str]] = {}
        for qi, qid in enumerate(qids):
            query = ds.queries[qid]
            single = await pipeline.search_and_rank(request(single_tenant, query), plan=None)
            runs["single"][qid] = [r.artifact.artifact_id for r in single.results]
            recorder.last = {}
            t = time.perf_counter()
            unified = await pipeline.search_and_rank(request(local_tenant, query))
            total_ms.append((time.perf_counter() - t) * 1000.0)
            timings = dict(unified.timings)
            slowest_ms.append(timings.get("slowest_source", 0.0))
            rescore_ms.append(timings.get("rescore", 0.0))
            failures += sum(1 for s in unified.sources if s.failed)
            if unified.degraded:
                degraded[qid] = list(unified.degraded_reasons)
            runs["unified"][qid] = [doc_of(r.artifact.artifact_id) for r in unified.results]
            t = time.perf_counter()
            peer = await peer_pipeline.search_and_rank(request(local_tenant, query))
            peer_ms.append((time.perf_counter() - t) * 1000.0)
            peer_rescore_ms.append(dict(peer.timings).get("rescore", 0.0))
            peer_carried.append(_note(peer.debug, "remote_vectors"))
            peer_embedded.append(_note(peer.debug, "remote_embedded"))
            runs["vectors"][qid] = [doc_of(r.artifact.artifact_id) for r in peer.results]
            local_only = await pipeline.search_and_rank(replace_k(request(local_tenant, query), CEILING_LOCAL_K),
                                                        plan=None)
            local_all = [(r.artifact.artifact_id, r.overall) for r in local_only.results]
            local_list = local_all[:20]
            runs["local_only"][qid] = [d for d, _ in local_list][:10]
            remote_lists = {sid: [(doc_of(h.document_id), h.score if h.score is not None else 0.0) for h in hits]
                            for sid, hits in recorder.last.items()}
            merged = local_list + [x for hits in remote_lists.values() for x in hits]
            runs["raw_sort"][qid] = unique([d for d, _ in sorted(merged, key=lambda x: -x[1])])[:10]
            runs["rrf"][qid] = rrf([[d for d, _ in local_list]] + [[d for d, _ in hits]
                                                                   for hits in remote_lists.values()])[:10]
            runs["ceiling"][qid] = ceiling_ranking(
                [d for d, _ in local_all] + [d for hits in remote_lists.values() for d, _ in hits], ds.qrels[qid])
            if (qi + 1) % 50 == 0:
                print(f"  {qi + 1}/{len(qids)} queries", flush=True)

        quality = {m: float(np.mean([ndcg_at_k(run[q], ds.qrels[q], 10) for q in qids])) for m, run in runs.items()}

        cold, warm = await measure_rescoring(ks, llm, ds, rows, qids, local_tenant, args.rescore_rounds, args.timeout)
        carried_ms, carried_calls = await measure_carried(ks, llm, ds, rows, qids, local_tenant, args.rescore_rounds,
                                                          args.timeout)
        await pool.close()
        for client in [ks, llm, *remote_ks]:
            await client.close()
        result = {
            "dataset": ds.name, "sources": n, "queries": len(qids), "documents": len(rows),
            "shares": [len(s) for s in shares], "foreign_scale": args.foreign_scale, "ingest_s": round(ingest_s, 1),
            "remote_hits": args.remote_hits,
            "ndcg@10": {m: round(v, 4) for m, v in quality.items()},
            "unified_vs_single": round(quality["unified"] / quality["single"], 4) if quality["single"] else None,
            "unified_vs_ceiling": round(quality["unified"] / quality["ceiling"], 4) if quality["ceiling"] else None,
            "federated_ms": latency_summary(total_ms), "slowest_source_ms": latency_summary(slowest_ms),
            "rescore_ms": latency_summary(rescore_ms), "source_failures": failures,
            "degraded_queries": len(degraded), "degraded_reasons": degraded,
            "rescore_20_hits_cold_ms": latency_summary(cold), "rescore_20_hits_seen_ms": latency_summary(warm),
            "nucleus_vectors": {
                "ndcg@10": round(quality["vectors"], 4),
                "vs_single": round(quality["vectors"] / quality["single"], 4) if quality["single"] else None,
                "federated_ms": latency_summary(peer_ms), "rescore_ms": latency_summary(peer_rescore_ms),
                "remote_hits_with_vectors_per_query": round(float(np.mean(peer_carried)), 1),
                "remote_texts_embedded_per_query": round(float(np.mean(peer_embedded)), 1),
                "rescore_20_hits_ms": latency_summary(carried_ms), "rescore_20_hits_embed_calls": carried_calls},
            "per_query": {q: {m: run[q] for m, run in runs.items()} for q in qids},
            "qrels": {q: ds.qrels[q] for q in qids},
        }
        return result
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for stack in stacks:
            stack.stop()


def ceiling_ranking(returned: Sequence[str], qrels: dict[str, int]) -> list[str]:
    """The best ranking any merge could make of what the sources returned: every relevant
    document among them (the local store's first CEILING_LOCAL_K, each remote's hits), by grade."""
    found = unique([d for d in returned if qrels.get(d, 0) > 0])
    return sorted(found, key=lambda d: -qrels[d])[:10]


def replace_k(request, k: int):
    from dataclasses import replace
    return replace(request, top_k_final=k)


def unique(ids: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    return [d for d in ids if not (d in seen or seen.add(d))]


def print_report(r: dict) -> None:
    q = r["ndcg@10"]
    print(f"\nFederated search on {r['dataset']}: {r['queries']} queries, {r['documents']} documents over "
          f"{r['sources']} sources {r['shares']} (foreign scale: {r['foreign_scale']}; {r['remote_hits']} hits asked "
          f"of each remote)")
    print(f"  {'ranking':<34} nDCG@10")
    for label, key in (("(d) single index (default)", "single"), ("(a) unified (federation)", "unified"),
                       ("(b) raw-score sort (atlas-ui-3)", "raw_sort"), ("(c) RRF over sources", "rrf"),
                       ("    local share only", "local_only"),
                       ("    ceiling (what the sources returned)", "ceiling")):
        print(f"  {label:<34} {q[key]:.4f}")
    print(f"  unified / single = {r['unified_vs_single']}  (target >= 0.98); unified / ceiling = "
          f"{r['unified_vs_ceiling']}")
    f, s, rs = r["federated_ms"], r["slowest_source_ms"], r["rescore_ms"]
    print(f"  federated SearchAndRank p50 {f['p50']:.1f} ms (p95 {f['p95']:.1f}); slowest source p50 "
          f"{s['p50']:.1f} ms; re-scoring p50 {rs['p50']:.1f} ms; source failures {r['source_failures']}; "
          f"degraded answers {r['degraded_queries']}")
    c, w = r["rescore_20_hits_cold_ms"], r["rescore_20_hits_seen_ms"]
    print(f"  re-scoring {RESCORE_HITS} snippet-length hits: first seen p50 {c['p50']:.1f} ms, "
          f"seen before p50 {w['p50']:.2f} ms")
    v = r["nucleus_vectors"]
    print(f"  Nucleus->Nucleus with vectors: nDCG@10 {v['ndcg@10']:.4f} (vs single {v['vs_single']}); "
          f"{v['remote_hits_with_vectors_per_query']} remote hits/query with vectors, "
          f"{v['remote_texts_embedded_per_query']} remote texts embedded/query (the foreign server's); "
          f"re-scoring p50 {v['rescore_ms']['p50']:.1f} ms; {RESCORE_HITS} hits with vectors: p50 "
          f"{v['rescore_20_hits_ms']['p50']:.2f} ms, {v['rescore_20_hits_embed_calls']} embedding calls")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queries", type=int, default=300, help="judged queries evaluated (default 300; 0 = all)")
    p.add_argument("--docs", type=int, default=1200,
                   help="documents: the queries' judged ones plus distractors (default 1200; 0 = whole corpus)")
    p.add_argument("--foreign-scale", choices=("bm25", "distance"), default="bm25",
                   help="the foreign server's score scale (default bm25)")
    p.add_argument("--source-timeout", type=float, default=10.0, help="per-source deadline, s (default 10)")
    p.add_argument("--remote-hits", type=int, default=20, help="hits asked of each remote source (default 20)")
    p.add_argument("--rescore-rounds", type=int, default=20, help="rounds of the 20-hit re-scoring measurement")
    p.add_argument("--rescore-only", action="store_true",
                   help="only the 20-hit re-scoring measurements (re-embedded, and sent with vectors), on the local "
                        "stack (after a full run)")
    p.add_argument("--in-process", action="store_true",
                   help="with --rescore-only: the KnowledgeStore in this process, through the in-process client "
                        "single mode uses (else the stack's, over gRPC)")
    p.add_argument("--federate-tenant", dest="tenant", default="fed", help="tenant prefix (default fed)")
    add_running_arguments(p)


def run_federate(args: argparse.Namespace) -> int:
    args.cache_dir = Path(getattr(args, "cache_dir", DEFAULT_CACHE)).resolve()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if getattr(args, "rescore_only", False):
        ds = load_dataset(args.dataset, args.split)
        print_rescore_only(asyncio.run(run_rescore_only(args, ds, *evaluated_rows(ds, args.queries, args.docs))),
                           args.rescore_rounds)
        return 0
    result = asyncio.run(run(args))
    print_report(result)
    out = args.cache_dir / "federate" / "result.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"  written to {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sources", type=int, default=3, help="sources, the local store included (default 3)")
    p.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    p.add_argument("--split", default="test")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--top-k-initial", type=int, default=50, help="candidates per local leg (default 50)")
    p.add_argument("--timeout", type=float, default=30.0, help="client deadline, s (default 30)")
    add_arguments(p)
    raise SystemExit(run_federate(p.parse_args()))


if __name__ == "__main__":
    main()
