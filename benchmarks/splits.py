"""Fixed query splits: the half of a dataset's judged queries that defaults may be tuned on
(`tune`) and the half they are reported on (`heldout`), committed under `benchmarks/splits/`.

    benchmarks/splits/<dataset name>-<split>.json
        {"dataset": "scifact", "split": "test", "rule": "...", "tune": [qid, ...], "heldout": [qid, ...]}

A split is made once (`make_split`: judged query ids ordered by sha256("<dataset>:<qid>"), the
first half tuning, the rest held out — no look at the queries' text or judgements) and then
only read: `nucleus bench` reports quality on each half and the whole whenever a split file
for the dataset exists, and the fusion lab (`lab/fusion_lab.py`) tunes on `tune` only.

    .venv/bin/python -m benchmarks.splits --dataset ../shared/data/scifact   # writes the file if missing
"""
from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from benchmarks.beir import BeirDataset, load_dataset
from shared.errors import InvalidArgument

SPLITS_DIR = Path(__file__).resolve().parent / "splits"
RULE = "judged query ids ordered by sha256('<dataset>:<query id>'); first half = tune, rest = heldout"


@dataclass(frozen=True, slots=True)
class QuerySplit:
    dataset: str
    split: str
    tune: tuple[str, ...]
    heldout: tuple[str, ...]

    def parts(self, query_ids: list[str]) -> dict[str, list[str]]:
        """`query_ids` (order kept) grouped as {"tune", "heldout", "all"}; ids in neither half
        (e.g. a query added to the qrels later) count in "all" only."""
        tune, held = set(self.tune), set(self.heldout)
        return {"tune": [q for q in query_ids if q in tune], "heldout": [q for q in query_ids if q in held],
                "all": list(query_ids)}


def path_for(dataset: str, split: str) -> Path:
    return SPLITS_DIR / f"{dataset}-{split}.json"


def make_split(dataset: BeirDataset) -> QuerySplit:
    qids = sorted(dataset.evaluated_query_ids,
                  key=lambda q: hashlib.sha256(f"{dataset.name}:{q}".encode()).hexdigest())
    half = len(qids) // 2
    return QuerySplit(dataset.name, dataset.split, tuple(sorted(qids[:half], key=_natural)),
                      tuple(sorted(qids[half:], key=_natural)))


def load_split(dataset: str, split: str, path: Path | None = None) -> QuerySplit | None:
    """The committed split of (dataset, split), or None when there is none."""
    path = path or path_for(dataset, split)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        result = QuerySplit(str(data["dataset"]), str(data["split"]), tuple(map(str, data["tune"])),
                            tuple(map(str, data["heldout"])))
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidArgument(str(path), f"is not a query split file ({err}); expected JSON with dataset, split, "
                                         "tune and heldout") from None
    if set(result.tune) & set(result.heldout):
        raise InvalidArgument(str(path), "names a query in both tune and heldout")
    return result


def write_split(split: QuerySplit, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f'  "dataset": {json.dumps(split.dataset)},', f'  "split": {json.dumps(split.split)},',
             f'  "rule": {json.dumps(RULE)},', f'  "tune": {json.dumps(list(split.tune))},',
             f'  "heldout": {json.dumps(list(split.heldout))}']
    path.write_text("{\n" + "\n".join(lines) + "\n}\n", encoding="utf-8")


def _natural(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", type=Path, help="write the split file here (default benchmarks/splits/"
                                                 "<dataset>-<split>.json)")
    args = parser.parse_args()
    dataset = load_dataset(args.dataset, args.split)
    path = args.out or path_for(dataset.name, dataset.split)
    if path.exists():
        print(f"{path} exists; a committed split is never rewritten")
        return
    split = make_split(dataset)
    write_split(split, path)
    print(f"wrote {path}: {len(split.tune)} tune, {len(split.heldout)} heldout")


if __name__ == "__main__":
    main()
