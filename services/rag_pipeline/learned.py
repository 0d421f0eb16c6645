"""The learned ranking served: a profile that names a model re-orders its top N fused candidates.

    profile.model_sha256 set   the model is read from the KnowledgeStore (GetRankingModel) once,
                               checked and parsed (ranking/trees.py load_model) and cached by
                               (tenant, sha256); today's top N are found (`learned_top`: the blend),
                               the per-field signals of those that are local entries are asked of the
                               store in one call (KnowledgeStore GetFieldSignals: the query text and
                               the query vector SearchAndRank embedded), and the model re-scores them
                               (`learned_finish`, `ranking.learned.served_features`) — one pass of the
                               ranking core
    model reads none of them   (no split on, no weight for a per-field feature) the store is not
                               asked: those features cannot change its scores
    signals fail / time out    the per-field features stay NaN (as for a federated hit), flagged
                               "learned_signals_unavailable: …"; the search is never failed for it
    model missing / refused    the untrained ranking, flagged in the response's degraded reasons:
    / feature version differs  "learned_model_missing: …", "learned_model_refused: …",
                               "learned_model_mismatch: …", "learned_model_unavailable: …"
    feedback_expansion "rm3"   applied by the store's keyword leg (services/knowledge_store/
                               keywords.py: the pipeline passes the profile's value);
                               the debug says `rm3=+N terms` (`feedback_notes`)

`capture` (set by `nucleus tune`, cli/tune.py, in its own pipeline over the running stack's
services): every query's untrained candidates, their artifact ids, ranking config and the field
signals of every local candidate (one GetFieldSignals call) are handed to it as a `Captured`
before any model applies — the candidates and features tune trains on are the ones served
(`Captured.features_of`: `served_features` over those signals).

The explanation of each result shows the learned Relevancy as its `rerank_score` (the ranking's
rerank column, weight 1) and, for a result the model scored, its feature contributions
(`LearnedExplainer`: computed when the results are built, for the returned rows only): the
MAX_LISTED largest by |contribution|, the rest summed as one "other features" entry, so that
`learned_base` + Σ contribution = the model's score of the result.
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ranking import Candidates, RankingConfig
from ranking.features import FEATURE_NAMES, FEATURE_VERSION
from ranking.learned import (
    SERVED_MISSING,
    FeaturesOf,
    Learned,
    RowSignals,
    learned_finish,
    learned_top,
    served_features,
)
from ranking.profile import RankingProfile
from ranking.rank import Ranked, rank
from ranking.trees import RankerModel, load_model
from services.rag_pipeline.merge import Merged
from services.rag_pipeline.models import OTHER_FEATURES, FeatureContribution
from services.rag_pipeline.ports import KnowledgeSource
from shared.analysis import analyse
from shared.analysis import query_terms as analysis_terms
from shared.errors import InvalidArgument, NotFound, NucleusError

MAX_CACHED_MODELS = 32
FAILED_LOOKUP_TTL_S = 30.0      # a missing or refused model is asked for again after this, not on every query
_PER_FIELD = [FEATURE_NAMES.index(name) for name in SERVED_MISSING]     # what GetFieldSignals serves
MAX_LISTED = 8           # feature contributions listed per result (the rest: one "other features" entry)


def query_terms(query: str) -> int:
    """The number of distinct analysed terms of the query (the `query_terms` feature)."""
    return len(dict.fromkeys(analyse(query)))


@dataclass(frozen=True, slots=True)
class Captured:
    """One query's untrained candidates as `nucleus tune` captures them (module docstring)."""

    query: str
    artifact_ids: list[str]
    candidates: Candidates
    config: RankingConfig
    signals: RowSignals | None      # of every local candidate; None: none local, or not served (`why`)
    why: str = ""                   # why the store served no signals ("" = it did, or nothing to ask)

    def features_of(self) -> FeaturesOf:
        """`features_of(rows, fused)` of these candidates: what serving computes for them."""
        c, cfg, t, signals = self.candidates, self.config, query_terms(self.query), self.signals
        return lambda rows, fused: served_features(c, cfg, t, rows, fused, signals)


