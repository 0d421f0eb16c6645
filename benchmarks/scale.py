"""One-node scale of the KnowledgeStore: big tenants (10k / 100k / 1M chunks) and many small ones
(1,000 × 1,000 chunks), with persisted indexes, lazy tenants and the memory budget.

    .venv/bin/python -m benchmarks.scale                          # 10k, 100k, 1M + 1,000 × 1,000
    .venv/bin/python -m benchmarks.scale --sizes 10000 --small-tenants 0 --no-grpc   # quick
    .venv/bin/python -m benchmarks.scale --out docs        # also scale.json + PNG curves in docs/
    .venv/bin/python -m benchmarks.scale --vectors isotropic --sizes 1000000 --small-tenants 0 \
        --ef-sweep 128,256,512,768,1024 --spectrum            # the pessimistic generator, recall by efSearch
    nucleus bench --scale [same options]

Synthetic tenants, written straight through the store's storage layer (`storage.entries.
replace_artifact` in bulk transactions of the tenant's SQLite — not through the embedding
model, which would take ~7 hours for 1M texts here), then opened by the real KnowledgeStore:

    text     each chunk: two consecutive sentences of a SciFact document (`../shared/data/scifact/
             corpus.jsonl`, split at sentence ends) plus two sentences of random other documents;
             the title is the first document's. Analysed terms come from the store's analyser
             (analysis.py), per sentence, cached.
    vectors  the first 5,183 chunks of a tenant carry the real all-MiniLM-L6-v2 vectors of the
             SciFact documents (`.bench-cache/scifact_minilm.npy`, encoded on first use by
             `scale_data.build_vectors`, or the baseline's cache); every other chunk:
             normalise(v[a] + BLEND · v[b] + e),
             a and b random SciFact documents (a = the document its sentences come from),
             BLEND = 0.35: clustered around the real vectors like chunks of related documents,
             never duplicates. The perturbation e (`--vectors`), of the same expected energy
             E|e|² = NOISE² · 384 (NOISE = 0.03, |e| ≈ 0.59) either way:
               span       (default) e = Σ_j z_j · c · σ_j · u_j over the top SPAN_COMPONENTS
                          principal directions u_j of the real SciFact vectors, σ_j their standard
                          deviations there, z_j ~ N(0, 1), c scaling E|e|² to the energy above:
                          perturbations shaped like the real embeddings' spectrum (they vary
                          along few directions; 90 % of the real vectors' variance lies in 166
                          of the 384 dimensions).
               isotropic  e ~ N(0, NOISE² · I): the same energy spread over all 384 dimensions,
                          a higher intrinsic dimension than real embeddings have and more
                          near-ties inside each cluster — the pessimistic case for HNSW.
             Cached separately (`big-N-span`, `big-N`).
    queries  the 300 SciFact test queries: their real MiniLM vectors
             (`.bench-cache/scifact_minilm_queries.npy`) for the vector leg, their text for the
             keyword leg.
    chunks   10 per artifact; tags "t0".."t9" by artifact (a 10 % filter).

Recall@10 is measured against exact search (numpy inner products) on the same vectors, with
the near-ties among the exact neighbours (gap between the 10th and 11th) and, for HNSW, recall
and latency at each `--ef-sweep` efSearch; `--spectrum` compares the principal components of the
real and the synthetic vectors. HNSW settings: `NUCLEUS_KS_HNSW_*` or `--hnsw-*`.
Latencies: in-process (`KnowledgeStore.candidates_by_vector` / `candidates_by_filters`, top 50,
the pipeline's legs: FAISS or BM25 plus the SQLite row reads) and the indexes alone, then
through gRPC against a KnowledgeStore process started from `services.knowledge_store.main`
(time from spawn to SERVING, first query on the big tenant = opening it from the saved files,
then p50/p99 per leg, resident memory from /proc). The generated stores are cached under
`.bench-cache/scale/` (git-ignored; `--rebuild` regenerates). Prints a table and one JSON line;
with `--out` also writes the JSON and PNG curves there.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.metrics import percentile as pct, rss_mb
from benchmarks import scale_data
from benchmarks.scale_data import (SCALE_CACHE, SEED, SPAN_COMPONENTS, TOP_K, VECTOR_GENERATORS, Corpus, NoEmbedder,
                                   SpanBasis, describe_generator, settings, synthetic_vectors, write_tenant)
from benchmarks.scale_report import plots, table

if TYPE_CHECKING:           # the heavy imports wait for a run (`nucleus bench` registers the options)
    from services.knowledge_store.embedded.core import KnowledgeStore


def _imports() -> None:
    """The store's modules, imported on first use (module names below are these globals)."""
    global vector_index, analyse, KnowledgeStore, exact_top_k, SearchFilters, RetrievalRequest
    global KnowledgeStoreSettings, F
    from services.knowledge_store.embedded import vector_index
    from services.knowledge_store.embedded.core import KnowledgeStore
    from services.knowledge_store.embedded.vector_index import exact_top_k
    from shared.analysis import analyse
    from shared.records import RetrievalRequest, SearchFilters
    from shared.settings import KnowledgeStoreSettings
    F = SearchFilters()


