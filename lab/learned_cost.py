"""What a learned model adds to one query's ranking, in process: before and after, same run (issue 32).

    python -m lab.learned_cost [--queries 100] [--candidates 150] [--k 10] [--repeat 7] [--seed 0]

Candidates: `--queries` seeded random queries of `--candidates` rows each, shaped like the
stack's merged hybrid result at top_k_initial 100 (70 % with a dense score, 50 % with BM25,
every row in one leg at least, votes, priors, timestamps). A LambdaMART model of 100 trees over
the top 100 is trained (services/rag_pipeline/learning/train.py `fit`, the serving trainer) on
200 other such queries, labels drawn from a hidden mix of the signals.

Timed per query, each the best of `--repeat` runs, then the p50 over the queries:

    default   `rank(c, cfg, k)` — what SearchAndRank runs without a model
    before    the learned path as served before this lab: `rank` over all candidates (the core's),
              then the model's pass (`rank` again for the top N, the fusion trace again, the
              features through `features()` with the per-field inputs unknown, the model, a new
              `Candidates` of the top N ranked again) and the explanation's third pass over all
              candidates (`ranked_in_order`) — `before_*` below, kept as they were
    after     `ranking.learned.learned_ranking` (one blend, the top N re-blended, only the
              returned rows explained) and the candidates' new rerank column (`with_rerank`);
              "explained": also the feature contributions of the returned top k (explain on)

added = before − default and after − default (the core no longer ranks before the model). Also printed: the features, the model and the
contributions alone (after). Before timing, both paths must return the same rows, the same
4R factors and overall scores, bit for bit, on every query.
"""
from __future__ import annotations

import argparse
import gc
import time
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ranking import Candidates, RankingConfig, rank
from ranking.rank import CONFIDENCE_FLOOR, NEUTRAL_RECENCY, recency, relevancy, reputation, richness
from ranking.features import FEATURE_NAMES, FeatureInputs, FieldTerms, features
from ranking.learned import _MISSING, learned_ranking, served_features
from ranking.rank import Ranked
from ranking.trees import RankerModel, learned_relevancy
from services.rag_pipeline.learning.train import TrainRows, fit

_F32 = np.float32
NOW = 1_750_000_000.0
DAY = 86_400.0
QUERY_TERMS = 4


# -- the learned path as it was served before (kept as it was: the "before" and the reference) --

def before_subset(c: Candidates, rows: NDArray[np.intp], rerank: NDArray[np.float32]) -> Candidates:
    columns = {name: getattr(c, name)[rows] for name in Candidates.__dataclass_fields__}
    columns["rerank"] = rerank.astype(np.float32)
    return Candidates(**columns)


def before_rerank(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int,
                  features_of) -> tuple[NDArray[np.intp], NDArray[np.float32]]:
    column = np.full(len(c), np.nan, dtype=_F32)
    base = rank(c, cfg, max(k, model.top_n)).rows
    if base.size == 0:
        return base[:k], column
    top = base[:model.top_n]
    trace = relevancy(c, cfg)[1]
    x = features_of(top, trace.fused)
    rel = learned_relevancy(model.score(x, trace.fused[top]), trace.confidence, CONFIDENCE_FLOOR)
    again = rank(before_subset(c, top, rel), replace(cfg, rerank_weight=1.0), top.size).rows
    column[top] = rel
    return np.concatenate([top[again], base[model.top_n:]])[:k], column


def before_ranked_in_order(c: Candidates, cfg: RankingConfig, rows: NDArray[np.intp]) -> Ranked:
    everything = rank(c, replace(cfg, rerank_weight=1.0), len(c))
    at = np.empty(len(c), dtype=np.intp)
    at[everything.rows] = np.arange(everything.rows.size)
    pick = at[rows]
    return replace(everything, rows=everything.rows[pick], overall=everything.overall[pick],
                   factors=everything.factors[pick], contributions=everything.contributions[pick],
                   dense_norm=everything.dense_norm[pick], bm25_norm=everything.bm25_norm[pick],
                   probability=everything.probability[pick] if everything.probability.size else everything.probability)


