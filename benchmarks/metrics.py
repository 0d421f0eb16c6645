"""Retrieval quality and latency statistics, defined as trec_eval defines them.

Per query, over a ranked list of document ids (best first) and graded qrels {doc: relevance}:

    ndcg@k    DCG@k / IDCG@k with gain = relevance, discount 1 / log2(rank + 1) (trec_eval
              `ndcg_cut_k`); IDCG from the query's judged relevances sorted descending.
    recall@k  |relevant ∩ top k| / |relevant|, relevant = relevance > 0 (trec_eval `recall_k`).
    mrr@k     1 / rank of the first relevant document within the top k, else 0
              (trec_eval `recip_rank` on the run cut at k).

Averages are over every query that has a relevant judgement: a query with no results (or an
error) counts as 0 — unlike trec_eval, which skips queries absent from the run. A document
id repeated in a ranking counts once, at its first (best) position.

`tests/unit/benchmarks/test_metrics.py` checks these against pytrec_eval.
"""
from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from shared.relevance import ndcg_at_k, recall_at_k, unique_in_order  # noqa: F401  (re-exported)

METRICS = ("ndcg@10", "recall@100", "mrr@10")
PERCENTILES = (50, 95, 99)


def mrr_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    for i, doc in enumerate(unique_in_order(ranking)[:k]):
        if qrels.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def per_query(ranking: Sequence[str], qrels: Mapping[str, int]) -> dict[str, float]:
    return {"ndcg@10": ndcg_at_k(ranking, qrels, 10), "recall@100": recall_at_k(ranking, qrels, 100),
            "mrr@10": mrr_at_k(ranking, qrels, 10)}


def evaluate(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
             query_ids: Iterable[str] | None = None) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(mean of each metric, per-query metrics) over `query_ids` (default: every judged query)."""
    ids = list(query_ids) if query_ids is not None else [q for q, r in qrels.items() if any(v > 0 for v in r.values())]
    scores = {q: per_query(run.get(q, ()), qrels[q]) for q in ids}
    means = {m: (sum(s[m] for s in scores.values()) / len(scores) if scores else 0.0) for m in METRICS}
    return means, scores


def latency_summary(values_ms: Sequence[float]) -> dict[str, float]:
    """count, mean and p50/p95/p99 (linear interpolation between closest ranks) in ms."""
    if not len(values_ms):
        return {"count": 0, "mean": math.nan, **{f"p{p}": math.nan for p in PERCENTILES}}
    arr = np.asarray(values_ms, dtype=np.float64)
    pcts = np.percentile(arr, PERCENTILES)
    return {"count": int(arr.size), "mean": float(arr.mean()),
            **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pcts)}}


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (linear interpolation, as `latency_summary`); NaN for no values."""
    return float(np.percentile(np.asarray(values), p)) if len(values) else math.nan


def rss_mb(pid: int | str = "self") -> float:
    """Resident set size of a process in MiB from /proc; NaN once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan
