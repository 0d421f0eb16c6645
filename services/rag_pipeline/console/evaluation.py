"""Comparing two rankings and two profiles on a judged query set (plain Python, no I/O).

    rbo(a, b, p)          rank-biased overlap, extrapolated (Webber, Moffat & Zobel 2010, eq. 32)
    movements(a, b)       per item of `b`: "up" / "down" / "same" / "new" relative to `a`
    ndcg_at(ranked, grades, k), recall_at(ranked, grades, k)
    parse_query_set(data) an uploaded JSONL query set -> [JudgedQuery]; InvalidArgument names the line
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Sequence

from shared.errors import InvalidArgument
from shared.relevance import ndcg_at_k, recall_at_k, unique_in_order

MAX_QUERY_SET_BYTES = 1 << 20       # 1 MiB
MAX_QUERIES = 200
MAX_QUERY_CHARS = 1_000
MAX_JUDGED = 1_000                  # judged documents per query


@dataclass(frozen=True, slots=True)
class JudgedQuery:
    query: str
    grades: dict[str, float]        # artifact_id -> grade (> 0: relevant)


def rbo(a: Sequence[str], b: Sequence[str], p: float = 0.9) -> float:
    """Extrapolated RBO of two rankings without ties (1.0: identical, 0.0: disjoint)."""
    if not 0.0 < p < 1.0:
        raise InvalidArgument("p", f"must be in (0, 1), got {p}")
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    s, length = len(short), len(long_)
    seen_s: set[str] = set()
    seen_l: set[str] = set()
    overlap = 0
    x: list[int] = []                 # x[d-1] = overlap at depth d (the short list stops growing at s)
    for d in range(1, length + 1):
        item_l = long_[d - 1]
        if d <= s:
            item_s = short[d - 1]
            if item_s == item_l:
                overlap += 1
            else:
                overlap += (item_s in seen_l) + (item_l in seen_s)
            seen_s.add(item_s)
        elif item_l in seen_s:
            overlap += 1
        seen_l.add(item_l)
        x.append(overlap)
    x_s, x_l = x[s - 1], x[length - 1]
    total = sum(x[d - 1] / d * p ** d for d in range(1, length + 1))
    total += sum(x_s * (d - s) / (s * d) * p ** d for d in range(s + 1, length + 1))
    return (1 - p) / p * total + ((x_l - x_s) / length + x_s / s) * p ** length


def movements(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int]]:
    """For each item of `b` (in order): its marker relative to `a` and its rank change (positive = up)."""
    rank_a = {item: i for i, item in enumerate(a)}
    out = []
    for i, item in enumerate(b):
        if item not in rank_a:
            out.append(("new", 0))
        else:
            delta = rank_a[item] - i
            out.append(("up" if delta > 0 else "down" if delta < 0 else "same", delta))
    return out


# Measures over distinct ids (several chunks of one document count as the document once), linear
# gains: the one definition in shared/relevance.py, under the names the console uses.
distinct = unique_in_order
ndcg_at = ndcg_at_k
recall_at = recall_at_k


def _grades(line_no: int, raw: object) -> dict[str, float]:
    where = f"line {line_no}: relevant"
    if isinstance(raw, list):
        if not all(isinstance(v, str) and v for v in raw):
            raise InvalidArgument(where, "must be a list of artifact ids (strings) or {artifact_id: grade}")
        grades = {v: 1.0 for v in raw}
    elif isinstance(raw, dict):
        grades = {}
        for key, value in raw.items():
            if not key or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise InvalidArgument(where, "grades must be finite numbers >= 0")
            grades[key] = float(value)
    else:
        raise InvalidArgument(where, "must be a list of artifact ids or {artifact_id: grade}")
    if len(grades) > MAX_JUDGED:
        raise InvalidArgument(where, f"has {len(grades)} judged documents; at most {MAX_JUDGED}")
    return grades


def parse_query_set(data: bytes) -> list[JudgedQuery]:
    """A JSONL query set: one `{"query": "...", "relevant": [...] | {id: grade}}` per line;
    blank lines are skipped."""
    if len(data) > MAX_QUERY_SET_BYTES:
        raise InvalidArgument("query_set", f"is {len(data)} bytes; at most {MAX_QUERY_SET_BYTES} accepted")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("query_set", "must be UTF-8 text (JSON Lines)") from None
    out: list[JudgedQuery] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise InvalidArgument(f"line {line_no}", "is not a JSON object") from None
        if not isinstance(row, dict):
            raise InvalidArgument(f"line {line_no}", "is not a JSON object")
        query = row.get("query")
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"line {line_no}: query", f"must be 1-{MAX_QUERY_CHARS} characters")
        out.append(JudgedQuery(query=query.strip(), grades=_grades(line_no, row.get("relevant"))))
        if len(out) > MAX_QUERIES:
            raise InvalidArgument("query_set", f"has more than {MAX_QUERIES} queries")
    if not out:
        raise InvalidArgument("query_set", "holds no query (one JSON object per line)")
    return out


__all__ = ["MAX_QUERY_SET_BYTES", "MAX_QUERIES", "JudgedQuery", "rbo", "movements", "distinct", "ndcg_at",
           "recall_at", "parse_query_set"]