def before_served_features(c: Candidates, cfg: RankingConfig, query_terms: int, rows: NDArray[np.intp],
                           fused: NDArray[np.float32]) -> NDArray[np.float32]:
    n, t = rows.shape[0], max(int(query_terms), 0)
    nan = np.full(n, np.nan, dtype=_F32)
    unknown = FieldTerms(tf=np.full((n, t), np.nan, dtype=_F32), length=nan, avg_length=1.0)
    no_positions = np.full((n, 0), -1, dtype=np.int32)
    rec = (recency(c.timestamp[rows], cfg.now_unix, cfg.half_life_days) if cfg.apply_recency
           else np.full(n, NEUTRAL_RECENCY, dtype=_F32))
    rep = reputation(c.reputation_prior[rows], c.helpful[rows], c.unhelpful[rows], cfg.default_reputation,
                     cfg.prior_strength)
    x = features(FeatureInputs(
        idf=np.ones(t, dtype=_F32), title=unknown, body=unknown, doc=unknown, body_positions=no_positions,
        title_positions=no_positions, dense_title=nan, dense=c.dense[rows], bm25=c.bm25[rows],
        dense_rank=c.dense_rank[rows], bm25_rank=c.bm25_rank[rows], fused=fused[rows].astype(_F32),
        chunk_position=nan, richness=richness(c.richness[rows]), recency=rec.astype(_F32), reputation=rep.astype(_F32)))
    x[:, _MISSING] = np.nan
    return x


def before(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int, t: int) -> Ranked:
    """The old served path after the core's own `rank`: re-rank, then explain in a third pass."""
    rows, column = before_rerank(c, cfg, model, k, lambda rs, fused: before_served_features(c, cfg, t, rs, fused))
    return before_ranked_in_order(replace(c, rerank=column), cfg, rows)


def after(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int, t: int, explain: bool = True):
    """The served path now; with `explain`, the returned rows' feature contributions too."""
    learned = learned_ranking(c, cfg, model, k, lambda rs, fused: served_features(c, cfg, t, rs, fused))
    c.with_rerank(learned.column)                                   # the candidates the pipeline goes on with
    if not explain:
        return learned, None
    explained = min(learned.ranked.rows.size, learned.top.size)    # the returned rows the model scored
    where = np.empty(len(c), dtype=np.intp)
    where[learned.top] = np.arange(learned.top.size)
    at = where[learned.ranked.rows[:explained]]
    return learned, model.contributions(learned.x[at], learned.fused[at])


# -- inputs -----------------------------------------------------------------------------------

def make_candidates(rng: np.random.Generator, n: int) -> tuple[Candidates, NDArray[np.float64]]:
    """One query's candidates and a hidden relevance per row (for training labels)."""
    dense = rng.uniform(-0.1, 0.9, n).astype(np.float32)
    bm25 = rng.gamma(2.0, 4.0, n).astype(np.float32)
    dense_missing = rng.random(n) < 0.3
    bm25_missing = (rng.random(n) < 0.5) & ~dense_missing
    hidden = np.nan_to_num(dense) * 3 + np.nan_to_num(bm25) / 8 + rng.normal(scale=0.7, size=n)
    dense[dense_missing] = np.nan
    bm25[bm25_missing] = np.nan
    c = Candidates.build(dense=dense, bm25=bm25,
                         timestamp=np.where(rng.random(n) < 0.1, 0.0, rng.uniform(NOW - 2000 * DAY, NOW, n)),
                         richness=rng.random(n), reputation_prior=np.where(rng.random(n) < 0.2, 0.0, rng.random(n)),
                         helpful=rng.integers(0, 5, n), unhelpful=rng.integers(0, 5, n))
    return c, hidden + 0.5 * c.richness


