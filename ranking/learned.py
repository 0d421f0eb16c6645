"""The learned re-ranker applied: its calibrated output becomes the Relevancy of the top N.

    1. rank all candidates as today (fusion, 4R: one `blend`) and take the best N = model.top_n
    2. score = init_scale · fused + model(features)    (ranking/trees.py)
    3. relevancy = min-max of score over the N × today's confidence scaling (ranking/trees.py)
    4. the 4R blend, unchanged, over those N with that relevancy (`reblend`: the same float32
       operations as the blend, so the order is what ranking them again with the `rerank` column
       and rerank_weight 1 gives), then the rest in today's order below them

A candidate outside the top N keeps its place below. No model (None) = today's ranking.
`learned_ranking` is one pass of the ranking core (the fusion trace and the side factors of step
1 are reused in 4), and explains only the rows it returns; `learned_order` is its order alone
(what the training scores) — one path.

`served_features` are the features computed from what the stack serves: the legs' scores and
ranks, the fused score and the 4R side factors, and — given the store's `FieldSignals` of the
rows (KnowledgeStore GetFieldSignals: title and body term statistics, title vectors, positions,
chunk position; `RowSignals`) — the per-field ones, through `ranking.features.features` itself,
so they equal the in-process definition. A row without signals (a federated hit, an entry the
store did not find, a row not asked, or no store answer at all) has every per-field feature
(SERVED_MISSING) NaN = missing, in training through the stack and in serving alike.

`learned_ranking` is `learned_top` (the blend, today's top N: the rows whose signals the caller
fetches) then `learned_finish` (features, model, re-blend): one pass, split where the caller awaits.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ranking.inputs import Candidates
from ranking.inputs import RankingConfig
from ranking.rank import CONFIDENCE_FLOOR, NEUTRAL_RECENCY, recency, relevancy, reputation, richness
from ranking.features import FEATURE_NAMES, FeatureInputs, FieldTerms, features, leg_features
from ranking.rank import Blend, Ranked, blend, check_k, empty_ranked, explain, rank, reblend, top_k
from ranking.trees import RankerModel, learned_relevancy
from shared.errors import InvalidArgument
from shared.records import FieldSignals

_F32 = np.float32

#: The per-field features: computed from the store's FieldSignals of a row (`RowSignals`), NaN =
#: missing for a row without them (a federated hit, an entry not found, no store answer).
SERVED_MISSING: tuple[str, ...] = (
    *(f"{kind}_{field}" for field in ("title", "body", "doc") for kind in ("bm25", "cover", "idf_cover")),
    "dense_title", "min_window", "phrase_body", "phrase_title", "chunk_position", "length",
)
_MISSING = [FEATURE_NAMES.index(name) for name in SERVED_MISSING]
_AT = {name: i for i, name in enumerate(FEATURE_NAMES)}

FeaturesOf = Callable[[NDArray[np.intp], NDArray[np.float32]], NDArray[np.float32]]
"""`features_of(rows, fused)`: the (len(rows), F) feature matrix of those rows (fused: every row's)."""


def fused_scores(c: Candidates, cfg: RankingConfig) -> NDArray[np.float32]:
    """Today's within-query fused score of every candidate (the residual's base)."""
    return relevancy(c, cfg)[1].fused


@dataclass(frozen=True, slots=True)
class Learned:
    """A query's learned ranking: the returned rows explained, and what the model saw."""

    ranked: Ranked                  # the rows returned, best first (Relevancy: the learned one in the top N)
    column: NDArray[np.float32]     # (n,) the `rerank` column: the learned Relevancy of the top N, NaN elsewhere
    top: NDArray[np.intp]           # (N,) the rows the model scored (today's top N)
    x: NDArray[np.float32]          # (N, F) their features
    fused: NDArray[np.float32]      # (N,) their fused scores (the residual's base)


@dataclass(frozen=True, slots=True)
class TopN:
    """`learned_top`'s pass: the blend of every candidate and today's best rows."""

    blend: Blend | None             # None: no candidates
    base: NDArray[np.intp]          # today's best max(k, N) rows, best first
    top: NDArray[np.intp]           # (≤ N,) the rows the model scores: base[:N]


def learned_top(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int) -> TopN:
    """Step 1 (module docstring): the 4R blend of every candidate once and today's top N — the
    rows whose features `learned_finish` computes (a caller fetches their signals in between)."""
    check_k(k)
    if len(c) == 0:
        return TopN(None, np.zeros(0, np.intp), np.zeros(0, np.intp))
    b = blend(c, cfg)
    base = top_k(b.overall, max(k, model.top_n))
    return TopN(b, base, base[:model.top_n])


def learned_finish(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int, first: TopN,
                   features_of: FeaturesOf) -> Learned:
    """Steps 2–4 over `first` (`learned_top` of the same arguments): the best k rows of `c`
    with the top N re-scored by `model`, explained."""
    check_k(k)
    column = np.full(len(c), np.nan, dtype=_F32)
    b, base, top = first.blend, first.base, first.top
    if b is None:
        return Learned(empty_ranked(cfg), column, np.zeros(0, np.intp), np.zeros((0, len(FEATURE_NAMES)), _F32),
                       np.zeros(0, _F32))
    fused = b.trace.fused
    x = features_of(top, fused)
    rel = learned_relevancy(model.score(x, fused[top]), b.trace.confidence, CONFIDENCE_FLOOR)
    overall = reblend(b, top, rel)
    again = top_k(overall, top.size)
    column[top] = rel
    keep = min(k, base.size)
    rows = np.concatenate([top[again], base[top.size:]])[:keep]
    m = min(keep, top.size)                           # the returned rows that were re-scored come first
    ranked = explain(c, cfg, b, rows, rel=np.concatenate([rel[again[:m]], b.relevancy[rows[m:]]]),
                     overall=np.concatenate([overall[again[:m]], b.overall[rows[m:]]]))
    return Learned(ranked=ranked, column=column, top=top, x=x, fused=fused[top])


def learned_ranking(c: Candidates, cfg: RankingConfig, model: RankerModel, k: int,
                    features_of: FeaturesOf) -> Learned:
    """The best k rows of `c` with the top N re-scored by `model` (module docstring), explained."""
    return learned_finish(c, cfg, model, k, learned_top(c, cfg, model, k), features_of)


def learned_order(c: Candidates, cfg: RankingConfig, model: RankerModel | None, k: int,
                  features_of: FeaturesOf) -> NDArray[np.intp]:
    """Rows of `c`, best first (at most k): today's ranking, its top N re-scored by `model`."""
    if model is None:
        return rank(c, cfg, k).rows
    return learned_ranking(c, cfg, model, k, features_of).ranked.rows


@dataclass(frozen=True, slots=True)
class RowSignals:
    """The store's FieldSignals of candidate rows `rows`: signals row i is candidate rows[i]
    (the entry ids asked of GetFieldSignals, in that order). Checked against each other: a
    store answer of the wrong shape (or positions naming no query term) is refused naming the
    field — when the answer arrives, so a caller can rank without it."""

    signals: FieldSignals
    rows: NDArray[np.intp]

    def __post_init__(self) -> None:
        s, n = self.signals, self.rows.shape[0]
        t = len(s.query_terms)
        if self.rows.ndim != 1:
            raise InvalidArgument("rows", f"expected a 1-d array of candidate rows, got shape {self.rows.shape}")
        expected = {"idf": (t,), "found": (n,), "title_tf": (n, t), "body_tf": (n, t), "title_length": (n,),
                    "body_length": (n,), "dense_title": (n,), "chunk_position": (n,)}
        for name, shape in expected.items():
            if np.shape(getattr(s, name)) != shape:
                raise InvalidArgument(f"field_signals.{name}", f"expected shape {shape} ({n} entries asked, "
                                      f"{t} query terms), got {np.shape(getattr(s, name))}")
        for name in ("title_positions", "body_positions"):
            pos = np.asarray(getattr(s, name))
            if pos.ndim != 2 or pos.shape[0] != n:
                raise InvalidArgument(f"field_signals.{name}", f"expected an ({n}, L) matrix, got {pos.shape}")
            if pos.size and (pos.min() < -1 or pos.max() >= t):
                raise InvalidArgument(f"field_signals.{name}", f"entries must be a query-term index in [0, {t}) "
                                      "or -1")
        if len(s.avg_length) != 3:
            raise InvalidArgument("field_signals.avg_length", f"expected (title, body, doc), got {s.avg_length!r}")

    def of(self, c: Candidates) -> NDArray[np.intp]:
        """(len(c),) the signals row of every candidate, −1 = none."""
        at = np.full(len(c), -1, dtype=np.intp)
        at[self.rows] = np.arange(self.rows.shape[0], dtype=np.intp)
        return at

    def found_among(self, c: Candidates, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        """Which of candidate `rows` the store found (asked and `found`)."""
        j = self.of(c)[rows]
        found = j >= 0
        found[found] = np.asarray(self.signals.found, dtype=bool)[j[found]]
        return found


def _avg(value: float) -> float:
    """An average field length as `FieldTerms` takes it (> 0): as the in-process index floors it."""
    value = float(value)
    return max(value, 1e-6) if np.isfinite(value) else 1e-6


def signal_inputs(c: Candidates, cfg: RankingConfig, rows: NDArray[np.intp], fused: NDArray[np.float32],
                  given: RowSignals) -> tuple[FeatureInputs, NDArray[np.bool_]]:
    """(the FeatureInputs of candidates `rows`, which of them the store found): each field's
    term frequencies and length from the signals (doc = title + body), the legs, the fused score
    (every row's) and the side factors as `served_features` computes them; a row without signals
    has NaN term frequencies, lengths, title cosine and chunk position, and no positions."""
    s, n = given.signals, rows.shape[0]
    found = given.found_among(c, rows)
    at = given.of(c)[rows][found]

    def pick(values, fill, dtype=_F32):
        values = np.asarray(values, dtype=dtype)
        out = np.full((n, *values.shape[1:]), fill, dtype=dtype)
        out[found] = values[at]
        return out

    title_tf, body_tf = pick(s.title_tf, np.nan), pick(s.body_tf, np.nan)
    title_len, body_len = pick(s.title_length, np.nan), pick(s.body_length, np.nan)
    avg_title, avg_body, avg_doc = (_avg(v) for v in s.avg_length)
    dense, bm25 = c.dense[rows], c.bm25[rows]
    inputs = FeatureInputs(
        idf=np.asarray(s.idf, dtype=_F32),
        title=FieldTerms(tf=title_tf, length=title_len, avg_length=avg_title),
        body=FieldTerms(tf=body_tf, length=body_len, avg_length=avg_body),
        doc=FieldTerms(tf=title_tf + body_tf, length=title_len + body_len, avg_length=avg_doc),
        body_positions=pick(s.body_positions, -1, np.int32), title_positions=pick(s.title_positions, -1, np.int32),
        dense_title=pick(s.dense_title, np.nan), dense=dense, bm25=bm25,
        dense_rank=c.dense_rank[rows], bm25_rank=c.bm25_rank[rows], fused=fused[rows].astype(_F32),
        chunk_position=pick(s.chunk_position, np.nan), **_side_factors(c, cfg, rows))
    return inputs, found


def _side_factors(c: Candidates, cfg: RankingConfig, rows: NDArray[np.intp]) -> dict[str, NDArray[np.float32]]:
    """The 4R side factors of `rows` as the features take them (recency neutral when not applied)."""
    rec = (recency(c.timestamp[rows], cfg.now_unix, cfg.half_life_days) if cfg.apply_recency
           else np.full(rows.shape[0], NEUTRAL_RECENCY, dtype=_F32))
    rep = reputation(c.reputation_prior[rows], c.helpful[rows], c.unhelpful[rows], cfg.default_reputation,
                     cfg.prior_strength)
    return {"richness": richness(c.richness[rows]), "recency": rec, "reputation": rep}


def served_features(c: Candidates, cfg: RankingConfig, query_terms: int, rows: NDArray[np.intp],
                    fused: NDArray[np.float32], signals: RowSignals | None = None) -> NDArray[np.float32]:
    """The features of candidates `rows` from what the stack serves (module docstring). With the
    store's `signals`: `features()` of `signal_inputs`, the per-field columns NaN for every row
    the store did not find (query_terms: the signals' terms). Without: the served columns filled,
    every per-field one NaN — what `features` gives with those fields unknown."""
    if signals is not None:
        inputs, found = signal_inputs(c, cfg, rows, fused, signals)
        x = features(inputs)
        x[np.ix_(~found, _MISSING)] = np.nan            # phrase hits of an unknown field would read 0
        return x
    n, t = rows.shape[0], max(int(query_terms), 0)
    x = np.full((n, len(FEATURE_NAMES)), np.nan, dtype=_F32)
    dense, bm25 = c.dense[rows], c.bm25[rows]
    dense_rank, dense_gap = leg_features(dense, c.dense_rank[rows], relative=False)
    bm25_rank, bm25_gap = leg_features(bm25, c.bm25_rank[rows], relative=True)
    side = _side_factors(c, cfg, rows)
    for name, column in (("dense_doc", dense), ("fused", fused[rows]), ("dense_rank", dense_rank),
                         ("bm25_rank", bm25_rank), ("dense_gap", dense_gap), ("bm25_gap", bm25_gap),
                         ("richness", side["richness"]), ("recency", side["recency"]),
                         ("reputation", side["reputation"]), ("dense_absent", np.isnan(dense)),
                         ("bm25_absent", np.isnan(bm25)), ("query_terms", np.log2(1.0 + t))):
        x[:, _AT[name]] = column
    return x
