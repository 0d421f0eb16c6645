"""Explainable 4R ranking of retrieval candidates: a pure numpy core, no I/O.

    inputs.py      Candidates — the columnar input (dense + BM25 legs, metadata, feedback);
                   RankingConfig, DEFAULT_WEIGHTS — validated tuning
    query_features.py  query_features, adaptive_dense_weight — the adaptive fusion's per-query weight;
                   detect_temporal_intent — does the query ask for fresh information?
    rank.py        the factors: relevancy (fusion + confidence), relevance probability, recency,
                   reputation, richness; rank — blend them, keep the top k, explain each
                   (blend / explain: the two steps)
    features.py    the learned re-ranker's features (FEATURE_VERSION, FEATURE_NAMES)
    trees.py       load_model — a stored ranking model checked, parsed and evaluated in numpy, its
                   feature contributions (RankerModel.contributions)
    learned.py     learned_ranking — a model re-orders today's top N, in one pass
    feedback.py    rm3 — keyword feedback expansion weights

Typical use by the RAG pipeline::

    intent = detect_temporal_intent(query, now_year=year)     # the caller owns the clock
    features = query_features(query, document_frequencies, entries)   # from the keyword index
    cfg = RankingConfig(fusion="adaptive", query=features, apply_recency=intent.has_intent, now_unix=now)
    ranked = rank(Candidates.build(dense=..., bm25=..., timestamp=..., ...), cfg, k=10)
"""
from ranking.inputs import DEFAULT_WEIGHTS, FACTOR_NAMES, Candidates, RankingConfig
from ranking.query_features import TemporalIntent, detect_temporal_intent
from ranking.rank import FusionTrace, Ranked, effective_weights, rank, recency, relevancy, reputation, richness, top_k

__all__ = [
    "DEFAULT_WEIGHTS",
    "FACTOR_NAMES",
    "Candidates",
    "FusionTrace",
    "Ranked",
    "RankingConfig",
    "TemporalIntent",
    "detect_temporal_intent",
    "effective_weights",
    "rank",
    "recency",
    "relevancy",
    "reputation",
    "richness",
    "top_k",
]
