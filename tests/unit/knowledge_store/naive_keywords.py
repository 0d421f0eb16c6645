"""Naive keyword scoring, loop by loop over stored analysed terms: what the keyword leg must equal.

    bm25       Okapi BM25 of weighted terms (contribution × weight) over a whole tenant given as
               entry id -> (title terms, body terms), as stored (StoreBackend.entry_terms)
    random_tenant  40 random texts ingested, their stored terms
    rm3_terms  the lab's RM3 (ranking.feedback.rm3, as benchmarks/field_index.py `expanded` calls
               it) over the FEEDBACK_DOCS best first-pass hits among `allowed`, ties between
               equally likely terms to the alphabetically first
"""
from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import numpy as np

from ranking.feedback import FEEDBACK_DOCS, rm3
from services.knowledge_store.keywords import B, DEFAULT_BM25_WEIGHTS, K1
from tests.unit.knowledge_store.helpers import doc


def bm25(docs: Mapping[str, tuple[str, str]], weights: Mapping[str, float]) -> dict[str, float]:
    split = {e: (t.split(), b.split()) for e, (t, b) in docs.items()}
    n = len(split)
    avgdl = sum(len(t) + len(b) for t, b in split.values()) / n
    out = {}
    for entry, (title, body) in split.items():
        dl = len(title) + len(body)
        total = 0.0
        for term, weight in weights.items():
            df = sum(1 for t, b in split.values() if term in t or term in b)
            if not df:
                continue
            idf = math.log1p((n - df + 0.5) / (df + 0.5))
            tf = DEFAULT_BM25_WEIGHTS[0] * title.count(term) + DEFAULT_BM25_WEIGHTS[1] * body.count(term)
            if tf:
                total += weight * idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * dl / avgdl))
        out[entry] = total
    return out


def rm3_terms(docs: Mapping[str, tuple[str, str]], query: list[str], allowed: Collection[str]) -> dict[str, float]:
    """The expanded query's weighted terms (the query's own first), {} when nothing was found."""
    first = bm25(docs, dict.fromkeys(query, 1.0))
    held = [t for t in dict.fromkeys(query) if any(t in (a + " " + b).split() for a, b in docs.values())]
    feedback = sorted((e for e in docs if e in allowed and first[e] > 0), key=lambda e: -first[e])[:FEEDBACK_DOCS]
    if not feedback or not held:
        return {}
    streams = [(docs[e][0] + " " + docs[e][1]).split() for e in feedback]
    doc_terms = sorted({w for s in streams for w in s})
    vocab = sorted(set(doc_terms) | set(held))
    tf = np.asarray([[s.count(w) for w in doc_terms] for s in streams], dtype=np.float64)
    ids, weights = rm3(np.asarray([vocab.index(t) for t in held]), tf, np.asarray([len(s) for s in streams], float),
                       np.asarray([first[e] for e in feedback]), np.asarray([vocab.index(w) for w in doc_terms]))
    return {vocab[int(i)]: float(w) for i, w in zip(ids, weights)}


WORDS = ("glacier volcano yeast enzyme protein neuron cortex tumor kidney insulin vaccine virus antibody plasma "
         "membrane receptor lipid carbon nitrogen oxygen").split()


async def random_tenant(store, tenant: str, seed: int) -> dict[str, tuple[str, str]]:
    """40 random texts of WORDS, ingested in one batch (one average length on both backends):
    entry id -> its stored analysed (title terms, body terms)."""
    rng = np.random.default_rng(seed)
    corpus = [doc(f"r{i}", " ".join(rng.choice(WORDS, int(rng.integers(4, 30)))),
                  title=" ".join(rng.choice(WORDS, int(rng.integers(1, 4))))) for i in range(40)]
    await store.ingest(tenant, "", corpus)
    docs = await store.entry_terms(tenant, [f"r{i}#0" for i in range(40)])
    assert len(docs) == 40
    return docs
