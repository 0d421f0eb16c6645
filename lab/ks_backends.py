"""The KnowledgeStore's two backends on SciFact: the same documents, vectors and queries through
the embedded store (SQLite + FAISS + BM25) and the qdrant store, compared by nDCG@10 of each
leg (dense, BM25) and of their reciprocal-rank fusion, plus ingest time and search latency.

    .venv/bin/python -m lab.ks_backends                                  # qdrant local mode
    .venv/bin/python -m lab.ks_backends --qdrant-path :memory:          # local mode, no persistence
    .venv/bin/python -m lab.ks_backends --qdrant-url http://qdrant:6333  # a Qdrant server

Vectors: `.bench-cache/scifact_minilm.npy` / `scifact_minilm_queries.npy` (all-MiniLM-L6-v2 of
title + text and of the 300 test queries; `python -m lab.ks_index --build-cache` writes
them), so nothing is re-encoded: every chunk of a document gets its document's vector, on both
backends alike. Qdrant's local mode (qdrant-client, pure Python) is a correctness engine: its
latency says nothing about a Qdrant server's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from lab.bm25_scifact import load_jsonl, load_qrels
from benchmarks.metrics import ndcg_at_k
from services.knowledge_store.backend import open_store
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from shared.settings import KnowledgeStoreSettings

CACHE = Path(".bench-cache")
DATA = Path("../shared/data/scifact")
TENANT = "scifact"
K = 10
DEPTH = 100
RRF_K = 60


class _CachedEmbedder:
    """The cached vector of the document a chunk's embedding text belongs to (its first line is
    the document's title; untitled documents are found by their text)."""

    def __init__(self, corpus: list[dict], vectors: np.ndarray) -> None:
        self.vectors = vectors
        self.by_title = {d["title"].strip(): i for i, d in enumerate(corpus) if d["title"].strip()}
        self.by_text = {" ".join(d["text"].split())[:80]: i for i, d in enumerate(corpus)}
        self.missed = 0

    async def embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            first, _, rest = t.partition("\n")
            i = self.by_title.get(first.strip())
            if i is None:
                i = self.by_text.get(" ".join(t.split())[:80], self.by_text.get(" ".join(rest.split())[:80]))
            if i is None:
                self.missed += 1
                i = 0
            out.append(self.vectors[i])
        return np.stack(out)


def _docs(ranked_entry_ids: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for e in ranked_entry_ids:
        seen.setdefault(e.split("#", 1)[0], None)
    return list(seen)


def _rrf(*rankings: list[str]) -> list[str]:
    score: dict[str, float] = {}
    for ranking in rankings:
        for r, doc in enumerate(ranking):
            score[doc] = score.get(doc, 0.0) + 1.0 / (RRF_K + r + 1)
    return sorted(score, key=lambda d: (-score[d], d))


async def run_backend(name: str, settings: KnowledgeStoreSettings, corpus: list[dict], vectors: np.ndarray,
                      queries: list[tuple[str, str, np.ndarray]], qrels: dict, batch: int) -> dict:
    embedder = _CachedEmbedder(corpus, vectors)
    store = open_store(settings, embedder)
    try:
        t0 = time.perf_counter()
        for start in range(0, len(corpus), batch):
            await store.ingest(TENANT, "", [DocumentIn(ArtifactMeta(d["_id"], title=d["title"]), d["text"])
                                            for d in corpus[start:start + batch]])
        ingest_s = time.perf_counter() - t0
        stats = await store.stats(TENANT)
        legs: dict[str, list[float]] = {"dense": [], "bm25": [], "rrf": []}
        lat: dict[str, list[float]] = {"dense": [], "bm25": []}
        for qid, text, qv in queries:
            t = time.perf_counter()
            [dense] = await store.dense(TENANT, qv[None, :], DEPTH, SearchFilters(), hits=True)
            lat["dense"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            keyword, _ = await store.keyword(TENANT, text, [], DEPTH, SearchFilters(), hits=True)
            lat["bm25"].append((time.perf_counter() - t) * 1000)
            d, b = _docs([h.entry.id for h in dense]), _docs([h.entry.id for h in keyword])
            legs["dense"].append(ndcg_at_k(d, qrels[qid], K))
            legs["bm25"].append(ndcg_at_k(b, qrels[qid], K))
            legs["rrf"].append(ndcg_at_k(_rrf(d, b), qrels[qid], K))
        return {"backend": name, "entries": stats.entries, "artifacts": stats.artifacts,
                "embedding_misses": embedder.missed, "ingest_s": round(ingest_s, 1),
                **{f"ndcg@10_{leg}": round(float(np.mean(v)), 4) for leg, v in legs.items()},
                **{f"p50_ms_{leg}": round(float(np.percentile(v, 50)), 2) for leg, v in lat.items()}}
    finally:
        store.close()


async def main_async(args: argparse.Namespace) -> dict:
    corpus = load_jsonl(args.data / "corpus.jsonl")
    qrels = load_qrels(args.data / "qrels" / "test.tsv")
    qids = sorted(qrels)
    texts = {q["_id"]: q["text"] for q in load_jsonl(args.data / "queries.jsonl")}
    vectors = np.load(CACHE / "scifact_minilm.npy")
    qvectors = np.load(CACHE / "scifact_minilm_queries.npy")
    queries = [(q, texts[q], qvectors[i]) for i, q in enumerate(qids)][:args.max_queries or None]
    out = {"dataset": str(args.data), "queries": len(queries), "documents": len(corpus), "results": []}
    with tempfile.TemporaryDirectory(prefix="ks-backends-") as tmp:
        base = Path(tmp)
        embedded = KnowledgeStoreSettings(data_dir=base / "embedded")
        qdrant = KnowledgeStoreSettings(data_dir=base / "unused", backend="qdrant",
                                        **({"qdrant_url": args.qdrant_url} if args.qdrant_url
                                           else {"qdrant_path": args.qdrant_path or base / "qdrant"}))
        qdrant_name = "qdrant-server" if args.qdrant_url else "qdrant-local"
        for name, settings in (("embedded", embedded), (qdrant_name, qdrant)):
            row = await run_backend(name, settings, corpus, vectors, queries, qrels, args.batch)
            print(json.dumps(row))
            out["results"].append(row)
    a, b = out["results"]
    out["delta"] = {k: round(b[k] - a[k], 4) for k in a if k.startswith("ndcg")}
    print(json.dumps({"delta": out["delta"]}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--qdrant-url", default="", help="a Qdrant server (default: local mode in a temp folder)")
    parser.add_argument("--qdrant-path", type=Path, default=None,
                        help="local mode folder (default a temp folder; ':memory:' = no persistence, faster)")
    parser.add_argument("--batch", type=int, default=256, help="documents per ingest call (default 256)")
    parser.add_argument("--max-queries", type=int, default=0, help="0 = all 300 test queries")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/ks_backends.json"))
    args = parser.parse_args()
    out = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
