"""Topic models of a tenant's documents, on either backend (topics.py serves them): spherical
k-means over the artifact vectors of one snapshot, k given or chosen by the best silhouette, a 2-D PCA basis
for the map; and per caller a view of them — labels (c-TF-IDF of the visible members' terms)
from only the documents that caller may see. Pure numpy and FAISS: no storage, no lock.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import faiss
import numpy as np
from numpy.typing import NDArray

SEED = 1234
MAX_AUTO_K = 12
WEAK_SILHOUETTE = 0.35            # below: k from the rule of thumb sqrt(n / 2) instead
SILHOUETTE_SAMPLE = 1_000
KMEANS_ITERATIONS = 25
KMEANS_REDO = 3                    # best of 3 initialisations (k-means finds local optima)
PCA_SAMPLE = 5_000
MAX_TERMS = 20


# ---------------------------------------------------------------------------- snapshot and model
@dataclass(frozen=True)
class Snapshot:
    """What one read of a tenant holds, per artifact (artifact id order, the same everywhere)."""
    generation: object                    # the tenant's write generation (hashable)
    artifact_ids: list[str]
    titles: list[str]
    created: NDArray[np.int64]
    modified: NDArray[np.int64]
    vectors: NDArray[np.float32]          # (n, d), mean of chunk vectors, L2-normalised
    vocabulary: list[str]                 # analysed terms (title + body) of every artifact, as a
    term_ptr: NDArray[np.int64]           # CSR matrix: artifact i holds term_ids[ptr[i]:ptr[i+1]]
    term_ids: NDArray[np.int64]           # (each term once) with term_counts occurrences
    term_counts: NDArray[np.float64]
    surface: dict[str, str]               # stem -> the most frequent title word it came from
    unlabelled: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))   # term ids
    term_rank: NDArray[np.int64] | None = None   # alphabetical rank of each term (ties in labels)
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index.update({a: i for i, a in enumerate(self.artifact_ids)})
        if self.term_rank is None:
            rank = np.empty(len(self.vocabulary), np.int64)
            rank[np.argsort(np.array(self.vocabulary, dtype=object), kind="stable")] = np.arange(len(self.vocabulary))
            object.__setattr__(self, "term_rank", rank)


@dataclass(frozen=True)
class Model:
    """Tenant-wide clusters of one snapshot for one requested k (0 = automatic)."""
    snapshot: Snapshot
    requested_k: int
    k: int
    criterion: str
    centroids: NDArray[np.float32]        # (k, d), L2-normalised
    assign: NDArray[np.int64]             # (n,)
    similarity: NDArray[np.float32]       # (n,) cosine to own centroid
    pca_mean: NDArray[np.float32]         # (d,)
    pca_basis: NDArray[np.float32]        # (2, d)
    seconds: float


def _kmeans(vectors: NDArray[np.float32], k: int) -> tuple[NDArray[np.float32], NDArray[np.int64],
                                                              NDArray[np.float32]]:
    n, d = vectors.shape
    if k >= n:
        centroids = vectors.copy()
        return centroids, np.arange(n, dtype=np.int64), np.ones(n, np.float32)
    best: tuple[float, NDArray[np.float32]] | None = None
    for redo in range(KMEANS_REDO):      # k-means++ seeds, best objective of KMEANS_REDO runs
        km = faiss.Kmeans(d, k, niter=KMEANS_ITERATIONS, seed=SEED + redo, spherical=True, verbose=False,
                          min_points_per_centroid=1, max_points_per_centroid=1_024)
        km.train(vectors, init_centroids=_kmeans_pp(vectors, k, SEED + redo))
        objective = float(km.obj[-1]) if len(km.obj) else 0.0      # sum of similarities: higher is better
        if best is None or objective > best[0]:
            best = (objective, km.centroids.copy())
    centroids = best[1].astype(np.float32)
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    sims = vectors @ centroids.T
    assign = sims.argmax(axis=1).astype(np.int64)
    return centroids, assign, sims[np.arange(n), assign].astype(np.float32)


def _kmeans_pp(vectors: NDArray[np.float32], k: int, seed: int) -> NDArray[np.float32]:
    """k-means++ seeding (cosine distance) on a sample of at most 20,000 vectors."""
    rng = np.random.default_rng(seed)
    pool = vectors if len(vectors) <= 20_000 else vectors[rng.choice(len(vectors), 20_000, replace=False)]
    chosen = [int(rng.integers(len(pool)))]
    dist = np.maximum(1.0 - pool @ pool[chosen[0]], 0.0)
    for _ in range(1, k):
        total = float(dist.sum())
        nxt = int(rng.choice(len(pool), p=dist / total)) if total > 0 else int(rng.integers(len(pool)))
        chosen.append(nxt)
        dist = np.minimum(dist, np.maximum(1.0 - pool @ pool[nxt], 0.0))
    return np.ascontiguousarray(pool[chosen], dtype=np.float32)


def silhouette(vectors: NDArray[np.float32], assign: NDArray[np.int64], k: int) -> float:
    """Mean silhouette (cosine distance) of `vectors` under `assign`; singletons count 0."""
    m = len(vectors)
    dist = 1.0 - vectors @ vectors.T
    onehot = np.zeros((m, k), np.float32)
    onehot[np.arange(m), assign] = 1.0
    sums = dist @ onehot                        # (m, k): summed distance to each cluster
    counts = onehot.sum(axis=0)
    own = counts[assign]
    a = sums[np.arange(m), assign] / np.maximum(own - 1, 1)
    other = np.where(onehot > 0, np.inf, sums / np.maximum(counts, 1)[None, :])
    other[:, counts == 0] = np.inf
    b = other.min(axis=1)
    s = np.where((own > 1) & np.isfinite(b), (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(s.mean())


def build_model(snapshot: Snapshot, requested_k: int, progress=None) -> Model:
    started = time.perf_counter()
    faiss.omp_set_num_threads(1)                # leave the other cores to searches
    vectors = snapshot.vectors
    n = len(vectors)
    d = vectors.shape[1] if n else 0
    if n == 0:
        empty = np.zeros((0, d), np.float32)
        return Model(snapshot, requested_k, 0, "no documents", empty, np.zeros(0, np.int64),
                     np.zeros(0, np.float32), np.zeros(d, np.float32), np.zeros((2, d), np.float32), 0.0)
    if requested_k:
        k = min(requested_k, n)
        criterion = f"k={requested_k} as requested" + (f" (capped at {n} documents)" if k < requested_k else "")
        centroids, assign, sim = _kmeans(vectors, k)
    elif n <= 3:
        k, criterion = n, f"one topic per document ({n} documents)"
        centroids, assign, sim = _kmeans(vectors, k)
    else:
        rng = np.random.default_rng(SEED)
        sample = np.sort(rng.choice(n, size=min(n, SILHOUETTE_SAMPLE), replace=False))
        candidates = list(range(2, min(MAX_AUTO_K, n - 1) + 1))
        runs = {}
        for j, kk in enumerate(candidates):
            c, a, sims = _kmeans(vectors, kk)
            runs[kk] = (silhouette(vectors[sample], a[sample], kk), c, a, sims)
            if progress:
                progress(0.35 + 0.55 * (j + 1) / len(candidates))
        best_k = max(candidates, key=lambda kk: (runs[kk][0], -kk))
        score = runs[best_k][0]
        span = f"k={candidates[0]}..{candidates[-1]}"
        if score >= WEAK_SILHOUETTE:
            k = best_k
            criterion = f"best silhouette (cosine, sample of {len(sample)}) over {span}: k={k}, silhouette {score:.3f}"
        else:                # no clear cluster structure: the rule of thumb sqrt(n / 2), within the span
            k = min(max(int(round(math.sqrt(n / 2))), candidates[0]), candidates[-1])
            criterion = (f"best silhouette over {span} only {score:.3f} (k={best_k}, below {WEAK_SILHOUETTE}: no "
                         f"clear structure), so k = sqrt(n/2) within the span = {k}")
        _, centroids, assign, sim = runs[k]
    rng = np.random.default_rng(SEED)
    pca_rows = vectors if n <= PCA_SAMPLE else vectors[np.sort(rng.choice(n, PCA_SAMPLE, replace=False))]
    mean = pca_rows.mean(axis=0)
    basis = np.zeros((2, d), np.float32)
    if len(pca_rows) > 1:
        # the principal axes are the right singular vectors of the centred rows, i.e. the
        # singular vectors of their d × d scatter matrix: SVD of that small matrix, not of n × d
        centred = pca_rows - mean
        u, _, _ = np.linalg.svd(centred.T @ centred)
        basis[:] = u[:, :2].T
    return Model(snapshot, requested_k, int(k), criterion, centroids, assign, sim, mean.astype(np.float32),
                 basis, time.perf_counter() - started)


# ---------------------------------------------------------------------------- per-caller views
def c_tf_idf(tf: NDArray[np.float64], top: int,
             tie_rank: NDArray[np.int64] | None = None) -> list[list[tuple[int, float]]]:
    """Most distinctive terms per class (c-TF-IDF) of a (classes × terms) count matrix:
    tf(t, c) / |c| · log(1 + A / f(t)), where |c| = terms in class c, A = the average number of
    terms per class and f(t) = occurrences of t over all classes. (term id, weight), best first.
    Equal weights: lower `tie_rank` (e.g. the term's alphabetical rank) first, else lower id."""
    if tf.size == 0:
        return [[] for _ in range(tf.shape[0])]
    sizes = tf.sum(axis=1)
    avg = float(sizes.mean())
    freq = tf.sum(axis=0)
    idf = np.log1p(avg / np.where(freq > 0, freq, 1.0))
    w = tf / np.maximum(sizes, 1.0)[:, None] * idf[None, :]
    out = []
    for row in w:
        nz = np.flatnonzero(row > 0)
        rank = nz if tie_rank is None else tie_rank[nz]
        best = nz[np.lexsort((rank, -row[nz]))][:top]
        out.append([(int(t), float(row[t])) for t in best])
    return out


@dataclass(frozen=True)
class View:
    """One caller's topics: tenant-wide clusters restricted to the documents they may see."""
    model: Model
    visible: NDArray[np.int64]                  # snapshot positions the caller may see
    labels: dict[int, list[tuple[str, float]]]  # topic id -> (term, weight), visible members only

    def members(self, topic: int) -> NDArray[np.int64]:
        return self.visible[self.model.assign[self.visible] == topic]

    def label(self, topic: int, n: int = 5) -> str:
        surface = self.model.snapshot.surface
        return ", ".join(surface.get(t, t) for t, _ in self.labels.get(topic, [])[:n])


def make_view(model: Model, visible_ids: set[str] | None) -> View:
    snap = model.snapshot
    if visible_ids is None:
        visible = np.arange(len(snap.artifact_ids), dtype=np.int64)
    else:
        visible = np.array(sorted(snap.index[a] for a in visible_ids if a in snap.index), np.int64)
    topics = sorted({int(t) for t in model.assign[visible]}) if len(visible) else []
    if not topics:
        return View(model, visible, {})
    # the visible members' term counts per topic: one bincount over their CSR rows
    position = np.full(max(topics) + 1, -1, np.int64)
    position[topics] = np.arange(len(topics))
    lengths = snap.term_ptr[visible + 1] - snap.term_ptr[visible]
    total = int(lengths.sum())
    starts = np.repeat(snap.term_ptr[visible] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    rows = starts + np.arange(total)
    n_terms = len(snap.vocabulary)
    key = np.repeat(position[model.assign[visible]], lengths) * n_terms + snap.term_ids[rows]
    shape = (len(topics), n_terms)
    tf = np.bincount(key, weights=snap.term_counts[rows], minlength=shape[0] * shape[1]).reshape(shape)
    df = np.bincount(key, minlength=shape[0] * shape[1]).reshape(shape)
    sizes = np.bincount(position[model.assign[visible]], minlength=len(topics))
    tf[(sizes[:, None] >= 3) & (df < 2)] = 0.0      # a label term must occur in at least two members
    tf[:, snap.unlabelled] = 0.0                     # numbers and single characters label nothing
    labels = {t: [(snap.vocabulary[term], w) for term, w in ranked]
              for t, ranked in zip(topics, c_tf_idf(tf, MAX_TERMS, snap.term_rank))}
    return View(model, visible, labels)
