"""The extractive answer, replayed offline: the passages retrieval gave each question of
lab/answer_pairs.json, captured once from a stack, then answered in process by LlmOrchestration's
own core (the real embedding model, no chat model), so a change of the method is measured in
seconds, not a stack start.

    .venv/bin/python -m lab.answer_offline --capture [--use-running D] # passages from a stack holding
                                                                      # the corpus (lab.answer_extract's)
    .venv/bin/python -m lab.answer_offline [--top-k 5|10]             # replay: the hit rate

`--capture` asks the stack's `rag_get_raw_results` (the same retrieval `rag_get_synthesized_results`
uses) for the top 10 passages of every question and writes them to
.bench-cache/answer_passages.json; the replay gives `LlmOrchestrator.synthesize` the first
`--top-k` of them exactly as the tool does (ids S1…, title, chunk text). The shipped figure is
lab/answer_extract.py's, through the whole stack; this one agrees with it for the same top k.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from lab.answer_extract import PAIRS, ROOT, is_hit, load_pairs, summarise

CAPTURED = ROOT / ".bench-cache" / "answer_passages.json"
CAPTURE_K = 10


def captured_file(chunks: bool, pairs_file: Path = PAIRS) -> Path:
    """Where the passages of `pairs_file`'s questions are kept (one file per pairs file)."""
    stem = "" if pairs_file.resolve() == PAIRS else f"_{pairs_file.stem}"
    return CAPTURED.with_name(f"answer_passages{'_chunks' if chunks else ''}{stem}.json")


async def capture(mcp_url: str, pairs_file: Path = PAIRS) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    pairs = load_pairs(pairs_file)
    out: dict[str, Any] = {}
    async with Client(streamable_http_client(mcp_url, http_client=create_mcp_http_client())) as client:
        found = await client.call_tool("rag_discover_resources", {"username": ""})
        sources = [r["id"] for r in ((found.structured_content or {}).get("results") or {}).get("resources", [])]
        for p in pairs:             # every source named: the same scope as naming none
            result = await client.call_tool("rag_get_raw_results", {"query": p["question"], "top_k": CAPTURE_K,
                                                                    "username": "", "sources": sources})
            hits = ((result.structured_content or {}).get("results") or {}).get("hits") or []
            out[p["id"]] = [{"title": h["title"], "text": h["chunk"], "artifact": h["sourceId"]} for h in hits]
    return out


async def replay(passages: dict[str, Any], top_k: int, pairs_file: Path = PAIRS) -> dict[str, Any]:
    from services.llm_orchestration.core import LlmOrchestrator
    from shared.settings import LlmOrchestrationSettings

    orch = LlmOrchestrator(LlmOrchestrationSettings(chat_model="", openai_base_url=""))
    await orch.start()
    rows: list[dict[str, Any]] = []
    try:
        for p in load_pairs(pairs_file):
            shown = passages[p["id"]][:top_k]
            answer = (await orch.synthesize(p["question"], [(f"S{i + 1}", h["title"], h["text"])
                                                            for i, h in enumerate(shown)])).answer
            retrieved = any(h["artifact"] == p["doc"] for h in shown)
            rows.append({"id": p["id"], "kind": p["kind"], "question": p["question"], "phrase": p["answer"],
                         "hit": is_hit(answer, p["answer"]), "chars": len(answer), "method": "extractive",
                         "answer": answer, "answer_document_retrieved": retrieved,
                         "in_passages": any(is_hit(h["text"], p["answer"]) for h in shown)})
    finally:
        await orch.close()
    return {"pairs": rows, "summary": summarise(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capture", action="store_true")
    parser.add_argument("--pairs", type=Path, default=PAIRS, help="question -> answer-phrase pairs (JSON)")
    parser.add_argument("--use-running", type=Path, metavar="DATA_DIR")
    parser.add_argument("--stack-dir", type=Path, default=ROOT / ".bench-cache" / "answer-stack",
                        help="lab.answer_extract's stack (the corpus already ingested)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--chunks", action="store_true", help="rank chunks, not artifacts (capture with "
                        "NUCLEUS_RAG_COLLAPSE_BY_ARTIFACT=false; replay those passages)")
    parser.add_argument("--show", action="store_true")
    args = parser.parse_args()
    if args.capture:
        from benchmarks.stack import own_stack, running_stack
        from lab.answer_extract import TENANT
        stack = running_stack(args.use_running.resolve()) if args.use_running else own_stack(
            args.stack_dir, extra_env={"NUCLEUS_LOCAL_TENANT": TENANT, "NUCLEUS_LOCAL_GROUPS": "",
                                       "NUCLEUS_LLM_CHAT_MODEL": "",
                                       "NUCLEUS_RAG_COLLAPSE_BY_ARTIFACT": "false" if args.chunks else "true"})
        try:
            captured = asyncio.run(capture(stack.services["rag_pipeline"]["mcp"], args.pairs.resolve()))
        finally:
            if stack.started_here:
                stack.stop()
        target = captured_file(args.chunks, args.pairs.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(captured, indent=1))
        print(f"wrote {target}")
        return
    result = asyncio.run(replay(json.loads(captured_file(args.chunks, args.pairs.resolve()).read_text()), args.top_k,
                                args.pairs.resolve()))
    for r in result["pairs"]:
        if args.show or not r["hit"]:
            why = "" if r["hit"] else (" (answer not in the passages shown)" if not r["in_passages"] else "")
            print(f"{'ok ' if r['hit'] else '-- '}{r['id']} {r['kind']:<11} {r['question']}{why}\n"
                  f"     phrase: {r['phrase']}\n     answer ({r['chars']} chars): {r['answer']}\n")
    for kind, s in result["summary"].items():
        if kind != "methods":
            print(f"{kind:<12} {s['hits']:>2}/{s['pairs']} = {s['hit_rate']:.3f}   answer chars median "
                  f"{s['chars_median']}, max {s['chars_max']}, over 400: {s['over_400']}")
    print(f"answer phrase in the passages shown: {sum(r['in_passages'] for r in result['pairs'])}/"
          f"{len(result['pairs'])}")


if __name__ == "__main__":
    main()
