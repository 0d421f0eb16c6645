"""The extractive answer, replayed offline: the passages retrieval gave each question of
lab/answer_pairs.json, captured once from a stack, then answered in process by LlmOrchestration's
own core (the real embedding model, no chat model), so a change of the method is measured in
seconds, not a stack start.

    .venv/bin/python -m lab.answer_offline --capture [--use-running D] # passages from a stack holding
                                                                      # the corpus (lab.answer_extract's)
    .venv/bin/python -m lab.answer_offline [--top-k 5|10]             # replay: the hit rate
    .venv/bin/python -m lab.answer_offline --cross-encoder DIR        # ... the answer units also scored by a
    .venv/bin/python -m lab.answer_offline --rerank-api URL           # model re-ranker (docs/MODELS.md)
    .venv/bin/python -m lab.answer_offline --cost [--rounds 3]        # what that costs per answer (MiniLM-L6-sized)

`--capture` asks the stack's `rag_get_raw_results` (the same retrieval `rag_get_synthesized_results`
uses) for the top 10 passages of every question and writes them to
.bench-cache/answer_passages.json; the replay gives `LlmOrchestrator.synthesize` the first
`--top-k` of them exactly as the tool does (ids S1…, title, chunk text). The shipped figure is
lab/answer_extract.py's, through the whole stack; this one agrees with it for the same top k.

A deployment with real re-ranker weights measures what they add: `--cross-encoder DIR` (a
Hugging Face / sentence-transformers CrossEncoder folder) or `--rerank-api URL` (`--rerank-api-format`,
`--rerank-api-model`; the key from NUCLEUS_LLM_RERANK_API_KEY) configures it exactly as the
NUCLEUS_LLM_* settings do, and the extractive answer blends its unit scores in with `--weight`
(NUCLEUS_LLM_SYNTHESIS_RERANK_WEIGHT, default 0.5). The methods used and any degraded answers are printed.

`--cost` needs no weights: it builds a cross-encoder the size of ms-marco-MiniLM-L-6-v2 with random
weights (lab.rerank_cost's), and answers every captured question alternately without and with it
(two orchestrators, the same passages), printing the time the unit scoring adds per answer (p50 /
p95 of the paired difference) beside the units per answer and the tokens per (question, unit) pair.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
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


def shown_passages(passages: dict[str, Any], pair_id: str, top_k: int) -> list[tuple[str, str, str]]:
    """What the tool gives the synthesis: ids S1…, the title, the chunk text."""
    return [(f"S{i + 1}", h["title"], h["text"]) for i, h in enumerate(passages[pair_id][:top_k])]


def orchestrator(**settings: Any) -> Any:
    from services.llm_orchestration.core import LlmOrchestrator
    from shared.settings import LlmOrchestrationSettings

    return LlmOrchestrator(LlmOrchestrationSettings(chat_model="", openai_base_url="", **settings))


async def replay(passages: dict[str, Any], top_k: int, pairs_file: Path = PAIRS,
                 settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """`settings`: more LlmOrchestration settings (a re-ranker, `synthesis_rerank_weight`)."""
    orch = orchestrator(**(settings or {}))
    await orch.start()
    rows: list[dict[str, Any]] = []
    try:
        for p in load_pairs(pairs_file):
            shown = passages[p["id"]][:top_k]
            result = await orch.synthesize(p["question"], shown_passages(passages, p["id"], top_k))
            answer = result.answer
            retrieved = any(h["artifact"] == p["doc"] for h in shown)
            rows.append({"id": p["id"], "kind": p["kind"], "question": p["question"], "phrase": p["answer"],
                         "hit": is_hit(answer, p["answer"]), "chars": len(answer), "method": result.method,
                         "degraded": list(result.degraded_reasons),
                         "answer": answer, "answer_document_retrieved": retrieved,
                         "in_passages": any(is_hit(h["text"], p["answer"]) for h in shown)})
    finally:
        await orch.close()
    return {"pairs": rows, "summary": summarise(rows)}


async def cost(passages: dict[str, Any], top_k: int, rounds: int, max_length: int, work: Path,
               pairs_file: Path = PAIRS) -> dict[str, Any]:
    """Per answer: the time with the MiniLM-L6-sized cross-encoder scoring the units minus the
    time without it, the two answered alternately on the same passages."""
    import statistics
    import time

    from benchmarks.metrics import percentile
    from lab.rerank_cost import build_minilm_sized_cross_encoder
    from services.llm_orchestration import synthesis as synth

    load_before = round(os.getloadavg()[0], 2)
    model = build_minilm_sized_cross_encoder(work / "cross-encoder")
    plain = orchestrator(synthesis_reranker="off", cache_size=0)
    scored = orchestrator(cross_encoder_path=str(model), cross_encoder_max_length=max_length,
                          onnx_cache_dir=str(work / "onnx"), synthesis_reranker="cross-encoder", cache_size=0)
    await plain.start()
    await scored.start()
    questions = [(p["question"], shown_passages(passages, p["id"], top_k)) for p in load_pairs(pairs_file)]
    tok = scored._cross_encoder._tokenizer        # noqa: SLF001 - a benchmark may look inside
    units = [synth.answer_units(shown) for _, shown in questions]
    pair_tokens = [min(max_length, len(tok(q, u.context)["input_ids"])) for (q, _), us in zip(questions, units)
                   for u in us]
    times: dict[str, list[float]] = {"extractive": [], "extractive+cross-encoder": [], "added": []}
    try:
        for orch in (plain, scored):                              # warm-up
            await orch.synthesize(*questions[0])
        for _ in range(rounds):
            for q, shown in questions:
                took = {}
                for orch in (plain, scored):
                    t0 = time.perf_counter()
                    result = await orch.synthesize(q, shown)
                    took[result.method] = (time.perf_counter() - t0) * 1000.0
                    if result.degraded:
                        raise SystemExit(f"the cross-encoder failed: {result.degraded_reasons}")
                for method, ms in took.items():
                    times[method].append(ms)
                times["added"].append(took["extractive+cross-encoder"] - took["extractive"])
    finally:
        await plain.close()
        await scored.close()
    counts = [len(us) for us in units]
    encoder = scored._cross_encoder                # noqa: SLF001
    return {"model": "BERT 6x384, 12 heads, FFN 1536 (MiniLM-L6-sized), random weights",
            "runtime": encoder.runtime, "max_length": max_length,
            "batch_size": encoder.batch_size, "answers": len(questions), "rounds": rounds,
            "units_per_answer_mean": round(statistics.mean(counts), 1), "units_per_answer_max": max(counts),
            "tokens_per_pair_mean": round(statistics.mean(pair_tokens), 1),
            "load_avg_1m": load_before, "load_avg_1m_after": round(os.getloadavg()[0], 2),
            **{f"{k}_ms": {"p50": round(percentile(v, 50), 1), "p95": round(percentile(v, 95), 1)}
               for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capture", action="store_true")
    parser.add_argument("--pairs", type=Path, default=PAIRS, help="question -> answer-phrase pairs (JSON)")
    parser.add_argument("--use-running", type=Path, metavar="DATA_DIR")
    parser.add_argument("--stack-dir", type=Path, default=ROOT / ".bench-cache" / "answer-stack",
                        help="lab.answer_extract's stack (the corpus already ingested)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--chunks", action="store_true", help="rank chunks, not artifacts (replay passages "
                        "captured so: a setting until issue 41, `--capture --chunks` ran at e02fe72)")
    parser.add_argument("--show", action="store_true")
    parser.add_argument("--cross-encoder", type=Path, metavar="DIR", help="score the answer units with this "
                        "cross-encoder folder too (NUCLEUS_LLM_CROSS_ENCODER_PATH)")
    parser.add_argument("--rerank-api", metavar="URL", help="... or with this /rerank API (NUCLEUS_LLM_RERANK_API_URL; "
                        "the key from NUCLEUS_LLM_RERANK_API_KEY)")
    parser.add_argument("--rerank-api-format", choices=("cohere", "tei"), default="cohere")
    parser.add_argument("--rerank-api-model", default="")
    parser.add_argument("--weight", type=float, default=0.5, help="NUCLEUS_LLM_SYNTHESIS_RERANK_WEIGHT")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per (question, unit) pair")
    parser.add_argument("--cost", action="store_true", help="time a MiniLM-L6-sized cross-encoder adds per answer")
    parser.add_argument("--rounds", type=int, default=3, help="--cost: passes over the questions")
    args = parser.parse_args()
    if args.capture and args.chunks:
        parser.error("--capture --chunks needs the removed NUCLEUS_RAG_COLLAPSE_BY_ARTIFACT: run it at e02fe72")
    if args.capture:
        from benchmarks.stack import own_stack, running_stack
        from lab.answer_extract import TENANT
        stack = running_stack(args.use_running.resolve()) if args.use_running else own_stack(
            args.stack_dir, extra_env={"NUCLEUS_LOCAL_TENANT": TENANT, "NUCLEUS_LOCAL_GROUPS": "",
                                       "NUCLEUS_LLM_CHAT_MODEL": ""})
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
    source = captured_file(args.chunks, args.pairs.resolve())
    if not source.is_file():
        flag = " --chunks" if args.chunks else ""
        raise SystemExit(f"{source} is missing: capture the passages first (--capture{flag})")
    captured = json.loads(source.read_text())
    if args.cost:
        with tempfile.TemporaryDirectory(prefix="answer-cost-") as tmp:
            c = asyncio.run(cost(captured, args.top_k, args.rounds, args.max_length, Path(tmp), args.pairs.resolve()))
        print(f"{c['model']}, runtime {c['runtime']}, max_length {c['max_length']}, batch {c['batch_size']}; "
              f"{c['answers']} answers x {c['rounds']} rounds (top {args.top_k} passages), "
              f"load avg {c['load_avg_1m']} before, {c['load_avg_1m_after']} after")
        print(f"units per answer: mean {c['units_per_answer_mean']}, max {c['units_per_answer_max']}; "
              f"tokens per (question, unit) pair: mean {c['tokens_per_pair_mean']}")
        for key in ("extractive", "extractive+cross-encoder", "added"):
            print(f"{key:<26} p50 {c[key + '_ms']['p50']:>7} ms   p95 {c[key + '_ms']['p95']:>7} ms")
        return
    settings: dict[str, Any] = {"synthesis_rerank_weight": args.weight, "cross_encoder_max_length": args.max_length}
    if args.cross_encoder:
        settings["cross_encoder_path"] = str(args.cross_encoder.resolve())
    if args.rerank_api:
        settings.update(rerank_api_url=args.rerank_api, rerank_api_format=args.rerank_api_format,
                        rerank_api_model=args.rerank_api_model)
    result = asyncio.run(replay(captured, args.top_k, args.pairs.resolve(), settings))
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
    degraded = [r for r in result["pairs"] if r["degraded"]]
    print(f"methods: {', '.join(result['summary']['methods'])}; degraded answers: {len(degraded)}"
          + (f" (first: {degraded[0]['degraded'][0]})" if degraded else ""))


if __name__ == "__main__":
    main()
