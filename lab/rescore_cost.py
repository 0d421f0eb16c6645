"""Where the time of scoring 20 remote hits' BM25 and richness goes, in process (no RPC).

    .venv/bin/python -m lab.rescore_cost [--dataset ../shared/data/scifact] [--rounds 60]

The texts are what a remote Nucleus sends: one stored chunk each (the first chunk of a SciFact
abstract as ingest cuts it, its title as the context line), 20 a round, new texts every round.
The tenant's keyword index holds 400 other chunks. Per round, ms for 20 texts:

    prepare       external_texts.prepare (what ScoreKeywords does: each text read once), on
                  texts nothing has read yet (the stemmer caches the words it has seen); the
                  steps below re-read the round's texts
      words       analysis.words of every title and text (the regex pass)
      stem        stopwords dropped and the rest stemmed (analysis.analyse_words)
      tokens      chunking.estimate_tokens (richness' length, the one-chunk check)
      richness    the rest of richness (lexical density's set, structure's regexes)
    bm25          KeywordIndex.score_documents of a 6-term query (the tenant's statistics)

Figures only: nothing is asserted (tests/unit/knowledge_store/test_external_texts.py checks
that `prepare` gives what chunking, analysing and scoring richness text by text gives).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from services.knowledge_store.chunking import chunk_document, context_line, estimate_tokens
from services.knowledge_store.embedded.keyword_index import KeywordIndex
from services.knowledge_store.external_texts import prepare
from services.knowledge_store.keywords import DEFAULT_BM25_WEIGHTS
from services.knowledge_store.richness import lexical_density, structure
from shared.analysis import analyse, analyse_words, query_terms, words
from shared.settings import KnowledgeStoreSettings

ROOT = Path(__file__).resolve().parent.parent
HITS = 20


def stored_chunks(dataset: Path, count: int) -> list[tuple[str, str]]:
    s = KnowledgeStoreSettings()
    out = []
    with (dataset / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            parts = chunk_document(d["text"], markdown=False, title=d["title"], chunk_tokens=s.chunk_tokens,
                                   overlap_tokens=s.chunk_overlap_tokens)
            if parts:
                out.append((context_line(d["title"], parts[0].path), parts[0].text))
            if len(out) == count:
                return out
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    p.add_argument("--rounds", type=int, default=60)
    args = p.parse_args()
    s = KnowledgeStoreSettings()
    texts = stored_chunks(args.dataset, 400 + 2 * HITS * args.rounds)
    index = KeywordIndex.build(((i + 1, " ".join(analyse(t)), " ".join(analyse(x)))
                                for i, (t, x) in enumerate(texts[:400])), DEFAULT_BM25_WEIGHTS)
    terms = query_terms(["Reduced protein expression in tumour cells increases mortality"])
    batches = [texts[400 + r * HITS:400 + (r + 1) * HITS] for r in range(args.rounds)]
    start = 400 + HITS * args.rounds
    fresh = [texts[start + r * HITS:start + (r + 1) * HITS] for r in range(args.rounds)]
    prepared = [prepare(b, chunk_tokens=s.chunk_tokens, overlap_tokens=s.chunk_overlap_tokens) for b in batches]
    steps = {
        "prepare": lambda b, _: prepare(b, chunk_tokens=s.chunk_tokens, overlap_tokens=s.chunk_overlap_tokens),
        "  words": lambda b, _: [(words(t), words(x)) for t, x in b],
        "  stem": lambda b, w: [(analyse_words(a), analyse_words(c)) for a, c in w],
        "  tokens": lambda b, _: [estimate_tokens(x) for _, x in b],
        "  richness": lambda b, w: [(lexical_density(x, c), structure(x, under_heading=False))
                                    for (_, x), (_, c) in zip(b, w)],
        "bm25": lambda b, r: index.score_documents(terms, r.docs),
    }
    got: dict[str, list[float]] = {k: [] for k in steps}
    for r, (batch, prep) in enumerate(zip(batches, prepared)):
        t0 = time.perf_counter()
        steps["prepare"](fresh[r], None)
        got["prepare"].append((time.perf_counter() - t0) * 1000.0)
        split = [(words(t), words(x)) for t, x in batch]
        for name, step in steps.items():
            if name == "prepare":
                continue
            arg = prep if name == "bm25" else split
            t0 = time.perf_counter()
            step(batch, arg)
            got[name].append((time.perf_counter() - t0) * 1000.0)
    print(f"{HITS} stored chunks a round ({statistics.mean(len(x) for _, x in texts[400:]):.0f} characters on "
          f"average), {args.rounds} rounds, ms p50:")
    for name, values in got.items():
        print(f"  {name:<12} {statistics.median(values):6.2f}")


if __name__ == "__main__":
    main()