def config() -> RankingConfig:
    return RankingConfig(fusion="convex", weights=(0.7, 0.1, 0.1, 0.1), apply_recency=False, now_unix=NOW)


def train_model(rng: np.random.Generator, n: int, queries: int = 200, rounds: int = 100,
                top_n: int = 100) -> RankerModel:
    cfg = config()
    parts = []
    for _ in range(queries):
        c, hidden = make_candidates(rng, n)
        top = rank(c, cfg, top_n).rows
        fused = relevancy(c, cfg)[1].fused
        labels = (hidden[top] > np.quantile(hidden, 0.9)).astype(np.int32) + (hidden[top] > np.quantile(hidden, 0.98))
        parts.append((served_features(c, cfg, QUERY_TERMS, top, fused), fused[top], labels))
    _, model, _ = fit("trees", TrainRows.concat(parts), top_n, rounds=rounds)
    return model


def same(a: Ranked, b: Ranked) -> bool:
    return (np.array_equal(a.rows, b.rows) and np.array_equal(a.factors, b.factors)
            and np.array_equal(a.overall, b.overall) and np.array_equal(a.probability, b.probability)
            and np.array_equal(a.dense_norm, b.dense_norm) and np.array_equal(a.bm25_norm, b.bm25_norm))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--candidates", type=int, default=150)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    model = train_model(rng, args.candidates)
    cfg, k, t = config(), args.k, QUERY_TERMS
    queries = [make_candidates(rng, args.candidates)[0] for _ in range(args.queries)]
    for c in queries:
        if not same(before(c, cfg, model, k, t), after(c, cfg, model, k, t)[0].ranked):
            raise SystemExit("the new path does not rank as the old one")
    fused_of = {id(c): relevancy(c, cfg)[1].fused for c in queries}
    top_of = {id(c): rank(c, cfg, model.top_n).rows for c in queries}

    steps = {
        "default": lambda c: rank(c, cfg, k),
        "before": lambda c: (rank(c, cfg, k), before(c, cfg, model, k, t)),
        "after": lambda c: after(c, cfg, model, k, t, explain=False),
        "after_explained": lambda c: after(c, cfg, model, k, t),
        "features": lambda c: served_features(c, cfg, t, top_of[id(c)], fused_of[id(c)]),
        "model": lambda c: model.score(served_x[id(c)], fused_of[id(c)][top_of[id(c)]]),
        "contributions": lambda c: model.contributions(served_x[id(c)][:k], fused_of[id(c)][top_of[id(c)]][:k]),
    }
    served_x = {id(c): served_features(c, cfg, t, top_of[id(c)], fused_of[id(c)]) for c in queries}
    best = {name: [] for name in steps}
    gc.disable()
    for c in queries:
        for name, step in steps.items():
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                step(c)
                times.append(time.perf_counter() - t0)
            best[name].append(min(times))
    gc.enable()
    ms = {name: np.asarray(v) * 1000.0 for name, v in best.items()}
    p50 = lambda v: float(np.median(v))  # noqa: E731
    print(f"{args.queries} queries × {args.candidates} candidates, k {k}, {len(model.forest.roots)} trees over "
          f"the top {model.top_n}, best of {args.repeat}, p50 (ms):")
    print(f"  default rank {p50(ms['default']):.3f}; added by the learned path: before "
          f"{p50(ms['before'] - ms['default']):.3f}, after {p50(ms['after'] - ms['default']):.3f} "
          f"(explained: {p50(ms['after_explained'] - ms['default']):.3f})")
    print(f"  after, alone: features {p50(ms['features']):.3f}, model {p50(ms['model']):.3f}, "
          f"contributions of the top {k} {p50(ms['contributions']):.3f}")
    print("  the new path ranks as the old one on every query (rows, factors, overall, bit for bit)")


if __name__ == "__main__":
    main()
