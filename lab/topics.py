"""Topic computation time (rag_topics' work in the KnowledgeStore, services/knowledge_store/topics.py).

    .venv/bin/python -m lab.topics [--scifact ../shared/data/scifact] [--synthetic-chunks 100000]
                                          [--skip-scifact] [--skip-synthetic]

1. SciFact (5,183 abstracts): the corpus embeddings come from the benchmark cache
   (`.bench-cache/scifact_minilm.npy`, all-MiniLM-L6-v2; made by `python -m lab.bm25_scifact`
   or the other SciFact benchmarks); each abstract is ingested into a KnowledgeStore tenant with
   its cached vector for every chunk (the real analyser, chunker, SQLite and FAISS).
2. A synthetic tenant of `--synthetic-chunks` chunks (5 per document): synthetic vectors (12
   planted themes: a unit centre per theme plus Gaussian noise) and synthetic text drawn from a
   per-theme vocabulary, so the labels have something to find. Only the vectors and words are
   synthetic; ingest, storage and the topic computation are the product's.

For each tenant: the cold computation (snapshot read + k chosen by silhouette over 2..12, or k
given, + labels for one caller) timed end to end through `KnowledgeStore.topics` (the RAG tool
adds one gRPC hop and JSON); the cached answer; another caller's view (visibility enforced: a
fresh per-caller labelling on the cached clusters); and on the synthetic tenant the p50 / p95 of
a vector search while the computation runs in the background versus idle (it must not block
searches). Prints a table, then one JSON line with every figure.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.beir import load_dataset
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from shared.settings import KnowledgeStoreSettings

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache" / "scifact_minilm.npy"
THEMES = 12
WORDS_PER_THEME = 40


class CurrentVector:
    """An embedder returning one fixed vector (per ingest call) for every chunk: the document's
    cached embedding, so a document's mean vector is exactly its cached one."""

    def __init__(self, dim: int) -> None:
        self.vector = np.zeros(dim, np.float32)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return np.repeat(self.vector[None, :], len(texts), axis=0)


class ThemeVectors:
    """Synthetic embedder: the theme named by the text's first word ("themeN"), plus noise."""

    def __init__(self, dim: int, seed: int = 7) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((THEMES, dim)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        self.rng = rng

    async def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.centres.shape[1]), np.float32)
        for i, text in enumerate(texts):
            marker = text.split("theme", 1)[1][:2] if "theme" in text else "0"
            theme = int("".join(c for c in marker if c.isdigit()) or 0) % THEMES
            v = self.centres[theme] + 0.5 * self.rng.standard_normal(self.centres.shape[1]).astype(np.float32) / 8
            out[i] = v / np.linalg.norm(v)
        return out


def _settings(path: Path) -> KnowledgeStoreSettings:
    return KnowledgeStoreSettings(data_dir=path)


async def _ready(store: KnowledgeStore, tenant: str, filters: SearchFilters, **kw) -> tuple[dict, float]:
    started = time.perf_counter()
    while True:
        out = await store.topics(tenant, filters, "topics", **kw)
        if out["status"] == "ready":
            return out, time.perf_counter() - started
        await asyncio.sleep(0.05)


async def _measure(store: KnowledgeStore, tenant: str, name: str, *, k: int = 0) -> dict:
    everyone = SearchFilters()
    cold, cold_s = await _ready(store, tenant, everyone, k=k)
    _, warm_s = await _ready(store, tenant, everyone, k=k)
    caller = SearchFilters(enforce_visibility=True, visibility_groups=("staff",))
    _, view_s = await _ready(store, tenant, caller, k=k)
    evo_start = time.perf_counter()
    await store.topics(tenant, everyone, "evolution", k=k, period="year")
    evo_s = time.perf_counter() - evo_start
    map_start = time.perf_counter()
    await store.topics(tenant, everyone, "map", k=k, max_points=2_000)
    map_s = time.perf_counter() - map_start
    return {"tenant": name, "documents": cold["documents"], "k": cold["k"], "criterion": cold["criterion"],
            "cold_s": round(cold_s, 3), "model_s": cold["computed_in_s"], "cached_ms": round(warm_s * 1000, 2),
            "other_caller_ms": round(view_s * 1000, 2), "evolution_ms": round(evo_s * 1000, 2),
            "map_ms": round(map_s * 1000, 2),
            "labels": [t["label"] for t in cold["topics"][:5]]}


async def scifact(root: Path, tmp: Path) -> list[dict]:
    dataset = load_dataset(root)
    vectors = np.load(CACHE)
    if vectors.shape[0] != len(dataset.corpus):
        raise SystemExit(f"{CACHE} holds {vectors.shape[0]} vectors for {len(dataset.corpus)} documents; "
                         "run python -m lab.bm25_scifact once to (re)build the embedding cache")
    embedder = CurrentVector(vectors.shape[1])
    store = KnowledgeStore(_settings(tmp / "scifact"), embedder)
    try:
        started = time.perf_counter()
        for doc, vector in zip(dataset.corpus, vectors):
            embedder.vector = vector
            await store.ingest("scifact", "", [DocumentIn(ArtifactMeta(artifact_id=doc.id, title=doc.title),
                                                          doc.text or doc.title)])
        ingest_s = time.perf_counter() - started
        stats = await store.stats("scifact")
        auto = await _measure(store, "scifact", "SciFact")
        fixed = await _measure(store, "scifact", "SciFact", k=10)
        for row in (auto, fixed):
            row.update(chunks=stats.entries, ingest_s=round(ingest_s, 1))
        return [auto, fixed]
    finally:
        store.close()


