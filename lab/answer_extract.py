"""Extractive answers on the demo corpus: is the answer phrase among the sentences shown?

    .venv/bin/python -m lab.answer_extract                  # own stack in .bench-cache/answer-stack
    .venv/bin/python -m lab.answer_extract --use-running D  # a stack started with `nucleus up` on D
    .venv/bin/python -m lab.answer_extract --pairs lab/answer_pairs_heldout.json   # the held-out pairs

Ingests demo/corpus into the local principal's tenant (`demo`; no groups, so restricted
documents stay hidden), then asks every question of lab/answer_pairs.json (or `--pairs FILE`,
e.g. the held-out lab/answer_pairs_heldout.json) exactly as
`nucleus ask` does without an LLM: the RAGPipeline MCP tool `rag_get_synthesized_results`
with `top_k` 5, no synthesis parameters, so the stack has no chat model and LlmOrchestration
answers extractively. A pair is a hit when its answer phrase appears in the answer
(case-folded; markdown emphasis, backticks, table bars, [citations] and runs of whitespace
ignored). Reports the hit rate (all, literal, paraphrased), the answer lengths and the misses.
`--json FILE` writes every answer.

Its own stack is started fresh from the working tree and stopped afterwards, so the figures are
those of the code checked out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
from pathlib import Path
from typing import Any

from benchmarks.stack import own_stack, running_stack
from shared.documents import iter_paths, load_document

ROOT = Path(__file__).resolve().parent.parent
PAIRS = Path(__file__).resolve().parent / "answer_pairs.json"
TENANT = "demo"
TOP_K = 5                               # as cli/agent/loop.py's retrieval-only answer asks
_CITATION = re.compile(r"\[[^\[\]\n]{1,64}\]")


def normalise(text: str) -> str:
    """What a hit is matched on: citations, markdown emphasis, backticks and table bars dropped,
    whitespace collapsed, case-folded."""
    text = _CITATION.sub(" ", text)
    text = re.sub(r"[*`]", "", text).replace("|", " ")
    return " ".join(text.casefold().split())


def is_hit(answer: str, phrase: str) -> bool:
    return normalise(phrase) in normalise(answer)


def load_pairs(path: Path = PAIRS) -> list[dict[str, Any]]:
    """The pairs of a file in lab/answer_pairs.json's format; each needs id, kind, doc, question, answer."""
    pairs = json.loads(path.read_text(encoding="utf-8"))["pairs"]
    for p in pairs:
        missing = {"id", "kind", "doc", "question", "answer"} - set(p)
        if missing or p["kind"] not in ("literal", "paraphrased"):
            raise SystemExit(f"{path}: pair {p.get('id', '?')} lacks {sorted(missing)} or has a kind other than "
                             "literal / paraphrased")
    return pairs


async def _ingest(ks_target: str) -> int:
    from services.knowledge_store.client import KnowledgeStoreClient

    docs = [load_document(p) for p in iter_paths(ROOT / "demo" / "corpus")]
    ks = KnowledgeStoreClient(ks_target, ingest_timeout_s=600.0)
    try:
        await ks.ingest(TENANT, "", docs)
    finally:
        await ks.close()
    return len(docs)


async def run(mcp_url: str, ks_target: str, *, ingest: bool, pairs_file: Path = PAIRS) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if ingest:
        await _ingest(ks_target)
    pairs = load_pairs(pairs_file)
    rows: list[dict[str, Any]] = []
    async with Client(streamable_http_client(mcp_url, http_client=create_mcp_http_client())) as client:
        for p in pairs:
            result = await client.call_tool("rag_get_synthesized_results", {"query": p["question"], "top_k": TOP_K,
                                                                                  "username": ""})
            body = result.structured_content or {}
            answer = ((body.get("results") or {}).get("answer")) or ""
            meta = body.get("meta_data") or {}
            error = (body.get("results") or {}).get("error") or meta.get("error")
            if not body:
                error = " ".join(getattr(c, "text", "") for c in result.content)[:300] or "no structured result"
            rows.append({"id": p["id"], "kind": p["kind"], "question": p["question"], "phrase": p["answer"],
                         "hit": is_hit(answer, p["answer"]), "chars": len(answer), "method": meta.get("method"),
                         "answer": answer, "error": error})
    return {"pairs": rows, "summary": summarise(rows)}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("all", "literal", "paraphrased"):
        chosen = [r for r in rows if kind in ("all", r["kind"])]
        if not chosen:
            continue
        lengths = [r["chars"] for r in chosen]
        out[kind] = {"pairs": len(chosen), "hits": sum(r["hit"] for r in chosen),
                     "hit_rate": round(sum(r["hit"] for r in chosen) / len(chosen), 3),
                     "chars_median": statistics.median(lengths), "chars_max": max(lengths),
                     "over_400": sum(n > 400 for n in lengths)}
    out["methods"] = sorted({str(r["method"]) for r in rows})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=Path, default=PAIRS, help="question -> answer-phrase pairs (JSON)")
    parser.add_argument("--use-running", type=Path, metavar="DATA_DIR", help="data dir of a running stack")
    parser.add_argument("--stack-dir", type=Path, default=ROOT / ".bench-cache" / "answer-stack")
    parser.add_argument("--no-ingest", action="store_true", help="the tenant already holds the corpus")
    parser.add_argument("--json", type=Path, help="write every answer here")
    parser.add_argument("--show", action="store_true", help="print every answer, not only the misses")
    args = parser.parse_args()
    if args.use_running:
        stack = running_stack(args.use_running.resolve())
    else:
        # A stack left running would serve older code: start one from this working tree.
        (args.stack_dir / "run" / "stack.json").unlink(missing_ok=True)
        stack = own_stack(args.stack_dir, extra_env={"NUCLEUS_LOCAL_TENANT": TENANT, "NUCLEUS_LOCAL_GROUPS": "",
                                                     "NUCLEUS_LLM_CHAT_MODEL": ""})
    try:
        result = asyncio.run(run(stack.services["rag_pipeline"]["mcp"], stack.grpc("knowledge_store"),
                                 ingest=not args.no_ingest, pairs_file=args.pairs))
    finally:
        if stack.started_here:
            stack.stop()
    for r in result["pairs"]:
        if args.show or not r["hit"]:
            print(f"{'ok ' if r['hit'] else '-- '}{r['id']} {r['kind']:<11} {r['question']}\n"
                  f"     phrase: {r['phrase']}\n     answer ({r['chars']} chars): {r['answer']}"
                  + (f"\n     error: {r['error']}" if r["error"] else "") + "\n")
    for kind, s in result["summary"].items():
        if kind != "methods":
            print(f"{kind:<12} {s['hits']:>2}/{s['pairs']} = {s['hit_rate']:.3f}   answer chars median "
                  f"{s['chars_median']}, max {s['chars_max']}, over 400: {s['over_400']}")
    print(f"methods: {', '.join(result['summary']['methods'])}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