class LearnedRanking:
    """Parsed models cached by (tenant, sha256), and the learned re-ordering of a query's candidates."""

    def __init__(self, knowledge: KnowledgeSource, *, signals_timeout_s: float | None = None) -> None:
        self._ks = knowledge
        self._signals_timeout_s = signals_timeout_s       # the GetFieldSignals call's
        self._models: OrderedDict[tuple[str, str], RankerModel] = OrderedDict()
        self._failed: dict[tuple[str, str], tuple[float, str]] = {}       # (tenant, sha) -> (until, why)
        # every query's candidates and their signals, before any model (cli/tune.py)
        self.capture: Callable[[Captured], None] | None = None

    def wanted(self, profile: RankingProfile) -> bool:
        return bool(profile.model_sha256 or self.capture is not None)

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
        failed = self._failed.get(key)
        if failed is not None and failed[0] > time.monotonic():
            return None, failed[1]
        try:
            raw = await self._ks.get_ranking_model(tenant_id, sha)
        except NotFound:
            return self._fail(key, f"learned_model_missing: model {sha[:12]} of profile '{profile.name}' is not stored")
        except NucleusError as err:
            return None, f"learned_model_unavailable: {err}"           # transient: asked again next query
        try:
            if hashlib.sha256(raw).hexdigest() != sha:
                raise InvalidArgument("model", "its bytes do not hash to the profile's model_sha256")
            parsed = load_model(raw, FEATURE_NAMES, FEATURE_VERSION)
        except InvalidArgument as err:
            return self._fail(key, f"learned_model_refused: {err}")
        self._failed.pop(key, None)
        self._models[key] = parsed
        while len(self._models) > MAX_CACHED_MODELS:
            self._models.popitem(last=False)
        return parsed, ""

    def _fail(self, key: tuple[str, str], why: str) -> tuple[None, str]:
        """(None, why), remembered for FAILED_LOOKUP_TTL_S: a profile naming a missing or refused
        model does not cost a store call (and a hash and parse) on every query."""
        now = time.monotonic()
        if len(self._failed) >= MAX_CACHED_MODELS:
            self._failed = {k: v for k, v in self._failed.items() if v[0] > now}
        self._failed[key] = (now + FAILED_LOOKUP_TTL_S, why)
        return None, why

    async def field_signals(self, tenant_id: str, query: str, query_vector: np.ndarray | None,
                            merged: Sequence[Merged], rows: Sequence[int], timeout_s: float | None = None
                            ) -> tuple[RowSignals | None, str]:
        """(the store's FieldSignals of the local entries among candidate `rows`, "") in one call;
        (None, "") when none is local; (None, why) when they cannot be had (no query vector, the
        store failed, timed out or answered out of shape). `timeout_s`: else the constructor's."""
        local = [r for r in rows if not merged[r].origin]
        if not local:
            return None, ""
        if query_vector is None:
            return None, "no query vector (embedding unavailable)"
        try:
            signals = await self._ks.get_field_signals(tenant_id, [merged[r].entry_id for r in local], query,
                                                       np.asarray(query_vector, dtype=np.float32),
                                                       timeout_s=timeout_s or self._signals_timeout_s)
            return RowSignals(signals, np.asarray(local, dtype=np.intp)), ""
        except NucleusError as err:
            return None, str(err)

    async def apply(self, tenant_id: str, query: str, profile: RankingProfile, merged: Sequence[Merged],
                    candidates: Candidates, config: RankingConfig, k: int, reasons: list[str],
                    notes: list[str], query_vector: np.ndarray | None = None, timeout_s: float | None = None
                    ) -> tuple[Ranked, Candidates, LearnedExplainer | None]:
        """(ranked, candidates, explainer): the best k re-ordered by the profile's model, else
        today's ranking (a reason flagged, no explainer). `query_vector`: the query's embedding
        (the store's title cosine); None: the per-field signals are not asked. `timeout_s`: the
        signals call's (what is left of the request's deadline)."""
        asked: tuple[RowSignals | None, str] | None = None       # every local candidate's, when captured
        if self.capture is not None:
            asked = await self.field_signals(tenant_id, query, query_vector, merged, range(len(merged)), timeout_s)
            self.capture(Captured(query, [m.artifact_id for m in merged], candidates, config, *asked))
        model, why = await self.model(tenant_id, profile)
        if why:
            reasons.append(why)
        if model is None or not len(candidates):
            return rank(candidates, config, k), candidates, None
        first = learned_top(candidates, config, model, k)
        if asked is not None:
            signals, why = asked
        elif model.uses(_PER_FIELD):
            signals, why = await self.field_signals(tenant_id, query, query_vector, merged, first.top.tolist(),
                                                    timeout_s)
        else:                     # the model reads no per-field feature: the store is not asked
            signals, why = None, ""
        if why:
            reasons.append(f"learned_signals_unavailable: {why}")
        t = query_terms(query)
        learned = learned_finish(candidates, config, model, k, first,
                                 lambda rs, fused: served_features(candidates, config, t, rs, fused, signals))
        found = 0 if signals is None else int(signals.found_among(candidates, first.top).sum())
        notes.append(f"learned={model.kind} N{model.top_n} model {profile.model_sha256[:12]}")
        notes.append(f"field_signals={found}")         # of the N rows, those served with the store's signals
        return learned.ranked, candidates.with_rerank(learned.column), LearnedExplainer(model, learned, merged)


