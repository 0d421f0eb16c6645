"""The scale benchmark's vector generators (benchmarks/scale_data.py): the span perturbation follows
the spectrum of the real vectors it is fitted on (principal directions, per-direction variance,
energy) and is deterministic for a seed; the isotropic one spreads the same energy over every
dimension. Small stand-in "real" vectors with a known decaying spectrum, no cached data."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.scale_data import DIM, NOISE, SpanBasis, synthetic_vectors


def real_like(n: int = 3_000, rank: int = 48, seed: int = 0) -> np.ndarray:
    """Unit vectors in DIM dimensions varying along `rank` directions with decaying variance."""
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((DIM, rank)))
    coords = rng.standard_normal((n, rank)) * (0.9 ** np.arange(rank))
    x = (coords @ basis.T + 0.4 * basis[:, 0]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def spectrum(x: np.ndarray) -> np.ndarray:
    """Variance along each principal direction, largest first."""
    s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    return s ** 2 / (len(x) - 1)


def participation_ratio(x: np.ndarray) -> float:
    v = spectrum(x)
    return float(v.sum() ** 2 / (v ** 2).sum())


def test_span_noise_lies_in_the_real_principal_directions_with_their_variance_and_the_set_energy():
    real = real_like()
    basis = SpanBasis(real, components=16, energy=0.25)
    noise = basis.noise(np.random.default_rng(1), 20_000)
    assert noise.shape == (20_000, DIM)
    # energy: E|e|² as set
    assert np.mean((noise ** 2).sum(axis=1)) == pytest.approx(0.25, rel=0.03)
    # inside the span of the top 16 principal directions of the real vectors, nothing outside
    _, _, vt = np.linalg.svd(real - real.mean(axis=0), full_matrices=False)
    top = vt[:16]
    outside = noise - (noise @ top.T) @ top
    assert np.abs(outside).max() < 1e-4
    # per direction: the real vectors' variance there, scaled by one common factor
    real_var = spectrum(real)[:16]
    noise_var = spectrum(noise)[:16]
    np.testing.assert_allclose(noise_var / noise_var.sum(), real_var / real_var.sum(), rtol=0.12)


def test_span_noise_is_deterministic_for_a_seed():
    basis = SpanBasis(real_like(), components=32)
    a = basis.noise(np.random.default_rng(15), 100)
    assert np.array_equal(a, basis.noise(np.random.default_rng(15), 100))
    assert not np.allclose(a, basis.noise(np.random.default_rng(16), 100))
    again = SpanBasis(real_like(), components=32)
    assert np.array_equal(again.directions, basis.directions) and np.array_equal(again.scales, basis.scales)


def test_the_components_must_fit_the_real_vectors():
    with pytest.raises(ValueError, match="components must be between 1 and"):
        SpanBasis(real_like(n=200), components=0)
    with pytest.raises(ValueError, match="components must be between 1 and"):
        SpanBasis(real_like(n=200), components=DIM + 1)


def test_synthetic_chunks_keep_the_real_spectrum_with_span_and_not_with_isotropic_noise():
    real = real_like()
    corpus = SimpleNamespace(vectors=real)
    docs = np.random.default_rng(3).integers(0, len(real), 6_000)
    start = len(real)                         # past the real rows: every vector is synthetic
    span = synthetic_vectors(corpus, np.random.default_rng(15), docs, start, SpanBasis(real))
    iso = synthetic_vectors(corpus, np.random.default_rng(15), docs, start)
    for x in (span, iso):
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    # same perturbation energy either way: each chunk stays as close to its document's vector
    base = real[docs]                         # the document vector each chunk is built around
    cos_span = np.median((span * base).sum(axis=1))
    cos_iso = np.median((iso * base).sum(axis=1))
    assert abs(cos_span - cos_iso) < 0.05
    # the spectrum: span keeps the real vectors' few directions, isotropic adds all DIM of them
    pr_real, pr_span, pr_iso = participation_ratio(real), participation_ratio(span), participation_ratio(iso)
    assert pr_span < 1.5 * pr_real < pr_iso, (pr_real, pr_span, pr_iso)
    assert np.array_equal(span, synthetic_vectors(corpus, np.random.default_rng(15), docs, start,
                                                  SpanBasis(real)))
    # the first rows of a tenant are the real vectors themselves
    head = synthetic_vectors(corpus, np.random.default_rng(15), np.arange(5), 0, SpanBasis(real))
    np.testing.assert_allclose(head, real[:5], atol=1e-6)
    assert NOISE ** 2 * DIM == pytest.approx(float((SpanBasis(real).scales ** 2).sum()), rel=1e-5)
