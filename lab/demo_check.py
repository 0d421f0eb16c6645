"""Ranking on the Acme Robotics demo corpus: written queries with graded judgements and the
corpus's own needle set, through the real services with the default profile.

    .venv/bin/python -m lab.demo_check                      # own stack in .bench-cache/demo-stack
    .venv/bin/python -m lab.demo_check --use-running D      # a stack started with `nucleus up` on D

Ingests demo/corpus (front matter and all: dates, sources, reputations, groups) into tenant
`demo-check`, runs every query of lab/demo_queries.json through
RAGPipeline.SearchAndRank (no ranking preferences: the tenant's default profile, else the
built-in one; no authentication, so no visibility filter) and reports per query the first
three documents, whether the first is a grade-2 answer, and nDCG@10 over the judgements; then
the needle set of the corpus (benchmarks/needles.py). `--json FILE` writes every figure.
Comparing two revisions = running this against a stack of each (same queries, same corpus).
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from benchmarks import needles as needles_mod
from benchmarks.metrics import ndcg_at_k, mrr_at_k
from benchmarks.queries import Method, RagClient
from benchmarks.stack import own_stack, running_stack
from shared.documents import iter_paths, load_document

ROOT = Path(__file__).resolve().parent.parent
QUERIES = Path(__file__).resolve().parent / "demo_queries.json"
TENANT = "demo-check"


async def run(rag_target: str, ks_target: str, *, ingest: bool) -> dict:
    from services.knowledge_store.client import KnowledgeStoreClient

    docs = [load_document(p) for p in iter_paths(ROOT / "demo" / "corpus")]
    if ingest:
        ks = KnowledgeStoreClient(ks_target, ingest_timeout_s=600.0)
        try:
            await ks.ingest(TENANT, "", docs)
        finally:
            await ks.close()
    queries = json.loads(QUERIES.read_text(encoding="utf-8"))["queries"]
    needle_set = needles_mod.generate([d.artifact.artifact_id for d in docs], [d.artifact.title for d in docs],
                                      [d.content for d in docs])
    client = RagClient(rag_target, top_k_initial=50, top_k_final=10, timeout_s=30.0)
    default = Method("default")
    per_query, needle_hits = [], {}
    try:
        for q in queries:
            record = await client.search(TENANT, default, q["id"], q["text"])
            if record.error:
                raise RuntimeError(f"query {q['id']} failed: {record.error}")
            best = {d for d, g in q["relevant"].items() if g == 2}
            per_query.append({"id": q["id"], "kind": q["kind"], "text": q["text"], "top3": record.doc_ids[:3],
                              "first_is_best": bool(record.doc_ids) and record.doc_ids[0] in best,
                              "ndcg@10": ndcg_at_k(record.doc_ids, q["relevant"], 10),
                              "mrr@10": mrr_at_k(record.doc_ids, q["relevant"], 10)})
        for n in needle_set:
            record = await client.search(TENANT, default, n.id, n.query)
            needle_hits[n.id] = needles_mod.hits(record.doc_ids, n.doc_id)
    finally:
        await client.close()
    kinds = sorted({q["kind"] for q in per_query})
    summary = {k: {"queries": len(rows), "first_is_best": sum(r["first_is_best"] for r in rows),
                   "ndcg@10": sum(r["ndcg@10"] for r in rows) / len(rows)}
               for k in kinds + ["all"] for rows in [[r for r in per_query if k in ("all", r["kind"])]]}
    return {"queries": per_query, "summary": summary, "needles": needles_mod.summarise(needle_hits, needle_set)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--use-running", type=Path, metavar="DATA_DIR", help="data dir of a running stack")
    parser.add_argument("--stack-dir", type=Path, default=ROOT / ".bench-cache" / "demo-stack")
    parser.add_argument("--no-ingest", action="store_true", help="the tenant already holds the corpus")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    stack = running_stack(args.use_running.resolve()) if args.use_running else own_stack(args.stack_dir)
    try:
        result = asyncio.run(run(stack.grpc("rag_pipeline"), stack.grpc("knowledge_store"), ingest=not args.no_ingest))
    finally:
        if stack.started_here:
            stack.stop()
    for q in result["queries"]:
        mark = "ok " if q["first_is_best"] else "-- "
        print(f"{mark}{q['id']:<3} nDCG@10 {q['ndcg@10']:.3f}  {q['text'][:60]:<60}  {', '.join(q['top3'])}")
    for kind, s in result["summary"].items():
        print(f"{kind:<10} {s['first_is_best']}/{s['queries']} first is a best answer, nDCG@10 {s['ndcg@10']:.3f}")
    for kind, s in result["needles"].items():
        print(f"needles {kind:<7} {s['needles']:>4}  hit@1 {s['hit@1']:.3f}  hit@5 {s['hit@5']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
