"""Keyword leg of the KnowledgeStore on BEIR SciFact: nDCG@10 and search latency.

    .venv/bin/python -m lab.bm25_scifact [--data ../shared/data/scifact]
        [--title-weight 1.0] [--body-weight 1.0] [--top-k 100] [--out benchmarks/out/bm25_scifact.json]

The corpus (title + text per document) is ingested into a fresh store in a temp directory
through the real ingest path (chunking, analysis, FTS5, one transaction per batch). Only the
keyword leg is measured, so the embedder is a PLACEHOLDER: a seeded random unit vector per
text (no model; the vectors carry no meaning and are not evaluated).

Latency is wall time of each `search_by_filters` call (analysis, FTS5 BM25, row fetch);
cpu_ms is the process CPU time of the same call, a steadier figure on a shared machine.

Each test query (those with qrels in qrels/test.tsv) runs through `search_by_filters`; chunk
hits are aggregated per document (max score per artifact) and scored with nDCG@10 as
trec_eval defines it (gain = qrel relevance, discount log2(rank + 1), ideal DCG from the
qrels of the query; queries with no retrieved relevant document score 0). Published BM25 on
SciFact: 0.665 (BEIR, Anserini flat) to 0.679 (multifield).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np

from services.knowledge_store.embedded.core import DEFAULT_BM25_WEIGHTS, KnowledgeStore
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from shared.settings import KnowledgeStoreSettings

DEFAULT_DATA = Path("../shared/data/scifact")
TENANT = "scifact"


class PlaceholderEmbedder:
    """NOT a model: a random unit vector seeded by the text (only the keyword leg is measured)."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension

    async def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), np.float32)
        for i, text in enumerate(texts):
            out[i] = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.dimension)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def load_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    with path.open(encoding="utf-8") as f:
        next(f)                                          # header: query-id corpus-id score
        for line in f:
            qid, did, rel = line.rstrip("\n").split("\t")
            qrels[qid][did] = int(rel)
    return dict(qrels)


def ndcg_at_k(ranking: list[str], relevant: dict[str, int], k: int = 10) -> float:
    """trec_eval ndcg_cut_k for one query: graded gains, log2 discount, ideal from qrels."""
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted((r for r in relevant.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


async def run(args: argparse.Namespace) -> dict:
    corpus = load_jsonl(args.data / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in load_jsonl(args.data / "queries.jsonl")}
    qrels = load_qrels(args.data / "qrels" / "test.tsv")
    with tempfile.TemporaryDirectory(prefix="bm25-scifact-") as tmp:
        settings = KnowledgeStoreSettings(data_dir=Path(tmp))
        store = KnowledgeStore(settings, PlaceholderEmbedder(settings.dimension),
                               bm25_weights=(args.title_weight, args.body_weight))
        try:
            started = time.perf_counter()
            batch = 500
            entries = 0
            for start in range(0, len(corpus), batch):
                docs = [DocumentIn(ArtifactMeta(artifact_id=d["_id"], title=d.get("title", "")), d.get("text", ""))
                        for d in corpus[start:start + batch] if (d.get("text") or "").strip()]
                report = await store.ingest(TENANT, "", docs)
                entries += report.total_entries
            ingest_s = time.perf_counter() - started
            integrity = await store.verify_integrity(TENANT)

            scores: list[float] = []
            latencies_ms: list[float] = []
            cpu_ms: list[float] = []
            for qid, relevant in sorted(qrels.items()):
                t0, c0 = time.perf_counter(), time.process_time()
                hits, _terms = await store.keyword(TENANT, queries[qid], [], args.top_k, SearchFilters(), hits=True)
                latencies_ms.append((time.perf_counter() - t0) * 1000)
                cpu_ms.append((time.process_time() - c0) * 1000)
                best: dict[str, float] = {}
                for hit in hits:
                    aid = hit.entry.artifact_id
                    if hit.score > best.get(aid, -math.inf):
                        best[aid] = hit.score
                ranking = sorted(best, key=lambda a: (-best[a], a))
                scores.append(ndcg_at_k(ranking, relevant))
        finally:
            store.close()
    return {
        "documents": len(corpus),
        "entries": entries,
        "integrity": integrity,
        "ingest_seconds": round(ingest_s, 2),
        "queries": len(scores),
        "bm25_weights": [args.title_weight, args.body_weight],
        "top_k_chunks": args.top_k,
        "ndcg@10": round(statistics.fmean(scores), 4),
        "latency_ms_p50": round(percentile(latencies_ms, 50), 2),
        "latency_ms_p95": round(percentile(latencies_ms, 95), 2),
        # CPU time of the process per search: robust to other processes competing for cores
        "cpu_ms_p50": round(percentile(cpu_ms, 50), 2),
        "cpu_ms_p95": round(percentile(cpu_ms, 95), 2),
        "embedder": "placeholder (seeded random vectors; keyword leg only)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--title-weight", type=float, default=DEFAULT_BM25_WEIGHTS[0])
    parser.add_argument("--body-weight", type=float, default=DEFAULT_BM25_WEIGHTS[1])
    parser.add_argument("--top-k", type=int, default=100, help="chunks retrieved per query before aggregation")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/bm25_scifact.json"))
    args = parser.parse_args()
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