def feedback_notes(profile: RankingProfile, phrases: Sequence[str], terms: Sequence[str]) -> list[str]:
    """The debug note of a profile's keyword feedback expansion: `rm3=+N terms`, N the terms the
    store's keyword leg searched beyond the query's own (`terms`: the leg's query terms)."""
    if not profile.feedback_expansion:
        return []
    own = set(analysis_terms(phrases))
    return [f"{profile.feedback_expansion}=+{sum(t not in own for t in terms)} terms"]


class LearnedExplainer:
    """The feature contributions of the results a query's model scored, computed for the
    results returned only (they are known once the results are fetched: a vanished entry's
    place is refilled, so candidates are named by their Merged record, not by row)."""

    def __init__(self, model: RankerModel, learned: Learned, merged: Sequence[Merged]) -> None:
        self._model, self._learned = model, learned
        # the Merged records outlive the request's ranking: their identity names a candidate
        self._row = {id(merged[r]): i for i, r in enumerate(learned.top.tolist())}

    def explain(self, chosen: Sequence[Merged]) -> list[tuple[float, tuple[FeatureContribution, ...]] | None]:
        """Per chosen candidate: (learned_base, its largest contributions), None if not scored."""
        at = [self._row.get(id(m), -1) for m in chosen]
        rows = np.asarray([i for i in at if i >= 0], dtype=np.intp)
        if rows.size == 0:
            return [None] * len(chosen)
        x = self._learned.x[rows]
        base, contributions = self._model.contributions(x, self._learned.fused[rows])
        scored = iter(zip(base.tolist(), contributions, x))
        out: list[tuple[float, tuple[FeatureContribution, ...]] | None] = []
        for i in at:
            if i < 0:
                out.append(None)
                continue
            b, c, values = next(scored)
            out.append((b, listed(c, values)))
        return out


def listed(contributions: np.ndarray, values: np.ndarray) -> tuple[FeatureContribution, ...]:
    """The MAX_LISTED largest non-zero contributions by magnitude, then the rest summed."""
    nonzero = np.flatnonzero(contributions)
    order = nonzero[np.argsort(-np.abs(contributions[nonzero]), kind="stable")]
    out = [FeatureContribution(name=FEATURE_NAMES[j], value=None if np.isnan(values[j]) else float(values[j]),
                               contribution=float(contributions[j])) for j in order[:MAX_LISTED].tolist()]
    if order.size > MAX_LISTED:
        out.append(FeatureContribution(name=OTHER_FEATURES, value=None,
                                       contribution=float(contributions[order[MAX_LISTED:]].sum())))
    return tuple(out)
