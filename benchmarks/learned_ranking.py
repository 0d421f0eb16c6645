"""Does a ranking learned from a tenant's judged queries beat the default profile? A 2-fold
cross-fit over a dataset's committed query split (benchmarks/splits/), paired per query.

    .venv/bin/python -m benchmarks.learned_ranking --dataset ../shared/data/scifact

For each direction (tune on one half, score the other): nested cross-validation on the tuning
half chooses among the candidate settings (services/rag_pipeline/learning/crossval.py) and trains
the chosen one; the other half only scores. Every query is thus scored once by a profile that
never saw it. Printed: the inner table of each direction, the default vs tuned nDCG@10 with the
paired gain, its 95 % bootstrap interval, wins/losses and the sign test — over all queries, per
direction, and for the held-out queries that share no judged document with their tuning half —
and the p50 time the re-ranker adds per query at N = 100 (features + model + second blend).

Candidates and features come from the corpus in process (benchmarks/field_index.py: the store's
analyser and BM25, the cached MiniLM vectors, the default profile through ranking/), not from a
running stack. Needs the `learn` extra (lightgbm, scipy).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.baseline import EmbeddingCache, encode, load_model
from benchmarks.beir import load_dataset
from benchmarks.field_index import FieldIndex, feature_matrix, title_vectors
from benchmarks.splits import RULE, load_split, make_split
from ranking import rank
from ranking.learned import learned_order
from services.rag_pipeline.learning.crossval import SETTINGS, Learner, Prepared, Setting, query_groups
from services.rag_pipeline.learning.report import paired
from services.rag_pipeline.learning.train import fit

ROOT = Path(__file__).resolve().parent.parent
REPEAT = 5


def query_vectors(dataset, model, cache_dir: Path) -> dict[str, np.ndarray]:
    qids = sorted(dataset.qrels)
    path = cache_dir / f"{dataset.name}_minilm_queries.npy"
    if path.is_file():
        cached = np.load(path)
        if cached.shape[0] == len(qids):
            return {q: cached[i].astype(np.float32) for i, q in enumerate(qids)}
    vectors = encode(model, [dataset.queries[q] for q in qids], batch_size=32)
    return {q: vectors[i] for i, q in enumerate(qids)}


def inputs(args: argparse.Namespace):
    """(dataset, its committed query split, the model, the field index, the query vectors) of
    `args.dataset` / `args.split`, vectors from `args.cache_dir` (encoded once when missing)."""
    dataset = load_dataset(args.dataset, args.split)
    split = load_split(dataset.name, dataset.split, args.query_split)
    if split is None and args.query_split:
        raise SystemExit(f"--query-split {args.query_split}: no such file")
    if split is None:
        split = make_split(dataset)
        print(f"no committed split for {dataset.name}-{dataset.split}; halves by the rule: {RULE}")
    model = load_model()
    doc_vectors, _ = EmbeddingCache(args.cache_dir).corpus_vectors(dataset, model)
    index = FieldIndex(dataset, doc_vectors, title_vectors(dataset, model, args.cache_dir))
    return dataset, split, model, index, query_vectors(dataset, model, args.cache_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".bench-cache")
    parser.add_argument("--query-split", type=Path, help="tune/heldout query split (default benchmarks/splits/"
                        "<dataset>-<split>.json; without one, made by benchmarks.splits' rule)")
    parser.add_argument("--settings", default="", help="';'-separated setting names the inner folds choose "
                        "among (default: all; the current profile is always one)")
    parser.add_argument("--force", action="append", default=[],
                        help="also cross-fit this one setting without choosing (e.g. 'trees N30'); repeatable")
    args = parser.parse_args()

    t0 = time.perf_counter()
    dataset, split, model, index, qvecs = inputs(args)
    print(f"index: {len(index.doc_ids)} docs, {len(index.vocab)} terms, {time.perf_counter() - t0:.1f} s")

    def source(qid: str, feedback: bool) -> Prepared:
        qc = index.candidates(dataset.queries[qid], qvecs[qid], feedback=feedback)
        return Prepared([index.doc_ids[r] for r in qc.rows], qc.candidates, qc.config,
                        lambda rows, fused, qc=qc: feature_matrix(qc.inputs, fused, rows))

    settings = SETTINGS
    if args.settings:
        wanted = [s.strip() for s in args.settings.split(";")]
        settings = tuple(s for s in SETTINGS if s.name in wanted or s == Setting())
    qids = list(split.tune) + list(split.heldout)
    groups = query_groups(qids, dataset.qrels, dataset.queries)
    learner = Learner(source, dataset.qrels, settings, groups=groups)
    cross_fit(learner, dataset, split, "nested CV over: " + "; ".join(s.name for s in settings))
    for name in args.force:
        forced = [s for s in SETTINGS if s.name == name]
        if not forced:
            raise SystemExit(f"--force {name!r}: not a setting; one of: " + "; ".join(s.name for s in SETTINGS))
        one = Learner(source, dataset.qrels, forced, groups=groups, shared=learner)
        cross_fit(one, dataset, split, f"forced: {name}")
    print("\np50 added per query at N=100 (trees, features + model + blend):", added_cost(learner, split))


def cross_fit(learner: Learner, dataset, split, title: str) -> None:
    print(f"\n=== {title}")
    current_all, tuned_all, fresh_current, fresh_tuned = [], [], [], []
    directions = (("tune->heldout", split.tune, split.heldout), ("heldout->tune", split.heldout, split.tune))
    for name, tune, test in directions:
        t1 = time.perf_counter()
        chosen = learner.choose(list(tune))
        print(f"[{name}] inner nDCG@10 ({time.perf_counter() - t1:.0f} s):")
        for s in learner.settings:
            mark = " <- chosen" if s == chosen.setting else ""
            print(f"    {s.name:<24} {chosen.inner[s.name]:.4f}{mark}")
        current = learner.scores(list(test), Setting(), None)
        tuned = learner.scores(list(test), chosen.setting, chosen.model)
        print(f"  outer: {paired(current, tuned).line()}  (rounds {chosen.rounds}, model {len(chosen.model_bytes)} B)")
        tune_docs = {d for q in tune for d, r in dataset.qrels.get(q, {}).items() if r > 0}
        fresh = [i for i, q in enumerate(test) if not set(dataset.qrels.get(q, {})) & tune_docs]
        current_all += current
        tuned_all += tuned
        fresh_current += [current[i] for i in fresh]
        fresh_tuned += [tuned[i] for i in fresh]
    print("2-fold cross-fit, all queries:       ", paired(current_all, tuned_all).line())
    print("  sharing no judged doc with tuning: ", paired(fresh_current, fresh_tuned).line())


def added_cost(learner: Learner, split) -> str:
    """p50 over the held-out queries at N = 100 of the whole learned ranking minus today's ranking,
    and of that the features and the model alone (trees of 100 rounds); each query's timing is
    the best of REPEAT runs."""
    trees = Setting("trees", 100)
    _, model, _ = fit("trees", learner.rows(list(split.tune), trees), 100, rounds=100)
    added, feats, scoring = [], [], []
    for qid in split.heldout:
        p, base, fused, _, _ = learner.top(qid, False)
        if not len(p.candidates):
            continue
        best = [float("inf")] * 4          # each timing's best of REPEAT: the shared machine preempts
        for _ in range(REPEAT):
            t0 = time.perf_counter()
            rank(p.candidates, p.config, 100)
            t1 = time.perf_counter()
            learned_order(p.candidates, p.config, model, 100, p.features_of)
            t2 = time.perf_counter()
            x = p.features_of(base, fused)
            t3 = time.perf_counter()
            model.score(x, fused[base])
            t4 = time.perf_counter()
            best = [min(b, v) for b, v in zip(best, (t1 - t0, t2 - t1, t3 - t2, t4 - t3))]
        added.append(best[1] - best[0])
        feats.append(best[2])
        scoring.append(best[3])
    ms = lambda v: float(np.median(v) * 1000.0)  # noqa: E731
    return (f"{ms(added):.2f} ms (features {ms(feats):.2f} ms, model {ms(scoring):.2f} ms, "
            f"{len(model.forest.roots)} trees)")


if __name__ == "__main__":
    main()
