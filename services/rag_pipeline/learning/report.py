"""nDCG@10 per query, and the paired report that decides whether a tuned profile is saved.

    gain_q      tuned nDCG@10 − current nDCG@10 of held-out query q (each query scored by a
                model that never saw it)
    mean        mean of gain_q over the held-out queries
    interval    95 % percentile bootstrap of the mean (BOOTSTRAP resamples of the queries,
                fixed seed)
    sign test   two-sided exact binomial test of wins vs losses (ties left out)
    save rule   save only when mean > 0 and the interval's lower end > 0
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shared.relevance import ndcg_at_k

BOOTSTRAP = 10_000
SEED = 0


def ndcg_at_10(ranking: Sequence[str], qrels: Mapping[str, int]) -> float:
    """trec_eval's ndcg_cut_10 (gain = relevance, discount 1 / log2(rank + 1)), ids counted once."""
    return ndcg_at_k(ranking, qrels, 10)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of wins vs losses under p = ½."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


@dataclass(frozen=True, slots=True)
class PairedReport:
    queries: int
    current: float           # mean nDCG@10 of the current profile
    tuned: float
    gain: float
    low: float               # 95 % bootstrap interval of the mean gain
    high: float
    wins: int
    losses: int
    ties: int
    p_sign: float

    @property
    def significant(self) -> bool:
        """The save rule: a positive gain whose 95 % interval lies above 0."""
        return self.gain > 0 and self.low > 0

    def line(self) -> str:
        return (f"{self.queries} queries: current {self.current:.4f} tuned {self.tuned:.4f} gain {self.gain:+.4f} "
                f"[95% {self.low:+.4f}, {self.high:+.4f}] wins/losses/ties {self.wins}/{self.losses}/{self.ties} "
                f"sign test p={self.p_sign:.3g}")


def paired(current: Sequence[float], tuned: Sequence[float]) -> PairedReport:
    """The paired report of two per-query score lists (same queries, same order)."""
    a, b = np.asarray(current, dtype=np.float64), np.asarray(tuned, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"{a.shape[0]} current and {b.shape[0]} tuned scores: the report pairs them")
    n = a.shape[0]
    if n == 0:
        return PairedReport(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 1.0)
    gain = b - a
    rng = np.random.default_rng(SEED)
    means = gain[rng.integers(0, n, size=(BOOTSTRAP, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    wins, losses = int((gain > 1e-12).sum()), int((gain < -1e-12).sum())
    return PairedReport(n, float(a.mean()), float(b.mean()), float(gain.mean()), float(low), float(high),
                        wins, losses, n - wins - losses, sign_test(wins, losses))