async def legs(call_vector, call_keyword, corpus: Corpus, n_queries: int) -> dict:
    """p50/p99 (ms) of the vector and keyword legs, one query at a time (after one warm-up)."""
    vec, kw = [], []
    queries = list(range(min(n_queries, len(corpus.query_texts))))
    await call_vector(corpus.query_vectors[0])
    await call_keyword(corpus.query_texts[0])
    for i in queries:
        t = time.perf_counter()
        await call_vector(corpus.query_vectors[i])
        vec.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await call_keyword(corpus.query_texts[i])
        kw.append((time.perf_counter() - t) * 1000)
    return {"vector_p50_ms": round(pct(vec, 50), 2), "vector_p99_ms": round(pct(vec, 99), 2),
            "keyword_p50_ms": round(pct(kw, 50), 2), "keyword_p99_ms": round(pct(kw, 99), 2)}


def recall_and_index_latency(tenant, corpus: Corpus, n_queries: int) -> dict:
    """Recall@10 of the tenant's index against exact search on the same vectors, and the
    latency of the two indexes alone (no SQLite)."""
    index, keywords = tenant.index, tenant.keywords
    ids = np.asarray(vector_index.faiss.vector_to_array(index._index.id_map)) if index.kind != "ivf" else None
    vectors = index._reconstruct(ids)
    q = corpus.query_vectors[:n_queries]
    recalls, vec_ms, kw_ms = [], [], []
    truth = np.concatenate([exact_top_k(q[i:i + 32], ids, vectors, 10)[1] for i in range(0, len(q), 32)])
    for row in range(len(q)):
        t = time.perf_counter()
        _, got = index.search(q[row:row + 1], 10)
        vec_ms.append((time.perf_counter() - t) * 1000)
        recalls.append(len(set(got[0].tolist()) & set(truth[row].tolist())) / 10)
        terms = analyse(corpus.query_texts[row])
        t = time.perf_counter()
        keywords.search(terms, TOP_K)
        kw_ms.append((time.perf_counter() - t) * 1000)
    del vectors
    return {"recall_at_10": round(float(np.mean(recalls)), 4), "faiss_p50_ms": round(pct(vec_ms, 50), 2),
            "faiss_p99_ms": round(pct(vec_ms, 99), 2), "bm25_p50_ms": round(pct(kw_ms, 50), 2),
            "bm25_p99_ms": round(pct(kw_ms, 99), 2)}


