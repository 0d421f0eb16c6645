"""Ranking-quality measures over ids and graded judgements, one definition for every place that
scores a ranking: the benchmarks (benchmarks/metrics.py), `nucleus tune`'s paired report
(services/rag_pipeline/learning/report.py) and the console's judged-set evaluation
(services/rag_pipeline/console/evaluation.py).

An id counts once, at its first position (several chunks of one document are the document);
gains are the grades, linear, a grade below 0 counting as 0 (trec_eval's ndcg_cut).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def unique_in_order(ids: Iterable[str]) -> list[str]:
    """First occurrence of each id, order kept (chunks -> documents, best rank wins)."""
    return list(dict.fromkeys(ids))


def ndcg_at_k(ranking: Sequence[str], grades: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k, discount 1 / log2(rank + 1); 0.0 when nothing is judged relevant."""
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    dcg = sum(max(grades.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(unique_in_order(ranking)[:k]))
    return dcg / sum(g / math.log2(i + 2) for i, g in enumerate(ideal))


def recall_at_k(ranking: Sequence[str], grades: Mapping[str, float], k: int = 10) -> float:
    """The share of the relevant ids (grade > 0) among the first k distinct ids; 0.0 without any."""
    relevant = {d for d, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(unique_in_order(ranking)[:k])) / len(relevant)
