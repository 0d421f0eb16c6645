"""Nested cross-validation by query over the candidate ranking settings.

Folds: queries that share a judged relevant document, or whose analysed term sets overlap by
Jaccard ≥ NEAR_DUPLICATE, are one group (union-find), and a group never spans two folds; groups
go to the fold with the fewest queries, largest first (ties by a hash of the group's first id),
so folds are deterministic and never look at the scores.

Settings (SETTINGS): the current profile first (it wins ties), fusion dense weight ± 0.1,
keyword feedback expansion (RM3) on, and the learned re-ranker — linear or trees, over the top
30 or 100 — with and without feedback. The learned settings keep the profile's fusion.

    outer fold   only scores: the setting is chosen, and the model trained, on the other folds
    inner folds  choose: each setting's mean nDCG@10 over the inner folds of the tuning queries
                 (a learned setting trained on the other inner folds, early-stopped on the scored
                 one — so its inner score is a little optimistic; it only chooses), then the
                 chosen setting is trained on all the tuning queries (trees: for the mean number
                 of rounds early stopping chose)

A `Prepared` query is what the ranking sees: candidate document ids, their `Candidates`, the
profile's `RankingConfig` and a function giving the feature matrix of some rows.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ranking import Candidates, RankingConfig, rank
from ranking.learned import fused_scores, learned_order
from ranking.trees import RankerModel
from services.rag_pipeline.learning.report import ndcg_at_10
from services.rag_pipeline.learning.train import PRODUCTION, FeatureSet, TrainRows, fit
from shared.analysis import analyse

NEAR_DUPLICATE = 0.6
INNER_FOLDS = 3
DEPTH = 100


@dataclass(frozen=True, slots=True)
class Setting:
    kind: str = "off"                  # off | linear | trees
    top_n: int = 0
    feedback: bool = False
    dense_weight: float | None = None  # None = the profile's

    @property
    def name(self) -> str:
        parts = [self.kind if self.kind == "off" else f"{self.kind} N{self.top_n}"]
        if self.dense_weight is not None:
            parts.append(f"dense {self.dense_weight:g}")
        if self.feedback:
            parts.append("rm3")
        return ", ".join(parts)


SETTINGS: tuple[Setting, ...] = (
    Setting(), Setting(dense_weight=0.5), Setting(dense_weight=0.7), Setting(feedback=True),
    Setting("linear", 100), Setting("linear", 100, True),
    Setting("trees", 30), Setting("trees", 100), Setting("trees", 30, True), Setting("trees", 100, True),
)


@dataclass(frozen=True, slots=True)
class Prepared:
    doc_ids: list[str]
    candidates: Candidates
    config: RankingConfig
    features_of: Callable[[NDArray[np.intp], NDArray[np.float32]], NDArray[np.float32]]


@dataclass(frozen=True, slots=True)
class Chosen:
    setting: Setting
    inner: dict[str, float]            # setting name -> mean inner nDCG@10
    model: RankerModel | None
    model_bytes: bytes
    rounds: int


def query_groups(qids: Sequence[str], qrels: Mapping[str, Mapping[str, int]],
                 texts: Mapping[str, str]) -> dict[str, str]:
    """qid -> group representative (module docstring)."""
    parent = {q: q for q in qids}

    def find(q: str) -> str:
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    by_doc: dict[str, str] = {}
    for q in qids:
        for doc, rel in qrels.get(q, {}).items():
            if rel > 0:
                if doc in by_doc:
                    union(q, by_doc[doc])
                else:
                    by_doc[doc] = q
    terms = {q: set(analyse(texts.get(q, ""))) for q in qids}
    for i, a in enumerate(qids):
        for b in qids[i + 1:]:
            ta, tb = terms[a], terms[b]
            if ta and tb and len(ta & tb) / len(ta | tb) >= NEAR_DUPLICATE:
                union(a, b)
    return {q: find(q) for q in qids}


def folds(qids: Sequence[str], groups: Mapping[str, str], k: int) -> list[list[str]]:
    """k folds of `qids`, whole groups only, balanced by query count (module docstring)."""
    members: dict[str, list[str]] = {}
    for q in qids:
        members.setdefault(groups[q], []).append(q)
    order = sorted(members.values(), key=lambda m: (-len(m), hashlib.sha256(m[0].encode()).hexdigest()))
    out: list[list[str]] = [[] for _ in range(k)]
    for m in order:
        min(out, key=len).extend(m)
    return out


class Learner:
    """Scores, trains and chooses settings over prepared queries (cached per query)."""

    def __init__(self, source: Callable[[str, bool], Prepared], qrels: Mapping[str, Mapping[str, int]],
                 settings: Sequence[Setting] = SETTINGS, inner_folds: int = INNER_FOLDS,
                 groups: Mapping[str, str] | None = None, shared: Learner | None = None,
                 feature_set: FeatureSet = PRODUCTION) -> None:
        self.source = source
        self.feature_set = feature_set          # the columns `Prepared.features_of` gives
        self.qrels = qrels
        self.settings = tuple(settings)
        self.inner_folds = inner_folds
        self.groups = groups
        # per (query, feedback): the prepared query, today's best DEPTH rows, the fused scores of
        # all candidates, the features and judged labels of those rows (`shared`: another
        # learner's, for the same queries)
        self._cache: dict[tuple[str, bool], tuple[Prepared, NDArray[np.intp], NDArray, NDArray, NDArray]] = (
            shared._cache if shared is not None else {})

    def top(self, qid: str, feedback: bool) -> tuple[Prepared, NDArray[np.intp], NDArray, NDArray, NDArray]:
        """(prepared query, today's best rows, fused scores, their features, their labels), cached."""
        key = (qid, feedback)
        if key not in self._cache:
            p = self.source(qid, feedback)
            base = rank(p.candidates, p.config, DEPTH).rows if len(p.candidates) else np.zeros(0, np.intp)
            fused = fused_scores(p.candidates, p.config) if len(p.candidates) else np.zeros(0, np.float32)
            x = p.features_of(base, fused)
            rels = self.qrels.get(qid, {})
            labels = np.asarray([rels.get(p.doc_ids[r], 0) for r in base], dtype=np.int32)
            self._cache[key] = (p, base, fused, x, labels)
        return self._cache[key]

    def ranking(self, qid: str, setting: Setting, model: RankerModel | None) -> list[str]:
        p, base, fused, x, _ = self.top(qid, setting.feedback)
        if not len(p.candidates):
            return []
        if setting.kind == "off":
            cfg = p.config if setting.dense_weight is None else replace(p.config, dense_weight=setting.dense_weight)
            rows = rank(p.candidates, cfg, DEPTH).rows
        else:
            at = {int(r): i for i, r in enumerate(base)}
            rows = learned_order(p.candidates, p.config, model, DEPTH,
                                 lambda rs, _f: x[[at[int(r)] for r in rs]])
        return [p.doc_ids[r] for r in rows]

    def scores(self, qids: Sequence[str], setting: Setting, model: RankerModel | None) -> list[float]:
        return [ndcg_at_10(self.ranking(q, setting, model), self.qrels.get(q, {})) for q in qids]

    def rows(self, qids: Sequence[str], setting: Setting) -> TrainRows:
        parts = []
        for q in qids:
            _, base, fused, x, labels = self.top(q, setting.feedback)
            n = min(setting.top_n, base.size)
            parts.append((x[:n], fused[base[:n]], labels[:n]))
        return TrainRows.concat(parts)

    def choose(self, tune: Sequence[str]) -> Chosen:
        """The setting with the best mean inner nDCG@10, trained on all of `tune`."""
        groups = self.groups or {q: q for q in tune}
        inner = [f for f in folds(tune, groups, self.inner_folds) if f]
        table: dict[str, float] = {}
        rounds: dict[str, int] = {}
        for s in self.settings:
            per_query: list[float] = []
            used: list[int] = []
            for j, held in enumerate(inner):
                if s.kind == "off":
                    per_query += self.scores(held, s, None)
                    continue
                train = [q for i, f in enumerate(inner) if i != j for q in f]
                _, model, n = fit(s.kind, self.rows(train, s), s.top_n, valid=self.rows(held, s),
                                  feature_set=self.feature_set)
                used.append(n)
                per_query += self.scores(held, s, model)
            table[s.name] = float(np.mean(per_query)) if per_query else 0.0
            rounds[s.name] = int(round(np.mean(used))) if used else 0
        best = max(self.settings, key=lambda s: (table[s.name], -self.settings.index(s)))
        if best.kind == "off":
            return Chosen(best, table, None, b"", 0)
        raw, model, n = fit(best.kind, self.rows(tune, best), best.top_n, rounds=max(rounds[best.name], 1),
                            feature_set=self.feature_set)
        return Chosen(best, table, model, raw, n)