def ef_sweep(index, corpus: Corpus, n_queries: int, efs: list[int]) -> list[dict]:
    """How close the exact neighbours lie (the gap between the 10th and 11th: near-ties make any
    approximate top 10 differ from the exact one), then recall@10 and latency of the tenant's HNSW
    index alone at several efSearch values (the same saved graph; efSearch applies at search
    time only)."""
    ids = np.asarray(vector_index.faiss.vector_to_array(index._index.id_map))
    vectors = index._reconstruct(ids)
    q = corpus.query_vectors[:n_queries]
    exact = [exact_top_k(q[i:i + 32], ids, vectors, 11) for i in range(0, len(q), 32)]
    del vectors
    scores = np.concatenate([s for s, _ in exact])
    truth = np.concatenate([labels for _, labels in exact])[:, :10]
    gap = scores[:, 9] - scores[:, 10]          # 10th vs 11th exact neighbour: near-ties
    rows: list[dict] = [{"near_ties": {"gap_10_11_below_1e-3": round(float(np.mean(gap < 1e-3)), 3),
                                       "gap_10_11_below_1e-4": round(float(np.mean(gap < 1e-4)), 3),
                                       "median_gap_10_11": round(float(np.median(gap)), 5),
                                       "median_spread_1_10": round(float(np.median(scores[:, 0] - scores[:, 9])), 4)}}]
    for ef in efs:
        params = vector_index.faiss.SearchParametersHNSW(efSearch=max(ef, 10))
        recalls, ms = [], []
        for row in range(len(q)):
            t = time.perf_counter()
            _, got = index._index.search(q[row:row + 1], 10, params=params)
            ms.append((time.perf_counter() - t) * 1000)
            recalls.append(len(set(got[0].tolist()) & set(truth[row].tolist())) / 10)
        rows.append({"ef_search": ef, "recall_at_10": round(float(np.mean(recalls)), 4),
                     "faiss_p50_ms": round(pct(ms, 50), 2), "faiss_p99_ms": round(pct(ms, 99), 2)})
    return rows


def spectrum(corpus: Corpus, vectors: str, components: int = SPAN_COMPONENTS, sample: int = 100_000) -> dict:
    """How many directions the vectors vary along: principal components holding 90 % of the
    variance and the participation ratio (Σλ)²/Σλ² of the real SciFact vectors and of `sample`
    synthetic ones, and the local dimension (components holding 90 % of the variance of 50
    nearest neighbours, median over 100 points of the sample)."""
    def summary(x: np.ndarray) -> dict:
        lam = np.linalg.svd(x - x.mean(axis=0), compute_uv=False) ** 2
        cum = np.cumsum(lam) / lam.sum()
        return {"components_90pct": int(np.searchsorted(cum, 0.9)) + 1,
                "participation_ratio": round(float(lam.sum() ** 2 / (lam ** 2).sum()), 1)}

    rng = np.random.default_rng(SEED)
    n_real = len(corpus.vectors)
    basis = SpanBasis(corpus.vectors, components) if vectors == "span" else None
    x = synthetic_vectors(corpus, rng, rng.integers(0, n_real, sample), n_real, basis)
    local = []
    for i in rng.choice(sample, 100, replace=False):
        near = x[np.argpartition(-(x @ x[i]), 50)[:50]]
        lam = np.linalg.svd(near - near.mean(axis=0), compute_uv=False) ** 2
        local.append(int(np.searchsorted(np.cumsum(lam) / lam.sum(), 0.9)) + 1)
    return {"real": summary(corpus.vectors), vectors: {**summary(x), "sample": sample,
                                                       "local_components_90pct": float(np.median(local))}}


# -- one big tenant --------------------------------------------------------------------------

def hnsw_settings(args) -> dict:
    """The HNSW settings of this run (`NUCLEUS_KS_HNSW_*` or the options), as the store reads them."""
    base = KnowledgeStoreSettings()
    return {"hnsw_m": args.hnsw_m or base.hnsw_m,
            "hnsw_ef_construction": args.hnsw_ef_construction or base.hnsw_ef_construction,
            "hnsw_ef_search": args.hnsw_ef_search or base.hnsw_ef_search}


def store_dir(size: int, vectors: str, components: int = SPAN_COMPONENTS) -> Path:
    """The cached store of one big tenant (the isotropic ones keep their original name)."""
    if vectors == "isotropic":
        return SCALE_CACHE / f"big-{size}"
    return SCALE_CACHE / (f"big-{size}-span" + ("" if components == SPAN_COMPONENTS else f"{components}"))


