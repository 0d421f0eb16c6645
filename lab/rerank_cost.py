"""What model re-ranking costs per query: a MiniLM-L6-sized cross-encoder at 20 and 50 candidates.

    .venv/bin/python -m lab.rerank_cost [--rounds 15] [--max-length 320]

No cross-encoder weights can be installed here, so the model is built the size of
cross-encoder/ms-marco-MiniLM-L-6-v2 (BERT: 6 layers, hidden 384, 12 heads, FFN 1536,
uncased WordPiece vocabulary — the bundled all-MiniLM-L6-v2's tokenizer files) with random
weights: the arithmetic, and so the time, is that of the real model; the scores are not.
It is loaded the way an operator's model is (NUCLEUS_LLM_CROSS_ENCODER_PATH → ONNX export →
ONNX Runtime) into an LlmOrchestrator with the local embedder, and every round re-ranks the
demo corpus's documents (~270 tokens per (query, passage) pair, as the issue's estimate
assumes) for each query of demo/sample_queries.txt through `LlmOrchestrator.rerank`:

    none               SearchAndRank without re-ranking adds nothing (0 ms)
    embedding-cosine   today's default without a chat model (the candidates embedded)
    cross-encoder      the model re-ranker

All three measured in the same run, alternating per query; p50 / p95 of the added time per
query and the cross-encoder / embedding-cosine ratio are printed (`--json FILE` keeps them).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.metrics import percentile
from shared.documents import iter_paths, load_document

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def build_minilm_sized_cross_encoder(dest: Path) -> Path:
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from services.llm_orchestration.embedder import bundled_model_path

    source = Path(bundled_model_path())
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, dest / name)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536, max_position_embeddings=512, num_labels=1)
    BertForSequenceClassification(config).eval().save_pretrained(str(dest))
    return dest


async def run(rounds: int, max_length: int, work: Path) -> dict:
    from services.llm_orchestration.core import LlmOrchestrator
    from shared.settings import LlmOrchestrationSettings

    model = build_minilm_sized_cross_encoder(work / "cross-encoder")
    orch = LlmOrchestrator(LlmOrchestrationSettings(cross_encoder_path=str(model), cross_encoder_max_length=max_length,
                                                    onnx_cache_dir=str(work / "onnx"), cache_size=0))
    started = time.perf_counter()
    await orch.start()
    load_s = time.perf_counter() - started
    docs = [load_document(p) for p in iter_paths(ROOT / "demo" / "corpus")]
    passages = [d.content for d in docs]
    while len(passages) < 50:
        passages += passages
    queries = [q.strip() for q in (ROOT / "demo" / "sample_queries.txt").read_text().splitlines() if q.strip()]
    tok = orch._cross_encoder._tokenizer          # noqa: SLF001 - a benchmark may look inside
    pair_tokens = [min(max_length, len(tok(queries[0], p)["input_ids"])) for p in passages[:50]]
    out: dict = {"model": "BERT 6x384 (MiniLM-L6-sized), random weights", "runtime": orch._cross_encoder.runtime,
                 "max_length": max_length, "mean_tokens_per_pair": round(statistics.mean(pair_tokens), 1),
                 "load_s": round(load_s, 1), "rounds": rounds, "queries": len(queries),
                 "load_avg_1m": os.getloadavg()[0]}
    try:
        for n in (20, 50):
            candidates = [(f"c{i}", passages[i]) for i in range(n)]
            times: dict[str, list[float]] = {"embedding-cosine": [], "cross-encoder": []}
            await orch.rerank(queries[0], candidates, "cross-encoder")          # warm-up
            await orch.rerank(queries[0], candidates)
            for _ in range(rounds):
                for q in queries:
                    for method in ("cross-encoder", "embedding-cosine"):
                        t0 = time.perf_counter()
                        await orch.rerank(q, candidates, method if method == "cross-encoder" else "")
                        times[method].append((time.perf_counter() - t0) * 1000.0)
            row = {m: {"p50_ms": round(percentile(v, 50), 1), "p95_ms": round(percentile(v, 95), 1)}
                   for m, v in times.items()}
            row["none"] = {"p50_ms": 0.0, "p95_ms": 0.0}
            row["ratio_cross_encoder_vs_embedding_cosine_p50"] = round(
                row["cross-encoder"]["p50_ms"] / max(row["embedding-cosine"]["p50_ms"], 1e-9), 2)
            out[f"candidates_{n}"] = row
    finally:
        await orch.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over the sample queries")
    parser.add_argument("--max-length", type=int, default=320, help="tokens per (query, passage) pair")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rerank-cost-") as tmp:
        result = asyncio.run(run(args.rounds, args.max_length, Path(tmp)))
    print(f"{result['model']}, runtime {result['runtime']}, max_length {result['max_length']}, "
          f"{result['mean_tokens_per_pair']} tokens per pair (mean), load {result['load_s']} s, "
          f"{result['queries']} queries x {result['rounds']} rounds, load avg {result['load_avg_1m']:.2f}")
    for n in (20, 50):
        row = result[f"candidates_{n}"]
        print(f"{n} candidates: added p50 / p95 — none 0 / 0 ms; embedding-cosine "
              f"{row['embedding-cosine']['p50_ms']} / {row['embedding-cosine']['p95_ms']} ms; cross-encoder "
              f"{row['cross-encoder']['p50_ms']} / {row['cross-encoder']['p95_ms']} ms "
              f"({row['ratio_cross_encoder_vs_embedding_cosine_p50']}x embedding-cosine)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
