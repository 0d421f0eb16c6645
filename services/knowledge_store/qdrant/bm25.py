"""Tenant-scoped BM25 as a sparse dot product.

Each chunk point stores, per analysed term, its saturated term frequency

    s(t, d) = tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl))

(tf = w_title · tf_title + w_body · tf_body, dl = title + body terms, k1 = 1.2, b = 0.75: the
embedded keyword index's parameters, ../keywords.py), and a query is sent as the sparse vector
of its terms weighted by the tenant's idf, ln(1 + (N − n + ½)/(n + ½)) from the document
frequencies the store keeps per tenant (term_stats). The dot product is then exactly the
embedded BM25 of the tenant, except for avgdl: the embedded index uses the tenant's average
length at query time, while a stored vector keeps the average at the time it was written
(`avgdl` of the tenant after the write, a snapshot). Qdrant's own IDF modifier is not used: it
counts the whole collection, mixing tenants.

Why a snapshot: recomputing every vector whenever the average moves would rewrite the tenant on
each ingest. The average of a tenant moves little once it holds a few hundred entries (SciFact:
the first 512-document batch's average is within 2 % of the final one), and the effect on
scores is second-order (a change of avgdl by x % changes the length norm by ≤ b·x %).
`resaturate` rewrites a tenant's sparse vectors with its current average (run by
`QdrantKnowledgeStore.check_tenant(repair=True)` and `nucleus migrate`).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from qdrant_client import models as qm

from services.knowledge_store.keywords import B, K1
from services.knowledge_store.qdrant.layout import term_index


def term_counts(title_terms: str, body_terms: str, weights: tuple[float, float]) -> tuple[dict[int, float], int]:
    """(weighted tf by term index, document length) of one entry's analysed title and body."""
    t_terms, b_terms = title_terms.split(), body_terms.split()
    tf: dict[int, float] = {}
    for term, n in Counter(t_terms).items():
        i = term_index(term)
        tf[i] = tf.get(i, 0.0) + weights[0] * n
    for term, n in Counter(b_terms).items():
        i = term_index(term)
        tf[i] = tf.get(i, 0.0) + weights[1] * n
    return tf, len(t_terms) + len(b_terms)


def saturated(tf: dict[int, float], dl: int, avgdl: float) -> qm.SparseVector:
    norm = K1 * (1.0 - B + B * (dl / (avgdl if avgdl > 0 else 1.0)))
    items = sorted((i, t * (K1 + 1.0) / (t + norm)) for i, t in tf.items() if t > 0)
    return qm.SparseVector(indices=[i for i, _ in items], values=[v for _, v in items])


def idf(n: int, df: int) -> float:
    return math.log1p((n - df + 0.5) / (df + 0.5))


def query_vector(terms: Sequence[str], dfs: dict[int, int], n: int,
                 term_weights: Sequence[float] | None = None) -> qm.SparseVector | None:
    """The query's sparse vector: each distinct term a live entry holds, weighted by its idf
    (× its weight in `term_weights`, when given: an expanded query, ../keywords.py)."""
    weights: dict[int, float] = {}
    given = dict.fromkeys(terms) if term_weights is None else dict(zip(terms, term_weights))
    for term, weight in given.items():
        i = term_index(term)
        df = dfs.get(i, 0)
        if df > 0 and i not in weights:
            weights[i] = idf(n, df) if weight is None else idf(n, df) * weight
    if not weights:
        return None
    items = sorted(weights.items())
    return qm.SparseVector(indices=[i for i, _ in items], values=[v for _, v in items])


def dot(query: qm.SparseVector | None, vector: qm.SparseVector | None) -> float:
    if query is None or vector is None:
        return 0.0
    weights = dict(zip(query.indices, query.values))
    return float(sum(weights.get(i, 0.0) * v for i, v in zip(vector.indices, vector.values)))


def score_text(query: qm.SparseVector | None, title_terms: str, body_terms: str, weights: tuple[float, float],
               avgdl: float) -> float:
    """BM25 of `query` (`query_vector`, built once per request) for a text the store does not
    hold, with the tenant's average length."""
    tf, dl = term_counts(title_terms, body_terms, weights)
    return dot(query, saturated(tf, dl, avgdl))


def unsaturate(vector: qm.SparseVector, dl: int, avgdl: float) -> dict[int, float]:
    """The weighted tf behind a stored saturated vector (the inverse of `saturated`)."""
    norm = K1 * (1.0 - B + B * (dl / (avgdl if avgdl > 0 else 1.0)))
    return {i: s * norm / (K1 + 1.0 - s) for i, s in zip(vector.indices, vector.values) if s < K1 + 1.0}
