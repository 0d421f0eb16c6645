"""`nucleus bench`: the tenant-scoped benchmark harness on the operator CLI (benchmarks/harness.py).

    nucleus bench --dataset ../shared/data/scifact --tenant scifact
    nucleus bench --dataset D --tenant T --tenant-slices 3            # 3 tenants, one slice each
    nucleus bench --dataset A --tenant a --dataset B --tenant b       # two datasets side by side
    nucleus --data-dir .nucleus-data bench --use-running --dataset D --tenant T
    nucleus bench --scale [--sizes 10000,100000,1000000] [--small-tenants 1000]   # benchmarks/scale.py
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

from benchmarks.options import DEFAULT_CACHE, BenchOptions
from benchmarks.scale import add_arguments as add_scale_arguments
from benchmarks.stack import add_running_arguments, running_data_dir
from shared.errors import InvalidArgument

# The harness, the federation benchmark and the scale run are imported when `nucleus bench` runs: every
# other `nucleus` command starts without them.


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="benchmark quality, latency, throughput and ingest on a BEIR dataset, against a baseline",
        description="Ingest a BEIR-format dataset into a tenant through the real services (skipping what is "
                    "already there), run every judged query through RAGPipeline.SearchAndRank per ranking method, "
                    "and compare with an in-process bm25s + MiniLM + FAISS baseline. Writes result.json, report.md "
                    "and PNG plots.")
    p.add_argument("--dataset", action="append", type=Path,
                   help="BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv); repeatable; "
                        "required unless --scale")
    p.add_argument("--tenant", action="append", help="tenant for the dataset; one per --dataset")
    p.add_argument("--split", default="test", help="qrels file to evaluate (default test)")
    p.add_argument("--tenant-slices", type=int, default=1,
                   help="split each corpus into N interleaved slices, one tenant each (<tenant>-s<i>of<N>), "
                        "and check isolation between them")
    add_running_arguments(p, data_dir=False)
    p.add_argument("--stack-dir", type=Path, help="data directory of the stack the harness starts "
                                                   "(default .bench-cache/stack-data)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="embedding cache (default .bench-cache)")
    p.add_argument("--out", type=Path, help="output directory (default benchmarks/out/<timestamp>)")
    p.add_argument("--ks-backend", choices=("embedded", "qdrant"), default=None,
                   help="own stack: the KnowledgeStore backend (default: NUCLEUS_KS_BACKEND, else embedded); qdrant "
                        "uses NUCLEUS_QDRANT_URL if set, else local mode in <stack-dir>/qdrant (docs/SCALE.md)")
    p.add_argument("--top-k-initial", type=int, default=200, help="candidates per retrieval leg (default 200)")
    p.add_argument("--top-k-final", type=int, default=100, help="ranked results per query (default 100)")
    p.add_argument("--dense-weights", type=_floats, default=(0.3, 0.5, 0.7),
                   help="dense weights of the convex-fusion methods (default 0.3,0.5,0.7)")
    p.add_argument("--concurrency", type=_ints, default=(1, 4, 16), help="client counts (default 1,4,16)")
    p.add_argument("--throughput-queries", type=int, default=20, help="queries per client per level (default 20)")
    p.add_argument("--max-queries", type=int, default=0, help="judged queries per tenant (default 0 = all)")
    p.add_argument("--ingest-batch", type=int, default=64, help="documents per IngestDocuments call (default 64)")
    p.add_argument("--force-ingest", action="store_true", help="ingest again even when the tenant is up to date")
    p.add_argument("--warmup", type=int, default=5, help="synthetic warm-up queries per tenant and method")
    p.add_argument("--query-cache", action="store_true",
                   help="own stack: keep LlmOrchestration's query-embedding cache (off by default, so repeated "
                        "queries are measured cold)")
    p.add_argument("--timeout", type=float, default=30.0, help="deadline per SearchAndRank call, s (default 30)")
    p.add_argument("--embed-timeout", type=float, default=0.0,
                   help="ask the server for this deadline of each query's embedding, s (operator calls; at most "
                        "its request deadline; default 0: the server's)")
    p.add_argument("--no-baseline", action="store_true", help="skip the in-process baseline")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--needle-tokens", type=int, default=200, help="rare-token needles per tenant (default 200)")
    p.add_argument("--needle-phrases", type=int, default=100, help="quoted-phrase needles per tenant (default 100)")
    p.add_argument("--completion-queries", type=int, default=200,
                   help="queries for the score-completion latency A/B (default 200; 0 = skip)")
    p.add_argument("--completion-top-k", type=int, default=50,
                   help="candidates per leg in that A/B (default 50, the service default: agent-sized)")
    p.add_argument("--query-split", type=Path,
                   help="tune/heldout query split (default benchmarks/splits/<dataset>-<split>.json if present)")
    p.add_argument("--fail-on-targets", action="store_true",
                   help="exit 3 when a quality target (needles, nDCG vs baseline, calibration) is missed")
    scale = p.add_argument_group("one-node scale (--scale: benchmarks/scale.py, synthetic tenants; the options "
                                 "above do not apply)")
    scale.add_argument("--scale", action="store_true",
                       help="run the scale benchmark: 10k/100k/1M-chunk tenants and 1,000 small tenants")
    add_scale_arguments(scale, with_out=False)
    p.add_argument("--federate", type=int, default=0, metavar="N",
                   help="federated search instead: split the (first) dataset over the local store and N-1 remote "
                        "RAG servers (Nucleus stacks and an independent one) and compare the unified ranking, a "
                        "raw-score sort, RRF over sources and the single index (benchmarks/federate.py)")
    p.add_argument("--federate-queries", type=int, default=300, help="--federate: judged queries (default 300)")
    p.add_argument("--federate-docs", type=int, default=1200,
                   help="--federate: documents, the queries' judged ones plus distractors (default 1200; 0 = all)")
    p.add_argument("--foreign-scale", choices=("bm25", "distance"), default="bm25",
                   help="--federate: the independent server's score scale (default bm25)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from benchmarks.federate import run_federate
    from benchmarks.harness import run_bench
    from benchmarks.scale import run_and_report

    if args.federate:
        return run_federate(argparse.Namespace(
            sources=args.federate, dataset=args.dataset[0], split=args.split, tenant=args.tenant[0],
            cache_dir=args.cache_dir, top_k_initial=args.top_k_initial, timeout=args.timeout,
            queries=args.federate_queries, docs=args.federate_docs, foreign_scale=args.foreign_scale,
            source_timeout=10.0, rescore_rounds=20, remote_hits=20, use_running=args.use_running,
            data_dir=getattr(args, "data_dir", None)))

    if args.scale:
        return run_and_report(args)
    if not args.dataset or not args.tenant:
        raise InvalidArgument("--dataset" if not args.dataset else "--tenant",
                              "give at least one --dataset with its --tenant (or --scale for the scale benchmark)")
    if len(args.tenant) != len(args.dataset):
        raise InvalidArgument("--tenant", f"{len(args.tenant)} tenants for {len(args.dataset)} datasets; give one "
                                          "--tenant per --dataset, in the same order")
    if args.ks_backend:
        # The stack's services inherit the environment (benchmarks/stack.py).
        os.environ["NUCLEUS_KS_BACKEND"] = args.ks_backend
        if args.ks_backend == "qdrant":
            if args.stack_dir is None:
                args.stack_dir = args.cache_dir / "stack-data-qdrant"
            if not os.environ.get("NUCLEUS_QDRANT_URL"):
                os.environ.setdefault("NUCLEUS_QDRANT_PATH", str(args.stack_dir.resolve() / "qdrant"))
    running_dir = running_data_dir(args) if args.use_running else None
    options = BenchOptions(
        datasets=list(args.dataset), tenants=list(args.tenant), split=args.split, tenant_slices=args.tenant_slices,
        use_running=args.use_running, running_data_dir=running_dir, cache_dir=args.cache_dir.resolve(),
        stack_dir=args.stack_dir.resolve() if args.stack_dir else None,
        out_dir=args.out.resolve() if args.out else None, top_k_initial=args.top_k_initial,
        top_k_final=args.top_k_final, dense_weights=args.dense_weights, concurrency=args.concurrency,
        throughput_queries=args.throughput_queries, max_queries=args.max_queries, ingest_batch=args.ingest_batch,
        force_ingest=args.force_ingest, timeout_s=args.timeout, embed_timeout_s=args.embed_timeout,
        warmup=args.warmup, query_cache=args.query_cache,
        baseline=not args.no_baseline,
        plots=not args.no_plots, needle_tokens=args.needle_tokens, needle_phrases=args.needle_phrases,
        completion_queries=args.completion_queries, completion_top_k=args.completion_top_k,
        query_split=args.query_split.resolve() if args.query_split else None, fail_on_targets=args.fail_on_targets)
    console = Console() if sys.stdout.isatty() else Console(width=140)   # logs keep whole table rows
    result = run_bench(options, console)
    if result["isolation"]["violations"]:
        return 1
    missed = [t for t in result.get("ranking_checks", {}).get("targets", []) if not t["met"]]
    return 3 if missed and options.fail_on_targets else 0
