"""The sentence-level dense signals of the learned-ranking experiment (lab/sentence_signals.py)
equal a per-candidate loop, and a model trains over the wider feature set without touching the
production feature definition."""
from __future__ import annotations

import numpy as np
import pytest

from lab.sentence_signals import SIGNAL_MONOTONE, SIGNAL_NAMES, SentenceIndex, corpus_sentences, naive_signals
from ranking.features import FEATURE_NAMES, FEATURE_VERSION, MONOTONE
from ranking.trees import load_model
from shared.errors import InvalidArgument


def _unit(rng, n: int, d: int = 16) -> np.ndarray:
    v = rng.normal(size=(n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("seed", range(5))
def test_signals_equal_the_per_candidate_loop_on_random_inputs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 7, size=40)
    counts[:3] = (0, 1, 2)                                   # no sentence, one, two
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.intp)
    vectors = _unit(rng, int(offsets[-1]))
    if seed == 0:
        vectors[offsets[5]:offsets[6]] = vectors[offsets[5]]     # ties: the first best sentence counts
    index = SentenceIndex(vectors, offsets)
    q = _unit(rng, 1)[0]
    rows = rng.permutation(40)[:25].astype(np.intp)
    rows[:3] = (0, 1, 2)
    dense = rng.uniform(-1, 1, size=rows.size).astype(np.float32)
    got = index.signals(q, rows, dense)
    want = naive_signals(vectors, offsets, q, rows, dense)
    assert got.shape == (rows.size, len(SIGNAL_NAMES))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)      # NaN where the loop has NaN
    assert np.isnan(got[0]).all()                                    # no sentence: every signal missing
    assert np.isnan(got[1, 1]) and got[1, 2] == got[1, 0]            # one sentence: no second
    # the best sentence over every document, as max_all serves the dense leg
    fallback = np.full(40, -2.0, dtype=np.float32)
    best = index.max_all(q, fallback)
    for r in range(40):
        cos = vectors[offsets[r]:offsets[r + 1]] @ q
        assert best[r] == pytest.approx(cos.max() if cos.size else -2.0, abs=1e-6)


def test_an_index_refuses_vectors_that_do_not_match_the_sentences() -> None:
    with pytest.raises(ValueError, match="3 sentence vectors for 4 sentences"):
        SentenceIndex(np.zeros((3, 4), np.float32), np.asarray([0, 2, 4], dtype=np.intp))


def test_corpus_sentences_uses_the_splitters_sentences_and_offsets() -> None:
    sentences, offsets = corpus_sentences(["One fact. Two facts here.", "", "Alone"])
    assert sentences == ["One fact.", "Two facts here.", "Alone"]
    assert offsets.tolist() == [0, 2, 2, 3]


def test_a_model_over_the_wider_feature_set_trains_and_production_refuses_it() -> None:
    pytest.importorskip("lightgbm")
    from services.rag_pipeline.learning.train import PRODUCTION, FeatureSet, TrainRows, fit

    wide = FeatureSet(FEATURE_NAMES + SIGNAL_NAMES, MONOTONE + SIGNAL_MONOTONE, FEATURE_VERSION)
    rng = np.random.default_rng(3)
    parts = []
    for _ in range(30):
        x = rng.normal(size=(30, len(wide.names))).astype(np.float32)
        fused = rng.random(30).astype(np.float32)
        labels = ((x[:, -5] + rng.normal(scale=0.3, size=30)) > 1.0).astype(np.int32)   # sent_max decides
        parts.append((x, fused, labels))
    raw, model, rounds = fit("trees", TrainRows.concat(parts), 30, rounds=40, feature_set=wide)
    assert rounds == 40
    x = np.zeros((2, len(wide.names)), dtype=np.float32)
    x[1, -5] = 2.0
    assert model.score(x, np.zeros(2))[1] > model.score(x, np.zeros(2))[0]   # learned from the new column
    with pytest.raises(InvalidArgument, match="feature_names differ"):
        load_model(raw, PRODUCTION.names, PRODUCTION.version)
    with pytest.raises(ValueError, match="monotone"):
        FeatureSet(FEATURE_NAMES, MONOTONE[:-1], FEATURE_VERSION)
