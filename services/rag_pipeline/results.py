"""The ranked rows as results: entry, artifact, snippet, 4R scores and (asked for) explanation;
and the ranking configuration a query's preferences and profile make (`ranking_config`)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ranking import Candidates, RankingConfig
from ranking.profile import RankingProfile
from ranking.query_features import QueryFeatures
from services.rag_pipeline.federation.hits import LOCAL
from services.rag_pipeline.learned import LearnedExplainer
from services.rag_pipeline.merge import Merged
from services.rag_pipeline.models import Explanation, Preferences, RankedResult
from services.rag_pipeline.snippets import highlights, make_snippet


def build_results(merged: list[Merged], ranked: Any, candidates: Candidates, config: RankingConfig, query: str,
                  explain: bool, *, now_unix: float, learned: LearnedExplainer | None = None
                  ) -> tuple[RankedResult, ...]:
    """One result per ranked row, best first; every chosen candidate must have its `hit` loaded.
    Ages in the explanations are measured from `now_unix`; `learned` (a profile's model scored
    the candidates) adds each returned result's feature contributions."""
    out = []
    weights = tuple(ranked.weights.tolist())
    now = now_unix
    rows = ranked.rows.tolist()              # plain Python numbers once, not numpy scalars per field
    overall, factors = ranked.overall.tolist(), ranked.factors.tolist()
    probability = ranked.probability.tolist()
    if explain:
        contributions = ranked.contributions.tolist()
        dense_norm, bm25_norm = ranked.dense_norm.tolist(), ranked.bm25_norm.tolist()
        rerank = np.nan_to_num(candidates.rerank[ranked.rows], nan=0.0).tolist()
        query_profile = config.query.describe() if config.query is not None else ""
        scored = learned.explain([merged[r] for r in rows]) if learned is not None else [None] * len(rows)
    for pos, row in enumerate(rows):
        m = merged[row]
        source_id = m.origin or LOCAL
        explanation = None
        if explain:
            e, a = m.hit.entry, m.hit.artifact
            ts = e.timestamp_unix or a.modified_unix or a.created_unix
            explanation = Explanation(
                weights=weights,
                contributions=tuple(contributions[pos]),
                dense_cosine=0.0 if math.isnan(m.dense) else m.dense,
                bm25=0.0 if math.isnan(m.bm25) else m.bm25,
                dense_rank=m.dense_rank, bm25_rank=m.bm25_rank,
                dense_norm=dense_norm[pos], bm25_norm=bm25_norm[pos], rerank_score=rerank[pos],
                fusion_method=config.fusion, recency_applied=config.apply_recency,
                age_days=max(0.0, (now - ts) / 86400.0) if ts else -1.0,
                dense_source=m.source("dense"), bm25_source=m.source("bm25"),
                dense_weight=ranked.dense_weight, query_profile=query_profile,
                source_id=source_id,
                remote_score=0.0 if math.isnan(m.remote_score) else m.remote_score,
                reputation_basis=reputation_basis(m, config.prior_strength),
                **({} if scored[pos] is None else {"learned_base": scored[pos][0],
                                                   "feature_contributions": scored[pos][1]}),
            )
        snippet = make_snippet(m.hit.entry.text, query)
        out.append(RankedResult(entry=m.hit.entry, artifact=m.hit.artifact,
                                snippet=snippet, highlights=highlights(snippet, query),
                                overall=overall[pos], scores=tuple(factors[pos]), explanation=explanation,
                                probability=probability[pos], source_id=source_id, resource_id=m.resource))
    return tuple(out)


def reputation_basis(m: Merged, prior_strength: float) -> str:
    """Where a result's Reputation came from: whose prior and votes, smoothed with the profile's
    prior strength (ranking/rank.py `reputation`). A federated hit's votes are its source's."""
    _, _, prior, helpful, unhelpful = m.signals
    if not m.origin:
        return (f"artifact: prior {prior:.2f}, {helpful} helpful / {unhelpful} unhelpful users, "
                f"prior strength {prior_strength:g}")
    return (f"source {m.origin}: prior {prior:.2f}{m.prior_note}, {helpful} helpful / {unhelpful} unhelpful "
            f"users' votes on the source, prior strength {prior_strength:g}")


def recency_applies(mode: str, has_intent: bool) -> bool:
    return mode == "always" or (mode in ("", "auto") and has_intent)


def ranking_config(prefs: Preferences, profile: RankingProfile, apply_recency: bool, now_unix: float,
                   features: QueryFeatures | None = None) -> RankingConfig:
    """The request's preferences over the profile's settings."""
    weights = prefs.weights or (profile.relevancy_weight, profile.recency_weight, profile.richness_weight,
                                profile.reputation_weight)
    return RankingConfig(
        weights=tuple(float(w) for w in weights),
        fusion=prefs.fusion or profile.fusion_method,
        dense_weight=profile.dense_weight,
        query=features,
        half_life_days=prefs.half_life_days or profile.recency_half_life_days,
        apply_recency=apply_recency,
        now_unix=now_unix,
        prior_strength=profile.reputation_prior_strength,
        rerank_weight=profile.rerank_weight,
    )
