"""The features served from the store's FieldSignals (ranking/learned.py `served_features` with
`RowSignals`): equal to `features()` of the equivalent FeatureInputs, to a naive per-candidate
loop written from FieldSignals' docstring, and NaN per field for every row without signals."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ranking import Candidates, RankingConfig, rank
from ranking.rank import NEUTRAL_RECENCY, recency, reputation, richness
from ranking.features import B, FEATURE_NAMES, K1, FeatureInputs, FieldTerms, features
from ranking.learned import (SERVED_MISSING, RowSignals, fused_scores, learned_finish, learned_ranking,
                             learned_top, served_features)
from shared.errors import InvalidArgument
from shared.records import FieldSignals
from tests.unit.ranking.strategies import random_candidates
from tests.unit.ranking.test_learned import _model

NAMES = list(FEATURE_NAMES)
PER_FIELD = [NAMES.index(n) for n in SERVED_MISSING]
SERVED = [j for j in range(len(NAMES)) if j not in PER_FIELD]


def _signals(rng: np.random.Generator, n: int, t: int, *, found: float = 0.8) -> FieldSignals:
    """FieldSignals of n entries as the store would send them: a row not found is NaN, positions −1."""
    title_tf = (rng.integers(0, 3, (n, t)) * (rng.random((n, t)) < 0.4)).astype(np.float32)
    body_tf = (rng.integers(0, 4, (n, t)) * (rng.random((n, t)) < 0.5)).astype(np.float32)
    title_len = title_tf.sum(axis=1) + rng.integers(0, 8, n).astype(np.float32)
    body_len = body_tf.sum(axis=1) + rng.integers(1, 60, n).astype(np.float32)

    def positions(width: int) -> np.ndarray:
        return np.where(rng.random((n, width)) < 0.35, rng.integers(0, max(t, 1), (n, width)), -1).astype(np.int32)

    title_pos, body_pos = positions(10), positions(50)
    dense_title = np.where(rng.random(n) < 0.2, np.nan, rng.uniform(-1, 1, n)).astype(np.float32)
    chunk = rng.integers(0, 7, n).astype(np.float32)
    ok = rng.random(n) < found
    for a in (title_tf, body_tf, title_len, body_len, dense_title, chunk):
        a[~ok] = np.nan
    title_pos[~ok] = body_pos[~ok] = -1
    return FieldSignals(query_terms=tuple(f"term{i}" for i in range(t)),
                        idf=rng.uniform(0.2, 7, t).astype(np.float32),
                        avg_length=(float(rng.uniform(2, 9)), float(rng.uniform(20, 50)), float(rng.uniform(25, 60))),
                        found=ok, title_tf=title_tf, body_tf=body_tf, title_length=title_len, body_length=body_len,
                        title_positions=title_pos, body_positions=body_pos, dense_title=dense_title,
                        chunk_position=chunk)


def _case(seed: int, n: int = 60, t: int = 4):
    """Candidates, a config, the rows asked of the store (a federated share is not asked) and
    their signals, in a shuffled order."""
    rng = np.random.default_rng(seed)
    c = random_candidates(seed, n)
    cfg = RankingConfig(fusion="convex", weights=(0.6, 0.1, 0.2, 0.1), apply_recency=seed % 2 == 0,
                        now_unix=1_750_000_000.0)
    asked = rng.permutation(n)[: int(n * 0.75)].astype(np.intp)          # the rest: federated hits
    return c, cfg, RowSignals(_signals(rng, asked.size, t), asked)


def _equivalent_inputs(c: Candidates, cfg: RankingConfig, rows: np.ndarray, fused: np.ndarray,
                       given: RowSignals) -> tuple[FeatureInputs, np.ndarray]:
    """The FeatureInputs of `rows` built one candidate at a time (a row without signals: NaN fields)."""
    s, n, t = given.signals, rows.size, len(given.signals.query_terms)
    where = {int(r): i for i, r in enumerate(given.rows)}
    tt, bt = np.full((n, t), np.nan, np.float32), np.full((n, t), np.nan, np.float32)
    tl, bl, dt, cp = (np.full(n, np.nan, np.float32) for _ in range(4))
    tp = np.full((n, s.title_positions.shape[1]), -1, np.int32)
    bp = np.full((n, s.body_positions.shape[1]), -1, np.int32)
    found = np.zeros(n, bool)
    for k, r in enumerate(rows.tolist()):
        i = where.get(r)
        if i is None or not s.found[i]:
            continue
        found[k] = True
        tt[k], bt[k], tl[k], bl[k] = s.title_tf[i], s.body_tf[i], s.title_length[i], s.body_length[i]
        tp[k], bp[k], dt[k], cp[k] = s.title_positions[i], s.body_positions[i], s.dense_title[i], s.chunk_position[i]
    recency_ = (recency(c.timestamp[rows], cfg.now_unix, cfg.half_life_days) if cfg.apply_recency
                else np.full(n, NEUTRAL_RECENCY, np.float32))
    return FeatureInputs(
        idf=s.idf, title=FieldTerms(tt, tl, s.avg_length[0]), body=FieldTerms(bt, bl, s.avg_length[1]),
        doc=FieldTerms(tt + bt, tl + bl, s.avg_length[2]), body_positions=bp, title_positions=tp,
        dense_title=dt, dense=c.dense[rows], bm25=c.bm25[rows], dense_rank=c.dense_rank[rows],
        bm25_rank=c.bm25_rank[rows], fused=fused[rows], chunk_position=cp, richness=richness(c.richness[rows]),
        recency=recency_, reputation=reputation(c.reputation_prior[rows], c.helpful[rows], c.unhelpful[rows],
                                                cfg.default_reputation, cfg.prior_strength)), found


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert (np.isnan(a) == np.isnan(b)).all()
    np.testing.assert_allclose(np.nan_to_num(a), np.nan_to_num(b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seed,t", [(0, 1), (1, 2), (2, 4), (3, 7)])
def test_served_features_equal_features_of_the_equivalent_inputs_and_rows_without_signals_stay_nan(seed, t):
    c, cfg, given = _case(seed, t=t)
    fused = fused_scores(c, cfg)
    rows = np.random.default_rng(seed).permutation(len(c))[:40].astype(np.intp)
    got = served_features(c, cfg, t, rows, fused, given)
    inputs, found = _equivalent_inputs(c, cfg, rows, fused, given)
    want = features(inputs)
    assert 0 < found.sum() < rows.size                                   # both kinds present
    _same(got[found], want[found])
    assert np.isnan(got[np.ix_(~found, PER_FIELD)]).all()                 # federated / not found: all NaN
    _same(got[:, SERVED], served_features(c, cfg, t, rows, fused)[:, SERVED])   # the rest as without signals
    assert np.isfinite(got[np.ix_(found, [NAMES.index("bm25_doc"), NAMES.index("cover_body")])]).all()


@pytest.mark.parametrize("seed", range(3))
def test_a_few_served_features_equal_a_naive_loop_over_the_signals(seed):
    c, cfg, given = _case(seed, t=3)
    s = given.signals
    rows = np.arange(len(c), dtype=np.intp)
    got = served_features(c, cfg, 3, rows, fused_scores(c, cfg), given)
    at = {int(r): i for i, r in enumerate(given.rows)}
    idf = [float(v) for v in s.idf]
    checked = 0
    for r in rows.tolist():
        i = at.get(r)
        row = {name: float(got[r, NAMES.index(name)]) for name in
               ("bm25_doc", "cover_title", "dense_title", "phrase_body", "chunk_position", "length")}
        if i is None or not s.found[i]:
            assert all(math.isnan(v) for v in row.values()), f"row {r} has no signals: {row}"
            continue
        checked += 1
        tf = [float(a) + float(b) for a, b in zip(s.title_tf[i], s.body_tf[i])]
        length = float(s.title_length[i]) + float(s.body_length[i])
        norm = K1 * (1 - B + B * length / s.avg_length[2])
        assert row["bm25_doc"] == pytest.approx(sum(w * f * (K1 + 1) / (f + norm) for w, f in zip(idf, tf)), rel=1e-5)
        assert row["cover_title"] == pytest.approx(sum(1 for v in s.title_tf[i] if v > 0) / 3)
        assert (row["dense_title"] == pytest.approx(float(s.dense_title[i]))
                if not math.isnan(s.dense_title[i]) else math.isnan(row["dense_title"]))
        body = [int(v) for v in s.body_positions[i]]
        assert row["phrase_body"] == pytest.approx(sum(1 for a, b in zip(body, body[1:]) if a >= 0 and b == a + 1) / 2)
        assert row["chunk_position"] == pytest.approx(math.log2(1 + float(s.chunk_position[i])))
        assert row["length"] == pytest.approx(math.log2(1 + float(s.body_length[i])))
    assert checked > 10


def test_a_field_length_average_of_zero_is_floored_as_the_in_process_index_does():
    c, cfg, given = _case(4, t=2)
    s = given.signals
    flat = RowSignals(FieldSignals(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                                      "avg_length": (0.0, s.avg_length[1], s.avg_length[2])}), given.rows)
    rows = given.rows[np.asarray(s.found)][:5]
    x = served_features(c, cfg, 2, rows, fused_scores(c, cfg), flat)
    assert np.isfinite(x[:, NAMES.index("bm25_title")]).all()


@pytest.mark.parametrize("field,value", [
    ("title_tf", np.zeros((3, 2), np.float32)),          # 3 rows for 45 asked
    ("idf", np.zeros(5, np.float32)),                     # 5 idf for 4 query terms
    ("body_positions", np.zeros(45, np.int32)),           # not a matrix
    ("avg_length", (1.0, 2.0)),
])
def test_signals_of_the_wrong_shape_are_refused_naming_the_field(field, value):
    _, _, given = _case(5, t=4)
    s = given.signals
    with pytest.raises(InvalidArgument, match=f"field_signals.{field}"):
        RowSignals(FieldSignals(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, field: value}), given.rows)


def test_positions_naming_no_query_term_are_refused_when_the_answer_arrives():
    _, _, given = _case(6, t=2)
    s = given.signals
    with pytest.raises(InvalidArgument, match="field_signals.body_positions"):
        RowSignals(FieldSignals(**{**{f: getattr(s, f) for f in s.__dataclass_fields__},
                                   "body_positions": np.full_like(s.body_positions, 5)}), given.rows)


def test_the_ranking_split_where_the_signals_are_awaited_is_the_one_pass_ranking():
    c, cfg, given = _case(7, t=3)
    model = _model([0.0] * NAMES.index("bm25_doc") + [3.0], top_n=12)     # a residual on the doc's BM25
    first = learned_top(c, cfg, model, 10)
    assert first.top.tolist() == rank(c, cfg, 12).rows.tolist()         # today's top N: the rows to fetch
    features_of = lambda rows, fused: served_features(c, cfg, 3, rows, fused, given)  # noqa: E731
    split = learned_finish(c, cfg, model, 10, first, features_of)
    whole = learned_ranking(c, cfg, model, 10, features_of)
    assert split.ranked.rows.tolist() == whole.ranked.rows.tolist()
    np.testing.assert_array_equal(split.ranked.overall, whole.ranked.overall)
    without = learned_ranking(c, cfg, model, 10, lambda rows, fused: served_features(c, cfg, 3, rows, fused))
    assert split.ranked.rows.tolist() != without.ranked.rows.tolist()   # the signals moved the order
