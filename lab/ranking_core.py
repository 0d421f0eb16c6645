"""Speed of the numpy 4R ranking core (`ranking.rank`) against a naive Python loop.

    .venv/bin/python -m lab.ranking_core [--n 10000] [--k 10] [--reps 2000]
        [--naive-reps 10] [--seed 0] [--json] [--out PATH]

Candidates: `--n` seeded random rows shaped like a merged hybrid result — 70 % retrieved
by the dense leg (cosines in [-0.2, 0.95]), 50 % by BM25 (gamma-distributed scores), every
row by at least one leg, 10 % unknown timestamps, 20 % unknown reputation priors, feedback
votes, and a re-ranker score on 10 % of the rows. They are built once, outside the timing.

Timed: `rank(candidates, config, k)` — the whole call (relevancy with calibration, recency,
reputation, richness, the weighted blend, argpartition top-k, explanations) — `--reps`
times after a warm-up, garbage collection off, one `perf_counter_ns` pair per call. The
main scenario is convex fusion with recency applied (all four factors evaluated on every
row, the heaviest path); convex without recency and rrf with recency are reported too.

The naive reference is the obvious per-candidate loop over Python lists (min-max, RRF,
calibration, recency, Beta smoothing, blend, `heapq.nsmallest` for the top k), given its
columns already as lists (conversion not timed); it runs `--naive-reps` times. Before
timing, both must return the same rows. Speedup = naive median / rank median.

The last line printed is one JSON object with the figures (`--json`: only that line).
"""
from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ranking import Candidates, RankingConfig, rank

NOW = 1_750_000_000.0
DAY = 86_400.0
SCENARIOS: dict[str, dict[str, object]] = {
    "convex+recency": {"fusion": "convex", "apply_recency": True},
    "convex": {"fusion": "convex", "apply_recency": False},
    "rrf+recency": {"fusion": "rrf", "apply_recency": True},
}
MAIN = "convex+recency"


def make_candidates(n: int, seed: int) -> Candidates:
    rng = np.random.default_rng(seed)
    dense = rng.uniform(-0.2, 0.95, n).astype(np.float32)
    bm25 = rng.gamma(2.0, 4.0, n).astype(np.float32)
    dense_missing = rng.random(n) < 0.3
    bm25_missing = (rng.random(n) < 0.5) & ~dense_missing
    dense[dense_missing] = np.nan
    bm25[bm25_missing] = np.nan
    return Candidates.build(
        dense=dense, bm25=bm25,
        timestamp=np.where(rng.random(n) < 0.1, 0.0, rng.uniform(NOW - 2000 * DAY, NOW, n)),
        richness=rng.random(n),
        reputation_prior=np.where(rng.random(n) < 0.2, 0.0, rng.random(n)),
        helpful=rng.integers(0, 30, n), unhelpful=rng.integers(0, 30, n),
        rerank=np.where(rng.random(n) < 0.9, np.nan, rng.random(n)),
    )


# -- the naive reference ---------------------------------------------------------------------

def as_lists(c: Candidates) -> dict[str, list]:
    """Columns as Python lists, NaN -> None (done once, not timed)."""
    out: dict[str, list] = {}
    for name in ("dense", "bm25", "rerank"):
        out[name] = [None if math.isnan(v) else v for v in getattr(c, name).tolist()]
    for name in ("dense_rank", "bm25_rank", "timestamp", "richness", "reputation_prior",
                 "helpful", "unhelpful"):
        out[name] = getattr(c, name).tolist()
    return out