async def big_tenant(size: int, corpus: Corpus, args) -> dict:
    data_dir = store_dir(size, args.vectors, args.span_components).resolve()
    tenant = "big"
    hnsw = hnsw_settings(args)
    built_with = {k: hnsw[k] for k in ("hnsw_m", "hnsw_ef_construction")}
    out: dict = {"chunks": size, "vectors": args.vectors, **hnsw}
    marker, written = data_dir / "generated.json", data_dir / "written.json"
    stale = marker.exists() and json.loads(marker.read_text()).get("hnsw", {"hnsw_m": 32,
                                                                            "hnsw_ef_construction": 80}) != built_with
    if args.rebuild or stale or not marker.exists():
        if args.rebuild or not written.exists():        # the SQLite rows, then the indexes
            shutil.rmtree(data_dir, ignore_errors=True)
            print(f"[{size:,}] writing {size:,} chunks through the storage layer ({args.vectors} vectors) …",
                  flush=True)
            written.parent.mkdir(parents=True, exist_ok=True)
            basis = SpanBasis(corpus.vectors, args.span_components) if args.vectors == "span" else None
            written.write_text(json.dumps(write_tenant(data_dir, tenant, size, corpus, seed=SEED, basis=basis)))
        else:
            shutil.rmtree(data_dir / "tenants" / tenant / "derived", ignore_errors=True)
        out["write"] = json.loads(written.read_text())
        print(f"[{size:,}] building the indexes from SQLite (HNSW M {hnsw['hnsw_m']}, efConstruction "
              f"{hnsw['hnsw_ef_construction']}) …", flush=True)
        # first open: the indexes are built from SQLite (what every start cost before they were
        # saved), with both cores for the HNSW build; closing saves them
        vector_index.set_threads(args.build_threads)
        store = KnowledgeStore(settings(data_dir, **hnsw), NoEmbedder())
        started = time.perf_counter()
        await store.stats(tenant)
        out["write"]["index_build_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        store.close()
        out["write"]["save_s"] = round(time.perf_counter() - started, 1)
        vector_index.set_threads(1)
        marker.write_text(json.dumps({**out["write"], "hnsw": built_with}))
    else:
        out["write"] = json.loads(marker.read_text())
    out["disk_mb"] = {"sqlite": round(sum(f.stat().st_size for f in data_dir.glob("tenants/*/store.sqlite*")) / 2**20),
                      "saved_indexes": round(sum(f.stat().st_size for f in data_dir.glob("tenants/*/derived/*"))
                                             / 2**20)}

    # in-process: open from the saved files, then the legs
    rss_before = rss_mb()
    store = KnowledgeStore(settings(data_dir, **hnsw), NoEmbedder())
    try:
        started = time.perf_counter()
        await store.dense(tenant, corpus.query_vectors[:1], TOP_K, F)
        out["inprocess_first_query_s"] = round(time.perf_counter() - started, 2)
        out["opened"] = dict(store._tenants.counters)
        t = await store._tenants.get(tenant)
        out["index_kind"] = t.index.kind
        out["hnsw_depth"] = t.index.depth.to_json() if t.index.depth is not None else None   # search_depth.py
        out["estimated_mb"] = round(t.memory / 2**20)
        out["inprocess_rss_delta_mb"] = round(rss_mb() - rss_before)
        out["keyword_index_mb"] = round(t.keywords.memory_bytes() / 2**20)
        out["vector_index_mb"] = round(t.index.memory_bytes() / 2**20)
        out["vocabulary"] = len(t.keywords._vocab)
        out["postings"] = int(len(t.keywords._bpos) + t.keywords._dn)
        out["index"] = recall_and_index_latency(t, corpus, args.queries)
        if t.index.kind == "hnsw" and args.ef_sweep:
            near_ties, *out["ef_sweep"] = ef_sweep(t.index, corpus, args.queries, args.ef_sweep)
            out.update(near_ties)
        out["inprocess"] = await legs(
            lambda v: store.dense(tenant, v[None, :], TOP_K, F),
            lambda text: store.keyword(tenant, text, [], TOP_K, F), corpus, args.queries)
        filtered = SearchFilters(tags=("t3",))
        out["inprocess_filtered_10pct"] = await legs(
            lambda v: store.dense(tenant, v[None, :], TOP_K, filtered),
            lambda text: store.keyword(tenant, text, [], TOP_K, filtered), corpus, args.queries)
    finally:
        store.close()
    if args.grpc:
        out["grpc"] = await through_grpc(data_dir, [tenant], corpus, args.queries,
                                         **{k: str(v) for k, v in hnsw.items()})
    return out


# -- a KnowledgeStore process ----------------------------------------------------------------

def start_store(data_dir: Path, ready: Path, **env_settings: str) -> tuple[subprocess.Popen, float, str]:
    """Spawn `services.knowledge_store.main`; returns (process, seconds to SERVING, gRPC target)."""
    from shared.healthcheck import health_ok

    ready.unlink(missing_ok=True)
    env = {**os.environ, "NUCLEUS_KS_DATA_DIR": str(data_dir), "NUCLEUS_KS_GRPC_PORT": "0",
           "NUCLEUS_KS_MCP_PORT": "-1", "NUCLEUS_OTEL_TRACE_FILE": "false", "NUCLEUS_KS_LLM_TARGET": "127.0.0.1:9",
           **{f"NUCLEUS_KS_{k.upper()}": v for k, v in env_settings.items()}}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "services.knowledge_store.main", "--ready-file", str(ready)],
                            env=env, stdout=subprocess.DEVNULL, stderr=open(ready.with_suffix(".log"), "w"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if ready.exists():
            try:
                target = json.loads(ready.read_text())["grpc"]
            except (ValueError, KeyError):
                target = ""
            if target and health_ok(target, "nucleus.v1.KnowledgeStore"):
                return proc, time.perf_counter() - started, target
        time.sleep(0.02)
    proc.kill()
    raise SystemExit(f"the KnowledgeStore did not start; see {ready.with_suffix('.log')}")


def stop_store(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def through_grpc(data_dir: Path, tenants: list[str], corpus: Corpus, n_queries: int,
                       **env_settings: str) -> dict:
    from services.knowledge_store.client import KnowledgeStoreClient

    proc, to_serving, target = start_store(data_dir, data_dir / "ks.ready.json", **env_settings)
    out = {"start_to_serving_s": round(to_serving, 2), "rss_idle_mb": round(rss_mb(proc.pid))}
    client = KnowledgeStoreClient(target, timeout_s=120.0)
    try:
        started = time.perf_counter()
        await client.retrieve(RetrievalRequest(tenants[0], top_k=TOP_K, filters=F, vectors=corpus.query_vectors[:1]))
        out["first_query_s"] = round(time.perf_counter() - started, 2)
        out.update(await legs(
            lambda v: client.retrieve(RetrievalRequest(tenants[0], top_k=TOP_K, filters=F, vectors=v[None, :])),
            lambda text: client.retrieve(RetrievalRequest(tenants[0], text, TOP_K, F, keyword=True)), corpus,
            n_queries))
        out["rss_mb"] = round(rss_mb(proc.pid))
    finally:
        await client.close()
        stop_store(proc)
    return out


# -- many small tenants ----------------------------------------------------------------------

async def small_tenants(count: int, size: int, corpus: Corpus, args) -> dict:
    data_dir = (SCALE_CACHE / f"small-{count}x{size}").resolve()
    marker = data_dir / "generated.json"
    out: dict = {"tenants": count, "chunks_each": size}
    if args.rebuild or not marker.exists():
        shutil.rmtree(data_dir, ignore_errors=True)
        print(f"[{count:,} × {size:,}] writing tenants through the storage layer …", flush=True)
        started = time.perf_counter()
        for i in range(count):
            write_tenant(data_dir, f"s{i:04d}", size, corpus, seed=SEED + 1 + i)
        seconds = time.perf_counter() - started
        marker.write_text(json.dumps({"write_s": round(seconds, 1), "rows_per_s": round(count * size / seconds)}))
    out["write"] = json.loads(marker.read_text())
    if args.generate_only:
        return out
    from services.knowledge_store.client import KnowledgeStoreClient

    runs = []
    for budget_mb in args.small_budgets:
        proc, to_serving, target = start_store(data_dir, data_dir / "ks.ready.json",
                                               memory_budget_mb=str(budget_mb))
        run: dict = {"budget_mb": budget_mb, "start_to_serving_s": round(to_serving, 2)}
        client = KnowledgeStoreClient(target, timeout_s=120.0)
        rss_curve = []
        try:
            for sweep in ("first", "second"):
                lat = []
                for i in range(count):
                    v = corpus.query_vectors[i % len(corpus.query_vectors)]
                    t = time.perf_counter()
                    await client.retrieve(RetrievalRequest(f"s{i:04d}", top_k=TOP_K, filters=F, vectors=v[None, :]))
                    lat.append((time.perf_counter() - t) * 1000)
                    if sweep == "first" and i % max(1, count // 20) == 0:
                        rss_curve.append((i + 1, round(rss_mb(proc.pid))))
                run[f"{sweep}_sweep_p50_ms"] = round(pct(lat, 50), 2)
                run[f"{sweep}_sweep_p99_ms"] = round(pct(lat, 99), 2)
                run[f"{sweep}_sweep_rss_mb"] = round(rss_mb(proc.pid))
            hot = []                                   # the most recent tenants, already open
            for i in range(200):
                tenant = f"s{count - 1 - (i % 20):04d}"
                t = time.perf_counter()
                await client.retrieve(RetrievalRequest(tenant, top_k=TOP_K, filters=F,
                                                      vectors=corpus.query_vectors[i % 300][None, :]))
                hot.append((time.perf_counter() - t) * 1000)
            run["open_tenant_p50_ms"] = round(pct(hot, 50), 2)
            status = await client.store_status()
            run["open_tenants"] = status.open_tenants
            run["estimated_open_mb"] = round(status.open_tenant_bytes / 2**20)
            run["rss_mb"] = round(rss_mb(proc.pid))
            run["rss_curve"] = rss_curve
        finally:
            await client.close()
            stop_store(proc)
        runs.append(run)
    out["runs"] = runs
    return out


def add_arguments(p, *, with_out: bool = True) -> None:
    """The options (also on `nucleus bench --scale`, whose own --out is reused)."""
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",") if x], default=[10_000, 100_000, 1_000_000],
                   help="chunks of the big tenants (default 10000,100000,1000000)")
    p.add_argument("--small-tenants", type=int, default=1_000, help="small tenants (default 1000; 0 = skip)")
    p.add_argument("--small-size", type=int, default=1_000, help="chunks per small tenant (default 1000)")
    p.add_argument("--small-budgets", type=lambda s: [int(x) for x in s.split(",") if x], default=[4_096, 512],
                   help="KnowledgeStore memory budgets (MB) the small tenants are served under (default 4096,512)")
    p.add_argument("--scale-queries", dest="queries", type=int, default=300,
                   help="queries per measurement (default 300, all)")
    p.add_argument("--build-threads", type=int, default=2, help="FAISS threads for the first index build")
    p.add_argument("--vectors", choices=VECTOR_GENERATORS, default="span",
                   help="synthetic vectors of the big tenants: span (perturbations with the real vectors' "
                        "spectrum, default) or isotropic (Gaussian in all dimensions, the pessimistic case)")
    p.add_argument("--span-components", type=int, default=SPAN_COMPONENTS,
                   help=f"--vectors span: principal directions of the real vectors used (default {SPAN_COMPONENTS})")
    p.add_argument("--hnsw-m", type=int, default=0, help="HNSW M (default: the setting NUCLEUS_KS_HNSW_M)")
    p.add_argument("--hnsw-ef-construction", type=int, default=0,
                   help="HNSW efConstruction (default: the setting NUCLEUS_KS_HNSW_EF_CONSTRUCTION)")
    p.add_argument("--hnsw-ef-search", type=int, default=0,
                   help="HNSW efSearch (default: the setting NUCLEUS_KS_HNSW_EF_SEARCH)")
    p.add_argument("--spectrum", action="store_true",
                   help="also compare the spectrum of the real vectors and of 100k synthetic ones")
    p.add_argument("--ef-sweep", type=lambda s: [int(x) for x in s.split(",") if x], default=[64, 128, 256, 512],
                   help="efSearch values whose recall and latency are measured on the HNSW index alone "
                        "(default 64,128,256,512; empty = skip)")
    p.add_argument("--no-grpc", dest="grpc", action="store_false", help="skip the KnowledgeStore process")
    p.add_argument("--rebuild", action="store_true", help="regenerate the cached stores")
    p.add_argument("--generate-only", action="store_true", help="write the small tenants' stores, measure nothing")
    if with_out:
        p.add_argument("--out", type=Path, help="write scale.json and the PNG curves here")


