"""Do sentence-level dense signals lift the learned ranking on a BEIR dataset? The 2-fold
cross-fit of benchmarks/learned_ranking.py (same protocol: the committed query split, nested
CV on the tuning half, the save rule), with the sentence signals of lab/sentence_signals.py.

    python -m lab.sentence_ranking --dataset ../shared/data/scifact
    python -m lab.sentence_ranking --dataset ../shared/data/scifact --runs blend --blends 0.5,1

Two kinds of run, each against the default profile, paired per query:

    learned   the learned settings (services/rag_pipeline/learning/crossval.py) trained on
              ranking/features.py's features + the five sentence signals (a wider FeatureSet;
              the production features and their version are untouched): nested CV over every
              setting, then each `--force` setting cross-fitted as it is
    blend     no learning: the dense leg's score of every document is (1 − λ) · the document
              cosine + λ · its best sentence cosine (retrieval and fusion alike, λ = 1: the
              best sentence alone); each λ of `--blends` as it is (nothing to tune: the whole
              300 are held out), and λ chosen on the tuning half among {0 (the default)} ∪
              `--blends` then scored on the other half (an untrained setting's inner folds
              reduce to the mean over the tuning half)

Also printed: the p50 time the sentence signals add per query (all candidates).
Needs the `learn` extra and the cached MiniLM vectors; sentence vectors are encoded once.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.field_index import FieldIndex, feature_matrix
from benchmarks.learned_ranking import cross_fit, inputs
from lab import sentence_signals
from lab.sentence_signals import SIGNAL_MONOTONE, SIGNAL_NAMES, SentenceIndex
from ranking.features import FEATURE_NAMES, FEATURE_VERSION, MONOTONE
from services.rag_pipeline.learning.crossval import SETTINGS, Learner, Prepared, Setting, query_groups
from services.rag_pipeline.learning.report import paired
from services.rag_pipeline.learning.train import FeatureSet

ROOT = Path(__file__).resolve().parent.parent
WITH_SENTENCES = FeatureSet(FEATURE_NAMES + SIGNAL_NAMES, MONOTONE + SIGNAL_MONOTONE, FEATURE_VERSION)


def make_source(index: FieldIndex, sentences: SentenceIndex, dataset, qvecs, blend: float = 0.0,
                with_signals: bool = True):
    """A Learner's source: the query's candidates (dense leg blended by `blend`), features
    with the sentence signals appended when `with_signals`."""
    def source(qid: str, feedback: bool) -> Prepared:
        q = qvecs[qid]
        dense_all = None
        if blend:
            doc = np.clip(index.doc_vectors @ q, -1.0, 1.0)
            dense_all = ((1.0 - blend) * doc + blend * sentences.max_all(q, doc)).astype(np.float32)
        qc = index.candidates(dataset.queries[qid], q, feedback=feedback, dense_all=dense_all)

        def features_of(rows, fused, qc=qc, q=q):
            x = feature_matrix(qc.inputs, fused, rows)
            if not with_signals:
                return x
            s = sentences.signals(q, qc.rows[rows], qc.candidates.dense[rows])
            return np.hstack([x, s]).astype(np.float32)

        return Prepared([index.doc_ids[r] for r in qc.rows], qc.candidates, qc.config, features_of)
    return source


def blend_runs(base: Learner, by_blend: dict[float, Learner], dataset, split) -> None:
    qids = list(split.tune) + list(split.heldout)
    default = dict(zip(qids, base.scores(qids, Setting(), None)))
    scores = {lam: dict(zip(qids, lr.scores(qids, Setting(), None))) for lam, lr in by_blend.items()}
    print("\n=== blend: dense leg = (1 - λ)·document cosine + λ·best sentence cosine, untrained")
    for lam, s in scores.items():
        print(f"  λ {lam:g} as it is, all:           ", paired([default[q] for q in qids], [s[q] for q in qids]).line())
        fresh = fresh_ids(dataset, split)
        print("      sharing no judged doc with tuning:", paired([default[q] for q in fresh],
                                                               [s[q] for q in fresh]).line())
    current_all, tuned_all, fresh_c, fresh_t = [], [], [], []
    fresh = set(fresh_ids(dataset, split))
    for name, tune, test in (("tune->heldout", split.tune, split.heldout), ("heldout->tune", split.heldout, split.tune)):
        inner = {0.0: float(np.mean([default[q] for q in tune]))}
        inner.update({lam: float(np.mean([s[q] for q in tune])) for lam, s in scores.items()})
        chosen = max(inner, key=lambda lam: (inner[lam], -lam))
        print(f"  [{name}] tuning-half nDCG@10: " + ", ".join(f"λ {k:g} {v:.4f}" for k, v in inner.items())
              + f"  -> λ {chosen:g}")
        tuned = default if chosen == 0.0 else scores[chosen]
        current, new = [default[q] for q in test], [tuned[q] for q in test]
        print(f"    outer: {paired(current, new).line()}")
        current_all += current
        tuned_all += new
        fresh_c += [default[q] for q in test if q in fresh]
        fresh_t += [tuned[q] for q in test if q in fresh]
    print("  2-fold cross-fit (λ chosen), all:    ", paired(current_all, tuned_all).line())
    print("    sharing no judged doc with tuning: ", paired(fresh_c, fresh_t).line())


def fresh_ids(dataset, split) -> list[str]:
    """Queries of each half that share no judged relevant document with the other half."""
    out = []
    for tune, test in ((split.tune, split.heldout), (split.heldout, split.tune)):
        docs = {d for q in tune for d, r in dataset.qrels.get(q, {}).items() if r > 0}
        out += [q for q in test if not set(dataset.qrels.get(q, {})) & docs]
    return out


def signal_cost(index: FieldIndex, sentences: SentenceIndex, dataset, qvecs, qids) -> str:
    """p50 over `qids` of computing the five signals for every candidate (best of 5 each)."""
    times, sizes = [], []
    for qid in qids:
        qc = index.candidates(dataset.queries[qid], qvecs[qid])
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            sentences.signals(qvecs[qid], qc.rows, qc.candidates.dense)
            best = min(best, time.perf_counter() - t0)
        times.append(best)
        sizes.append(qc.rows.size)
    return f"{np.median(times) * 1000:.2f} ms p50 over {int(np.median(sizes))} candidates (median)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".bench-cache")
    parser.add_argument("--runs", default="learned,blend", help="which runs: learned, blend (comma-separated)")
    parser.add_argument("--settings", default="", help="';'-separated settings the nested CV chooses among "
                        "(default: all)")
    parser.add_argument("--force", action="append", default=[], help="also cross-fit this setting as it is")
    parser.add_argument("--blends", default="0.25,0.5,0.75,1", help="λ values of the blend run")
    parser.add_argument("--no-cost", action="store_true", help="skip timing the signals")
    args = parser.parse_args()
    runs = {r.strip() for r in args.runs.split(",") if r.strip()}
    if not runs <= {"learned", "blend"}:
        raise SystemExit(f"--runs {args.runs!r}: accepted are 'learned' and 'blend', comma-separated")
    blends = [float(v) for v in args.blends.split(",") if v.strip()]
    if any(not 0.0 < v <= 1.0 for v in blends):
        raise SystemExit(f"--blends {args.blends!r}: each λ must be in (0, 1]")

    t0 = time.perf_counter()
    dataset, split, model, index, qvecs = inputs(args)
    sentences = sentence_signals.load(dataset, model, args.cache_dir)
    print(f"index: {len(index.doc_ids)} docs, {sentences.vectors.shape[0]} sentences, "
          f"{time.perf_counter() - t0:.1f} s")
    qids = list(split.tune) + list(split.heldout)
    groups = query_groups(qids, dataset.qrels, dataset.queries)

    if "blend" in runs:
        base = Learner(make_source(index, sentences, dataset, qvecs, with_signals=False), dataset.qrels, (Setting(),))
        by_blend = {lam: Learner(make_source(index, sentences, dataset, qvecs, lam, with_signals=False),
                                 dataset.qrels, (Setting(),)) for lam in blends}
        blend_runs(base, by_blend, dataset, split)
    if "learned" in runs:
        settings = SETTINGS
        if args.settings:
            wanted = [s.strip() for s in args.settings.split(";")]
            settings = tuple(s for s in SETTINGS if s.name in wanted or s == Setting())
        learner = Learner(make_source(index, sentences, dataset, qvecs), dataset.qrels, settings, groups=groups,
                          feature_set=WITH_SENTENCES)
        cross_fit(learner, dataset, split, "with sentence signals, nested CV over: "
                  + "; ".join(s.name for s in settings))
        for name in args.force:
            forced = [s for s in SETTINGS if s.name == name]
            if not forced:
                raise SystemExit(f"--force {name!r}: not a setting; one of: " + "; ".join(s.name for s in SETTINGS))
            one = Learner(learner.source, dataset.qrels, forced, groups=groups, shared=learner,
                          feature_set=WITH_SENTENCES)
            cross_fit(one, dataset, split, f"with sentence signals, forced: {name}")
    if not args.no_cost:
        print("\nsentence signals added per query:", signal_cost(index, sentences, dataset, qvecs, list(split.heldout)))


if __name__ == "__main__":
    main()
