"""How well relevancy scores predict relevance: a reliability table and the expected
calibration error (ECE), over judged (query, document) pairs.

Pairs: for every judged query, each distinct document among its first `TOP` results, with the
relevancy score of its best-ranked result and the label relevant (qrels relevance > 0) or not
(a document the qrels do not list counts as not relevant, the BEIR convention nDCG uses too).
Scores are binned into BINS equal-width bins of [0, 1]; per bin the table gives the pairs, the
mean score and the share that is relevant, and

    ECE = sum over bins of (pairs in bin / all pairs) * |mean score - share relevant|

A calibrated ranker's "0.8" is relevant 8 times in 10, on any query: ECE 0. The target is
ECE <= 0.1.
"""
from __future__ import annotations

from collections.abc import Sequence

BINS = 10
TOP = 10
TARGET = 0.1


def reliability(scores: Sequence[float], labels: Sequence[int], bins: int = BINS) -> list[dict]:
    """One row per non-empty bin: lo, hi, pairs, mean_score, relevant (share)."""
    rows: list[list[float]] = [[0, 0.0, 0] for _ in range(bins)]
    for s, y in zip(scores, labels):
        b = min(bins - 1, max(0, int(float(s) * bins)))
        rows[b][0] += 1
        rows[b][1] += float(s)
        rows[b][2] += int(y)
    return [{"lo": i / bins, "hi": (i + 1) / bins, "pairs": int(n), "mean_score": total / n, "relevant": hits / n}
            for i, (n, total, hits) in enumerate(rows) if n]


def expected_calibration_error(scores: Sequence[float], labels: Sequence[int], bins: int = BINS) -> float:
    """ECE of `scores` against binary `labels` (module docstring); 0.0 without pairs."""
    table = reliability(scores, labels, bins)
    total = sum(r["pairs"] for r in table)
    if not total:
        return 0.0
    return sum(r["pairs"] / total * abs(r["mean_score"] - r["relevant"]) for r in table)


def judged_pairs(ranking: Sequence[str], relevancy: Sequence[float], qrels: dict[str, int],
                 top: int = TOP) -> list[tuple[float, int]]:
    """(score, label) of the first `top` distinct documents of one query's results."""
    out: list[tuple[float, int]] = []
    seen: set[str] = set()
    for doc, score in zip(ranking, relevancy):
        if doc in seen:
            continue
        seen.add(doc)
        out.append((float(score), int(qrels.get(doc, 0) > 0)))
        if len(out) == top:
            break
    return out