def naive_rank(cols: dict[str, list], cfg: RankingConfig, k: int) -> list[int]:
    """The per-candidate loop: same semantics as `ranking.rank`, top-k rows best first."""
    dense, bm25 = cols["dense"], cols["bm25"]
    n = len(dense)
    d_hits = [v for v in dense if v is not None]
    b_hits = [v for v in bm25 if v is not None]
    alpha = (cfg.dense_weight if d_hits and b_hits else (1.0 if d_hits else 0.0))
    d_lo, d_hi = (min(d_hits), max(d_hits)) if d_hits else (0.0, 0.0)
    b_lo, b_hi = (min(b_hits), max(b_hits)) if b_hits else (0.0, 0.0)
    legs = (1 if d_hits else 0) + (1 if b_hits else 0)
    lo, hi = cfg.dense_calibration
    rrf_k = cfg.rrf_k

    fused = [0.0] * n
    confidence = 0.0
    for i in range(n):
        d, b = dense[i], bm25[i]
        if cfg.fusion == "convex":   # theoretical min-max: floor 0
            dn = 0.0 if d is None else (1.0 if d_hi <= 0 else max(d, 0.0) / d_hi)
            bn = 0.0 if b is None else (1.0 if b_hi <= 0 else max(b, 0.0) / b_hi)
            fused[i] = alpha * dn + (1 - alpha) * bn
        else:
            total = 0.0
            if cols["dense_rank"][i] > 0:
                total += 1.0 / (rrf_k + cols["dense_rank"][i])
            if cols["bm25_rank"][i] > 0:
                total += 1.0 / (rrf_k + cols["bm25_rank"][i])
            fused[i] = total * (rrf_k + 1) / legs if legs else 0.0
        cal_d = 0.0 if d is None else min(max((d - lo) / (hi - lo), 0.0), 1.0)
        cal_b = 0.0 if b is None else b / (b + cfg.bm25_calibration)
        confidence = max(confidence, alpha * cal_d + (1 - alpha) * cal_b)

    weights = list(cfg.weights)
    if not cfg.apply_recency:
        weights[1] = 0.0
    total_w = sum(weights)
    w_rel, w_rec, w_rich, w_rep = (w / total_w for w in weights)
    scale = 0.5 + 0.5 * confidence
    s = cfg.prior_strength
    overall = [0.0] * n
    for i in range(n):
        rel = fused[i] * scale
        if cols["rerank"][i] is not None:
            rel = (1 - cfg.rerank_weight) * rel + cfg.rerank_weight * cols["rerank"][i]
        if cfg.apply_recency:
            t = cols["timestamp"][i]
            rec = 0.5 if t == 0 else 2.0 ** (-max(NOW - t, 0.0) / DAY / cfg.half_life_days)
        else:
            rec = 0.5
        rich = min(max(cols["richness"][i], 0.0), 1.0)
        p = cols["reputation_prior"][i] or cfg.default_reputation
        h, u = cols["helpful"][i], cols["unhelpful"][i]
        rep = (s * p + h) / (s + h + u)
        overall[i] = w_rel * rel + w_rec * rec + w_rich * rich + w_rep * rep
    return heapq.nsmallest(k, range(n), key=lambda i: (-overall[i], i))


# -- timing ------------------------------------------------------------------------------------

def time_ms(fn: Callable[[], object], reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            t0 = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(0.95 * len(ordered)) - 1))]


def run(args: argparse.Namespace) -> dict:
    c = make_candidates(args.n, args.seed)
    cols = as_lists(c)
    result: dict = {
        "benchmark": "ranking_core",
        "n": args.n, "k": args.k, "reps": args.reps, "naive_reps": args.naive_reps,
        "seed": args.seed, "python": platform.python_version(), "numpy": np.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpu",
        "scenarios": {},
    }
    for name, overrides in SCENARIOS.items():
        cfg = RankingConfig(now_unix=NOW, **overrides)  # type: ignore[arg-type]
        expected = naive_rank(cols, cfg, args.k)
        got = rank(c, cfg, args.k).rows.tolist()
        if got != expected:
            raise SystemExit(f"{name}: rank rows {got} != naive rows {expected}")
        fast = time_ms(lambda: rank(c, cfg, args.k), args.reps, warmup=min(100, args.reps))
        slow = time_ms(lambda: naive_rank(cols, cfg, args.k), args.naive_reps, warmup=1)
        fast_med, slow_med = statistics.median(fast), statistics.median(slow)
        result["scenarios"][name] = {
            "rank_ms_median": round(fast_med, 4),
            "rank_ms_p95": round(p95(fast), 4),
            "naive_ms_median": round(slow_med, 2),
            "speedup": round(slow_med / fast_med, 1),
        }
    main = result["scenarios"][MAIN]
    result.update({"main_scenario": MAIN, **main,
                   "target_met": main["rank_ms_median"] <= 0.5 and main["speedup"] >= 50})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="candidates")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--reps", type=int, default=2000, help="timed calls of rank()")
    parser.add_argument("--naive-reps", type=int, default=10, help="timed calls of the naive loop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.n < 1 or args.k < 1 or args.reps < 1 or args.naive_reps < 1:
        parser.error("--n, --k, --reps and --naive-reps must be >= 1")

    result = run(args)
    if not args.json:
        print(f"ranking.rank, n={args.n} candidates, k={args.k}, {args.reps} reps "
              f"(naive: {args.naive_reps} reps), {result['machine']}")
        print(f"{'scenario':<16} {'median ms':>10} {'p95 ms':>10} {'naive ms':>10} {'speedup':>9}")
        for name, s in result["scenarios"].items():
            print(f"{name:<16} {s['rank_ms_median']:>10.3f} {s['rank_ms_p95']:>10.3f} "
                  f"{s['naive_ms_median']:>10.1f} {s['speedup']:>8.0f}x")
        print(f"target (main scenario {MAIN}: median <= 0.5 ms, >= 50x naive): "
              f"{'met' if result['target_met'] else 'NOT met'}")
    line = json.dumps(result, separators=(",", ":"))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
