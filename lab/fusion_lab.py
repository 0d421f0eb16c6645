"""Offline study of fusion and calibration on a benchmark tenant's real candidates.

    .venv/bin/python -m lab.fusion_lab --dataset ../shared/data/scifact --tenant scifact

Opens the KnowledgeStore data that `nucleus bench` ingested (`.bench-cache/stack-data`, with no
stack running on it), runs every judged query and every needle (benchmarks/needles.py) through
the same calls SearchAndRank makes — the keyword leg, then the vector leg with score completion —
and merges them with the pipeline's own `merge`, once with and once without completion. The
candidates are cached (`.bench-cache/lab/`), so each variant below is then just the numpy
ranking core over them: seconds for the whole set.

Reported per variant: nDCG@10 on the tuning half, the held-out half and all judged queries
(benchmarks/splits.py), needle hit@1 / hit@5, and the expected calibration error of the
relevancy scores over the top-10 pairs (benchmarks/calibration.py). Query vectors come from the
in-process all-MiniLM-L6-v2 (the model the services serve through ONNX Runtime; same vectors to
~1e-6). Defaults in ranking/ are chosen on the tuning half only; this is the tool that shows it.
"""
from __future__ import annotations

import argparse
import asyncio
import pickle
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks import needles as needles_mod
from benchmarks.baseline import encode, load_model
from benchmarks.beir import load_dataset
from benchmarks.calibration import TOP, expected_calibration_error, judged_pairs
from benchmarks.metrics import evaluate
from benchmarks.splits import load_split
from ranking import Candidates, RankingConfig, rank, relevancy
from ranking.profile import BUILTIN_PROFILE
from ranking.query_features import QueryFeatures, query_features
from services.rag_pipeline.learning.train import newton_logistic
from services.rag_pipeline.merge import merge, ranking_candidates
from shared.records import SearchFilters

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".bench-cache"


@dataclass
class LabQuery:
    qid: str
    kind: str                      # "judged" | "token" | "phrase"
    text: str
    target: str                    # needle document ("" for judged queries)
    features: QueryFeatures
    completed: tuple[list[str], Candidates]     # artifact ids, candidates (with score completion)
    legs_only: tuple[list[str], Candidates]     # the same without completion (absent -> 0)


class _NoEmbedder:
    async def embed(self, texts: list[str]) -> np.ndarray:      # searches never embed in the store
        raise RuntimeError("the fusion lab does not ingest")


async def collect(stack_dir: Path, tenant: str, queries: list[tuple[str, str, str, str]],
                  vectors: np.ndarray, top_k: int) -> list[LabQuery]:
    from services.knowledge_store.embedded.core import KnowledgeStore
    from shared.settings import KnowledgeStoreSettings

    store = KnowledgeStore(KnowledgeStoreSettings(data_dir=stack_dir / "knowledge_store"), _NoEmbedder())
    out = []
    try:
        for (qid, kind, text, target), qv in zip(queries, vectors):
            keyword, _ = await store.keyword(tenant, text, [], top_k, SearchFilters())
            dense, completion = await store.complete(
                tenant, qv[None, :], top_k, SearchFilters(), keywords=text, complete_rows=keyword.row_ids)
            stats = completion.keyword_stats
            variants = []
            for done in (completion, None):
                merged = merge(dense, keyword, collapse=True, completion=done)
                variants.append(([m.artifact_id for m in merged], ranking_candidates(merged)))
            out.append(LabQuery(qid, kind, text, target, query_features(text, stats.document_frequency, stats.entries),
                                variants[0], variants[1]))
    finally:
        store.close()
    return out


def load_or_collect(dataset_dir: Path, tenant: str, stack_dir: Path, top_k: int) -> tuple[list[LabQuery], object]:
    dataset = load_dataset(dataset_dir)
    path = CACHE / "lab" / f"{tenant}-{dataset.fingerprint}-k{top_k}.pkl"
    if path.is_file():                  # plain tuples: the cache does not depend on where this module runs
        return [LabQuery(*row) for row in pickle.loads(path.read_bytes())], dataset
    judged = [(q, "judged", dataset.queries[q], "") for q in dataset.evaluated_query_ids]
    needle_set = needles_mod.generate([d.id for d in dataset.corpus], [d.title for d in dataset.corpus],
                                      [d.text for d in dataset.corpus])
    queries = judged + [(n.id, n.kind, n.query, n.doc_id) for n in needle_set]
    vectors = encode(load_model(), [text for _, _, text, _ in queries], batch_size=32)
    lab = asyncio.run(collect(stack_dir, tenant, queries, vectors, top_k))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps([(q.qid, q.kind, q.text, q.target, q.features, q.completed, q.legs_only)
                                   for q in lab]))
    return lab, dataset


