"""The learned ranking served: a profile that names a model re-orders its top N fused candidates.

    profile.model_sha256 set   the model is read from the KnowledgeStore (GetRankingModel) once,
                               checked and parsed (ranking/trees.py load_model) and cached by
                               (tenant, sha256); `ranking.learned.learned_rerank` re-scores today's
                               top N with features from what the stack serves
                               (`ranking.learned.served_features`: per-field signals missing)
    model missing / refused    the untrained ranking, flagged in the response's degraded reasons:
    / feature version differs  "learned_model_missing: …", "learned_model_refused: …",
                               "learned_model_mismatch: …", "learned_model_unavailable: …"
    feedback_expansion "rm3"   not applied when serving yet (the store's keyword leg takes no term
                               weights): the response's debug says so

`capture` (set by `nucleus tune`, cli/tune.py, in its own pipeline over the running stack's
services): every query's untrained candidates, their artifact ids and ranking config are handed
to it before any model applies — the candidates and features tune trains on are the ones served.

The explanation of each result shows the learned Relevancy as its `rerank_score` (the ranking's
rerank column, weight 1). Per-result feature contributions are not built.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ranking import Candidates, RankingConfig
from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.learned import learned_rerank, ranked_in_order, served_features
from ranking.profile import RankingProfile
from ranking.trees import RankerModel, load_model
from services.rag_pipeline.ports import KnowledgeSource
from shared.analysis import analyse
from shared.errors import InvalidArgument, NotFound, NucleusError

MAX_CACHED_MODELS = 32


def query_terms(query: str) -> int:
    """The number of distinct analysed terms of the query (the `query_terms` feature)."""
    return len(dict.fromkeys(analyse(query)))


class LearnedRanking:
    """Parsed models cached by (tenant, sha256), and the learned re-ordering of a query's candidates."""

    def __init__(self, knowledge: KnowledgeSource) -> None:
        self._ks = knowledge
        self._models: OrderedDict[tuple[str, str], RankerModel] = OrderedDict()
        # (query, artifact ids, candidates, config) of every query, before any model (cli/tune.py)
        self.capture: Callable[[str, list[str], Candidates, RankingConfig], None] | None = None

    def wanted(self, profile: RankingProfile) -> bool:
        return bool(profile.model_sha256 or profile.feedback_expansion or self.capture is not None)

    async def model(self, tenant_id: str, profile: RankingProfile) -> tuple[RankerModel | None, str]:
        """(the profile's model, "") or (None, why it is not used); (None, "") without a model."""
        sha = profile.model_sha256
        if not sha:
            return None, ""
        if profile.feature_version != FEATURE_VERSION:
            return None, (f"learned_model_mismatch: profile '{profile.name}' v{profile.version} names a model of "
                          f"feature version {profile.feature_version}; this ranking computes {FEATURE_VERSION}")
        key = (tenant_id, sha)
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key], ""
        try:
            raw = await self._ks.get_ranking_model(tenant_id, sha)
        except NotFound:
            return None, f"learned_model_missing: model {sha[:12]} of profile '{profile.name}' is not stored"
        except NucleusError as err:
            return None, f"learned_model_unavailable: {err}"
        try:
            if hashlib.sha256(raw).hexdigest() != sha:
                raise InvalidArgument("model", "its bytes do not hash to the profile's model_sha256")
            parsed = load_model(raw, FEATURE_NAMES, FEATURE_VERSION)
        except InvalidArgument as err:
            return None, f"learned_model_refused: {err}"
        self._models[key] = parsed
        while len(self._models) > MAX_CACHED_MODELS:
            self._models.popitem(last=False)
        return parsed, ""

    async def apply(self, tenant_id: str, query: str, profile: RankingProfile, merged: Sequence[Any],
                    candidates: Candidates, config: RankingConfig, ranked: Any, k: int, reasons: list[str],
                    notes: list[str]) -> tuple[Any, Candidates]:
        """(ranked, candidates): re-ordered by the profile's model, else as given (a reason flagged)."""
        if self.capture is not None:
            self.capture(query, [m.artifact_id for m in merged], candidates, config)
        if profile.feedback_expansion:
            notes.append(f"feedback_expansion={profile.feedback_expansion} not applied (not served yet)")
        model, why = await self.model(tenant_id, profile)
        if why:
            reasons.append(why)
        if model is None or not len(candidates):
            return ranked, candidates
        t = query_terms(query)
        rows, column = learned_rerank(candidates, config, model, k,
                                      lambda rs, fused: served_features(candidates, config, t, rs, fused))
        updated = replace(candidates, rerank=column)
        notes.append(f"learned={model.kind} N{model.top_n} model {profile.model_sha256[:12]}")
        return ranked_in_order(updated, config, rows), updated
