"""Two BEIR sets for duplicate folding's nDCG on and off (`nucleus bench` method `default-folded`
beside `default`; docs/RANKING.md "Duplicates folded"), cut from a BEIR dataset:

    <out>/plain   every judged document of the split plus the first others, DOCS in all
    <out>/copies  the same, and every judged document again under `<id>-copy`, its text upper-cased
                  and its sentences spaced out (the same normalised text: a copy a PDF export or a
                  pasted wiki page makes). Copies are unjudged, so unfolded they crowd the page.

    python -m lab.duplicate_sets ../shared/data/scifact /tmp/dup-sets
    nucleus bench --dataset /tmp/dup-sets/plain --tenant dupplain --dataset /tmp/dup-sets/copies \
        --tenant dupcopies --no-baseline --dense-weights 0.5
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

DOCS = 1000


def write_sets(source: Path, out: Path, split: str = "test", docs: int = DOCS) -> dict[str, int]:
    """Write both sets under `out`; returns the documents of each."""
    with open(source / "qrels" / f"{split}.tsv", newline="") as f:
        judged = {row[1] for row in csv.reader(f, delimiter="\t") if row and row[0] != "query-id"}
    corpus = [json.loads(line) for line in open(source / "corpus.jsonl")]
    kept = [d for d in corpus if d["_id"] in judged]
    kept += [d for d in corpus if d["_id"] not in judged][:max(0, docs - len(kept))]
    copies = [dict(d, _id=f"{d['_id']}-copy", text="  " + d["text"].upper().replace(". ", ".  "))
              for d in kept if d["_id"] in judged]
    sizes = {}
    for name, documents in (("plain", kept), ("copies", kept + copies)):
        folder = out / name
        (folder / "qrels").mkdir(parents=True, exist_ok=True)
        (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
        (folder / "queries.jsonl").write_text((source / "queries.jsonl").read_text())
        (folder / "qrels" / f"{split}.tsv").write_text((source / "qrels" / f"{split}.tsv").read_text())
        sizes[name] = len(documents)
    return sizes


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m lab.duplicate_sets BEIR_DIR OUT_DIR")
    print(write_sets(Path(sys.argv[1]), Path(sys.argv[2])))