async def run(args: argparse.Namespace) -> dict:
    _imports()
    corpus = Corpus()
    result: dict = {"generator": describe_generator(args.vectors, args.span_components),
                    "hnsw": hnsw_settings(args), "machine": f"{os.cpu_count()} cores", "big": []}
    if args.spectrum:
        result["spectrum"] = spectrum(corpus, args.vectors, args.span_components)
        print(json.dumps({"spectrum": result["spectrum"]}), flush=True)
    for size in args.sizes:
        result["big"].append(await big_tenant(size, corpus, args))
        print(json.dumps(result["big"][-1]), flush=True)
    if args.small_tenants:
        result["small"] = await small_tenants(args.small_tenants, args.small_size, corpus, args)
        if args.generate_only:
            return result
        print(json.dumps(result["small"]), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--dataset", dest="scale_dataset", type=Path, default=scale_data.DATA,
                   help="the SciFact BEIR folder the chunks come from (default ../shared/data/scifact)")
    args = p.parse_args(argv)
    return run_and_report(args)


def run_and_report(args: argparse.Namespace) -> int:
    import signal

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    scale_data.DATA = getattr(args, "scale_dataset", scale_data.DATA)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # stop the KnowledgeStore child too
    result = asyncio.run(run(args))
    print()
    print(f"generator: {result['generator']}")
    print("HNSW: " + ", ".join(f"{k} {v}" for k, v in result["hnsw"].items()))
    if "spectrum" in result:
        print("spectrum: " + "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in figures.items())
                                       for name, figures in result["spectrum"].items()))
    for r in result["big"]:
        if r.get("near_ties"):
            print(f"{r['chunks']:,} chunks, near-ties among the exact neighbours: " + ", ".join(
                f"{k} {v}" for k, v in r["near_ties"].items()))
        if r.get("hnsw_depth"):
            d = r["hnsw_depth"]
            print(f"{r['chunks']:,} chunks, efSearch chosen for recall@10 {d['target']}: {d['ef_search']} "
                  f"(recall {d['recall']} on the index's own sample, measured in {d['seconds']} s); on the "
                  f"queries: recall {r['index']['recall_at_10']} at {r['index']['faiss_p50_ms']} ms p50")
        if r.get("ef_sweep"):
            print(f"{r['chunks']:,} chunks, efSearch sweep (index alone): " + "; ".join(
                f"{e['ef_search']}: recall {e['recall_at_10']:.3f} at {e['faiss_p50_ms']} ms" for e in r["ef_sweep"]))
    if result["big"]:
        print(table(result))
    if "small" in result:
        for r in result["small"].get("runs", []):
            print(f"{result['small']['tenants']:,} tenants × {result['small']['chunks_each']:,} chunks, budget "
                  f"{r['budget_mb']} MB: start→SERVING {r['start_to_serving_s']} s; first sweep p50/p99 "
                  f"{r['first_sweep_p50_ms']}/{r['first_sweep_p99_ms']} ms, second sweep "
                  f"{r['second_sweep_p50_ms']}/{r['second_sweep_p99_ms']} ms, open tenant p50 "
                  f"{r['open_tenant_p50_ms']} ms; {r['open_tenants']} open ({r['estimated_open_mb']} MB estimated), "
                  f"KS resident {r['rss_mb']} MB")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale.json").write_text(json.dumps(result, indent=1))
        result["plots"] = plots(result, args.out)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
