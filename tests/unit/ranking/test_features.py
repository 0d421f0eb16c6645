"""Every learned-ranking feature against a naive per-candidate loop written from the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ranking.features import (B, FEATURE_NAMES, K1, MAX_POSITIONS, MONOTONE, FeatureInputs, FieldTerms,
                              features)
from shared.errors import InvalidArgument


def _random_inputs(rng: np.random.Generator, n: int, t: int, length: int) -> FeatureInputs:
    def field(unknown: float) -> FieldTerms:
        tf = rng.integers(0, 3, size=(n, t)).astype(np.float32) * (rng.random((n, t)) < 0.5)
        size = (tf.sum(axis=1) + rng.integers(1, 40, size=n)).astype(np.float32)
        gone = rng.random(n) < unknown
        tf[gone] = np.nan
        size[gone] = np.nan
        return FieldTerms(tf=tf, length=size, avg_length=float(rng.uniform(5, 40)))

    def positions(width: int) -> np.ndarray:
        return np.where(rng.random((n, width)) < 0.3, rng.integers(0, max(t, 1), size=(n, width)), -1).astype(np.int32)

    dense = rng.uniform(-1, 1, n).astype(np.float32)
    bm25 = rng.uniform(0, 20, n).astype(np.float32)
    dense[rng.random(n) < 0.2] = np.nan
    bm25[rng.random(n) < 0.2] = np.nan
    rank = lambda s: np.where(np.isnan(s), 0, rng.integers(1, 200, n)).astype(np.int32)  # noqa: E731
    return FeatureInputs(
        idf=rng.uniform(0.1, 8, t).astype(np.float32), title=field(0.2), body=field(0.1), doc=field(0.0),
        body_positions=positions(length), title_positions=positions(12),
        dense_title=np.where(rng.random(n) < 0.2, np.nan, rng.uniform(-1, 1, n)).astype(np.float32),
        dense=dense, bm25=bm25, dense_rank=rank(dense), bm25_rank=rank(bm25),
        fused=rng.random(n).astype(np.float32), chunk_position=rng.integers(0, 9, n).astype(np.float32),
        richness=rng.random(n).astype(np.float32), recency=rng.random(n).astype(np.float32),
        reputation=rng.random(n).astype(np.float32))


def _nan(x: float) -> float:
    return float("nan") if x != x else float(x)


def _naive_row(x: FeatureInputs, i: int) -> dict[str, float]:
    t = x.idf.shape[0]
    idf = [float(v) for v in x.idf]
    out: dict[str, float] = {}
    for name in ("title", "body", "doc"):
        f = getattr(x, name)
        tf = [float(v) for v in f.tf[i]]
        if any(v != v for v in tf):
            out[f"bm25_{name}"] = out[f"cover_{name}"] = out[f"idf_cover_{name}"] = float("nan")
            continue
        norm = K1 * (1 - B + B * float(f.length[i]) / f.avg_length)
        out[f"bm25_{name}"] = sum(idf[j] * tf[j] * (K1 + 1) / (tf[j] + norm) for j in range(t))
        out[f"cover_{name}"] = sum(1 for v in tf if v > 0) / t
        out[f"idf_cover_{name}"] = sum(idf[j] for j in range(t) if tf[j] > 0) / sum(idf)
    body = [int(v) for v in x.body_positions[i][:MAX_POSITIONS]]
    hits = [(p, v) for p, v in enumerate(body) if v >= 0]
    terms = {v for _, v in hits}
    best = math.inf
    for k, (p, _) in enumerate(hits):
        need = set(terms)
        for q, v in hits[k:]:
            need.discard(v)
            if not need:
                best = min(best, q - p + 1)
                break
    out["min_window"] = best / len(terms) if len(terms) >= 2 else float("nan")
    for name, seq in (("phrase_body", body), ("phrase_title", [int(v) for v in x.title_positions[i]])):
        pairs = sum(1 for a, b in zip(seq, seq[1:]) if a >= 0 and b == a + 1)
        out[name] = pairs / (t - 1) if t >= 2 else float("nan")
    out["dense_title"] = _nan(x.dense_title[i])
    out["dense_doc"] = _nan(x.dense[i])
    out["fused"] = float(x.fused[i])
    for leg, relative in (("dense", False), ("bm25", True)):
        score = float(getattr(x, leg)[i])
        scores = [float(v) for v in getattr(x, leg) if v == v]
        if score != score:
            out[f"{leg}_rank"] = out[f"{leg}_gap"] = float("nan")
            continue
        out[f"{leg}_rank"] = math.log2(1 + int(getattr(x, f"{leg}_rank")[i]))
        gap = max(scores) - score
        out[f"{leg}_gap"] = gap / max(scores) if relative else gap
    out["chunk_position"] = math.log2(1 + float(x.chunk_position[i]))
    out["length"] = math.log2(1 + float(x.body.length[i])) if x.body.length[i] == x.body.length[i] else float("nan")
    for name in ("richness", "recency", "reputation"):
        out[name] = float(getattr(x, name)[i])
    out["dense_absent"] = 1.0 if x.dense[i] != x.dense[i] else 0.0
    out["bm25_absent"] = 1.0 if x.bm25[i] != x.bm25[i] else 0.0
    out["query_terms"] = math.log2(1 + t)
    return out


@pytest.mark.parametrize("seed,t", [(0, 1), (1, 2), (2, 5), (3, 9)])
def test_every_feature_equals_a_naive_loop_on_random_inputs(seed: int, t: int) -> None:
    rng = np.random.default_rng(seed)
    x = _random_inputs(rng, n=40, t=t, length=60)
    got = features(x)
    assert got.shape == (40, len(FEATURE_NAMES)) and got.dtype == np.float32
    for i in range(40):
        want = _naive_row(x, i)
        assert set(want) == set(FEATURE_NAMES)
        for j, name in enumerate(FEATURE_NAMES):
            w, g = want[name], float(got[i, j])
            assert (w != w) == (g != g), f"row {i} {name}: NaN mismatch {g} vs {w}"
            if w == w:
                assert g == pytest.approx(w, rel=1e-4, abs=1e-4), f"row {i} {name}"


def test_monotone_constraints_name_a_direction_for_each_feature() -> None:
    assert len(MONOTONE) == len(FEATURE_NAMES)
    assert MONOTONE[FEATURE_NAMES.index("bm25_title")] == 1
    assert MONOTONE[FEATURE_NAMES.index("min_window")] == -1
    assert MONOTONE[FEATURE_NAMES.index("richness")] == 0
    # The whole table: every rising and falling feature by name, everything else free.
    rising = {f"{kind}_{field}" for field in ("title", "body", "doc") for kind in ("bm25", "cover", "idf_cover")}
    rising |= {"dense_title", "dense_doc", "phrase_body", "phrase_title", "fused"}
    falling = {"min_window", "dense_rank", "bm25_rank", "dense_gap", "bm25_gap"}
    table = dict(zip(FEATURE_NAMES, MONOTONE))
    assert {n for n, m in table.items() if m == 1} == rising
    assert {n for n, m in table.items() if m == -1} == falling


def test_inputs_of_the_wrong_shape_are_refused_naming_the_field() -> None:
    x = _random_inputs(np.random.default_rng(5), n=4, t=3, length=8)
    with pytest.raises(InvalidArgument, match="body_positions"):
        FeatureInputs(**{**{f: getattr(x, f) for f in x.__dataclass_fields__},
                         "body_positions": np.full((4, 8), 7, dtype=np.int32)})