def score(lab: list[LabQuery], dataset, config_for, *, completed: bool = True, k: int = 100) -> dict:
    """nDCG@10 per split part, needle hits and ECE for configs `config_for(query) -> RankingConfig`."""
    split = load_split(dataset.name, dataset.split)
    runs: dict[str, list[str]] = {}
    pairs: list[tuple[float, float, int]] = []              # (probability, relevancy factor, label)
    needle_hits: dict[str, dict[str, float]] = {}
    for q in lab:
        ids, cands = q.completed if completed else q.legs_only
        if not len(cands):
            runs[q.qid] = []
            continue
        ranked = rank(cands, config_for(q), k)
        ranking = [ids[int(r)] for r in ranked.rows]
        if q.kind == "judged":
            runs[q.qid] = ranking
            rels = dataset.qrels.get(q.qid, {})
            for (p, y), (f, _) in zip(judged_pairs(ranking, ranked.probability.tolist(), rels),
                                      judged_pairs(ranking, ranked.factors[:, 0].tolist(), rels)):
                pairs.append((p, f, y))
        else:
            needle_hits[q.qid] = needles_mod.hits(ranking, q.target)
    judged = [q.qid for q in lab if q.kind == "judged"]
    parts = split.parts(judged) if split else {"all": judged}
    out = {part: evaluate(runs, dataset.qrels, qids)[0]["ndcg@10"] for part, qids in parts.items()}
    kinds = {}
    for kind in ("token", "phrase"):
        chosen = [h for qid, h in needle_hits.items() if qid.startswith(kind)]
        if chosen:
            kinds[kind] = tuple(sum(h[m] for h in chosen) / len(chosen) for m in ("hit@1", "hit@5"))
    out["needles"] = kinds
    out["ece"] = expected_calibration_error([p for p, _, _ in pairs], [y for _, _, y in pairs])
    out["ece_relevancy"] = expected_calibration_error([f for _, f, _ in pairs], [y for _, _, y in pairs])
    return out


def fit_probability(lab: list[LabQuery], dataset, config_for, qids: set[str]) -> tuple[float, float, float]:
    """(slope, confidence weight, intercept) of P(relevant) = sigmoid(slope * fused + weight *
    confidence + intercept), by logistic regression (Newton steps) over the top-10 judged pairs
    of the queries `qids` (the tuning half)."""
    rows, labels = [], []
    for q in lab:
        if q.kind != "judged" or q.qid not in qids or not len(q.completed[1]):
            continue
        ids, cands = q.completed
        cfg = config_for(q)
        _, trace = relevancy(cands, cfg)
        ranked = rank(cands, cfg, TOP)
        rels = dataset.qrels.get(q.qid, {})
        for r in ranked.rows.tolist():
            rows.append((float(trace.fused[r]), trace.confidence, 1.0))
            labels.append(float(rels.get(ids[r], 0) > 0))
    x, y = np.asarray(rows), np.asarray(labels)
    w = newton_logistic(x, y, np.zeros(3))
    return float(w[0]), float(max(w[1], 0.0)), float(w[2])


def default_config(q: LabQuery, **overrides) -> RankingConfig:
    """The built-in profile as the pipeline builds its config (no recency on BEIR)."""
    p = BUILTIN_PROFILE
    cfg = RankingConfig(weights=(p.relevancy_weight, p.recency_weight, p.richness_weight, p.reputation_weight),
                        fusion=p.fusion_method, dense_weight=p.dense_weight, apply_recency=False,
                        prior_strength=p.reputation_prior_strength, query=q.features)
    return replace(cfg, **overrides) if overrides else cfg


def _line(name: str, r: dict) -> str:
    needles = " ".join(f"{k} {v[0]:.3f}/{v[1]:.3f}" for k, v in r["needles"].items())
    parts = " ".join(f"{p} {r[p]:.4f}" for p in ("tune", "heldout", "all") if p in r)
    return (f"{name:<32} {parts}  ECE probability {r['ece']:.3f} relevancy {r['ece_relevancy']:.3f}  "
            f"needles@1/@5 {needles}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--stack-dir", type=Path, default=CACHE / "stack-data")
    parser.add_argument("--top-k-initial", type=int, default=200)
    parser.add_argument("--fit-probability", action="store_true",
                        help="fit the relevance-probability calibration of the default profile on the tuning half")
    args = parser.parse_args()
    lab, dataset = load_or_collect(args.dataset, args.tenant, args.stack_dir, args.top_k_initial)
    if args.fit_probability:
        split = load_split(dataset.name, dataset.split)
        tune = set(split.tune) if split else {q.qid for q in lab if q.kind == "judged"}
        print("probability calibration (slope, confidence weight, intercept):",
              tuple(round(v, 2) for v in fit_probability(lab, dataset, default_config, tune)))
    relevancy_only = dict(weights=(1.0, 0.0, 0.0, 0.0))
    variants = [("default profile", dict(), True), ("default profile, no completion", dict(), False)]
    for alpha in (0.4, 0.5, 0.6):
        variants.append((f"convex a{alpha}", dict(fusion="convex", dense_weight=alpha, **relevancy_only), True))
        variants.append((f"convex a{alpha}, no completion", dict(fusion="convex", dense_weight=alpha,
                                                                 **relevancy_only), False))
        variants.append((f"adaptive a{alpha}", dict(fusion="adaptive", dense_weight=alpha, **relevancy_only), True))
    variants.append(("rrf", dict(fusion="rrf", **relevancy_only), True))
    for name, overrides, completed in variants:
        print(_line(name, score(lab, dataset, lambda q, o=overrides: default_config(q, **o), completed=completed)))


if __name__ == "__main__":
    main()