def _synthetic_docs(n_docs: int, chunks_per_doc: int, start: int) -> list[DocumentIn]:
    rng = np.random.default_rng(start)
    vocab = [[f"t{t}w{w}" for w in range(WORDS_PER_THEME)] for t in range(THEMES)]
    docs = []
    for i in range(start, start + n_docs):
        theme = i % THEMES
        sections = []
        for c in range(chunks_per_doc):
            words = " ".join(rng.choice(vocab[theme], 150))
            sections.append(f"# theme{theme} part {c}\n\ntheme{theme} {words}")
        year = 2015 + (i * 7) % 10
        created = int(time.mktime((year, 1 + i % 12, 1, 0, 0, 0, 0, 0, 0)))
        docs.append(DocumentIn(ArtifactMeta(artifact_id=f"syn-{i}", title=f"theme{theme} document {i}",
                                            created_unix=created), "\n\n".join(sections), "text/markdown"))
    return docs


async def _search_latencies(store: KnowledgeStore, tenant: str, queries: np.ndarray, seconds: float) -> list[float]:
    out: list[float] = []
    deadline = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        await store.dense(tenant, queries[i % len(queries)][None, :], 10, SearchFilters(), hits=True)
        out.append((time.perf_counter() - t0) * 1000)
        i += 1
    return out


async def synthetic(n_chunks: int, tmp: Path) -> dict:
    embedder = ThemeVectors(384)
    store = KnowledgeStore(_settings(tmp / "synthetic"), embedder)
    try:
        per_doc = 5
        n_docs = n_chunks // per_doc
        started = time.perf_counter()
        for start in range(0, n_docs, 500):
            await store.ingest("synthetic", "", _synthetic_docs(min(500, n_docs - start), per_doc, start))
        ingest_s = time.perf_counter() - started
        stats = await store.stats("synthetic")
        queries = await embedder.embed([f"theme{t} query" for t in range(THEMES)])
        idle = await _search_latencies(store, "synthetic", queries, 3.0)
        # the cold computation in the background (no waiting), searches meanwhile
        store._topics.wait_s = 0.0
        started = time.perf_counter()
        first = await store.topics("synthetic", SearchFilters(), "topics")
        busy: list[float] = []
        while True:
            busy += await _search_latencies(store, "synthetic", queries, 0.5)
            out = await store.topics("synthetic", SearchFilters(), "topics")
            if out["status"] == "ready":
                break
        cold_s = time.perf_counter() - started
        store._topics.wait_s = 2.0
        row = await _measure(store, "synthetic", f"synthetic {n_chunks // 1000}k chunks")
        row.update(cold_s=round(cold_s, 3), first_status=first["status"], chunks=stats.entries,
                   ingest_s=round(ingest_s, 1),
                   search_idle_p50_ms=round(statistics.median(idle), 2),
                   search_idle_p95_ms=round(float(np.percentile(idle, 95)), 2),
                   search_during_p50_ms=round(statistics.median(busy), 2),
                   search_during_p95_ms=round(float(np.percentile(busy, 95)), 2), searches_during=len(busy))
        return row
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scifact", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--synthetic-chunks", type=int, default=100_000)
    parser.add_argument("--skip-scifact", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="nucleus-topics-") as tmp:
        if not args.skip_scifact:
            rows += asyncio.run(scifact(Path(args.scifact), Path(tmp)))
        if not args.skip_synthetic:
            rows.append(asyncio.run(synthetic(args.synthetic_chunks, Path(tmp))))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"{'tenant':<26}{'docs':>7}{'chunks':>8}{'k':>4}{'cold s':>8}{'model s':>9}{'cached ms':>11}"
          f"{'caller ms':>11}{'evol ms':>9}{'map ms':>8}")
    for r in rows:
        print(f"{r['tenant']:<26}{r['documents']:>7}{r['chunks']:>8}{r['k']:>4}{r['cold_s']:>8.2f}{r['model_s']:>9.2f}"
              f"{r['cached_ms']:>11.1f}{r['other_caller_ms']:>11.1f}{r['evolution_ms']:>9.1f}{r['map_ms']:>8.1f}")
        print(f"    {r['criterion']}; labels: {' | '.join(r['labels'][:3])}")
        if "search_idle_p50_ms" in r:
            print(f"    vector search p50/p95 idle {r['search_idle_p50_ms']}/{r['search_idle_p95_ms']} ms, during the "
                  f"computation {r['search_during_p50_ms']}/{r['search_during_p95_ms']} ms "
                  f"({r['searches_during']} searches); first answer: {r['first_status']}")
    print(json.dumps({"topics": rows}))


if __name__ == "__main__":
    main()
