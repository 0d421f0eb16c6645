"""Topics of a tenant: k-means clusters of its documents, labelled for each caller from the
documents that caller may see.

    snapshot   one SQLite read snapshot (no index lock held): every artifact's vector (the
               mean of its chunk vectors, L2-normalised), dates, title and analysed terms
               (the FTS5 rows, i.e. exactly our analyzer's terms, analysis.py)
    model      tenant-wide, per k: spherical k-means (faiss.Kmeans, seed 1234) over the
               artifact vectors; k given, or chosen by the best silhouette (cosine distance,
               on a fixed sample of at most SILHOUETTE_SAMPLE documents) over
               k in [2 .. min(MAX_AUTO_K, n - 1)]; a 2-D PCA basis (numpy SVD) for the map
    view       per caller (their visibility filters): only the documents the caller may see
               count — labels (c-TF-IDF of the visible members' terms), sizes, date spans,
               representative documents (closest to the centroid), evolution counts, map
               points. A hidden document's terms never reach a label.

Caching: the model is keyed by the tenant's write generation (entry count and the last
entry row id: every write adds rows with new ids or removes rows), so it holds until the
next write; views are cached per (generation, k, filters).

Non-blocking: a model is computed on a background thread (FAISS limited to one OpenMP
thread); a call waits at most `wait_s` for it, then answers {"status": "computing",
"progress": ...} and the next call picks the result up. The snapshot is read under the
tenant's read lock (shared with searches; a write waits for it, and it keeps the tenant from
being evicted meanwhile); the clustering, labelling and projection hold no lock.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import faiss
import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.analysis import STOPWORDS, analyse, words
from services.knowledge_store.storage.filter_sql import filter_clause
from services.knowledge_store.tenants import Tenant, Tenants
from shared.errors import InvalidArgument
from shared.records import SearchFilters

log = logging.getLogger(__name__)

SEED = 1234
MAX_K = 50
MAX_AUTO_K = 12
WEAK_SILHOUETTE = 0.35            # below: k from the rule of thumb sqrt(n / 2) instead
SILHOUETTE_SAMPLE = 1_000
KMEANS_ITERATIONS = 25
KMEANS_REDO = 3                    # best of 3 initialisations (k-means finds local optima)
PCA_SAMPLE = 5_000
DEFAULT_WAIT_S = 2.0
MAX_TERMS = 20
MAX_EXAMPLES = 20
MAX_POINTS = 20_000
MAX_LIST = 200
PERIODS = ("month", "quarter", "year")
DATE_FIELDS = ("created", "modified")
KINDS = ("topics", "evolution", "members", "map")
VIEW_CACHE = 64


# ---------------------------------------------------------------------------- arguments
def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= MAX_K:
        raise InvalidArgument("k", f"must be an integer from 0 (choose automatically) to {MAX_K}, got {k!r}")
    return k


def check_range(name: str, value: int, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgument(name, f"must be an integer from {low} to {high}, got {value!r}")
    return value


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidArgument(name, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


# ---------------------------------------------------------------------------- snapshot and model
@dataclass(frozen=True)
class Snapshot:
    """What one SQLite snapshot holds of a tenant, per artifact (same order everywhere)."""
    generation: tuple[int, int]
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


def generation(conn) -> tuple[int, int]:
    """Changes with every write of the tenant: rows are only ever added with new ids
    (AUTOINCREMENT, never reused) or removed."""
    count, = conn.execute("SELECT count(*) FROM entries").fetchone()
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'entries'").fetchone()
    return int(count), int(row[0]) if row else 0


def read_snapshot(conn, dimension: int, progress=None) -> Snapshot:
    """Every artifact's mean vector, dates, title and terms, from one read snapshot."""
    gen = generation(conn)
    meta = conn.execute("SELECT artifact_id, title, created_unix, modified_unix FROM artifacts "
                        "ORDER BY artifact_id").fetchall()
    ids = [r[0] for r in meta]
    where = {a: i for i, a in enumerate(ids)}
    n = len(ids)
    sums = np.zeros((n, dimension), np.float64)
    size = dimension * 4
    for artifact_id, blob in conn.execute(
            "SELECT e.artifact_id, v.vector FROM entries e JOIN entry_vectors v ON v.rid = e.rid"):
        i = where.get(artifact_id)
        if i is not None and isinstance(blob, bytes) and len(blob) == size:
            sums[i] += np.frombuffer(blob, np.float32)
    if progress:
        progress(0.2)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    vectors = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    keep = norms[:, 0] > 0                       # an artifact without a vector cannot be clustered
    terms = [Counter() for _ in range(n)]
    for artifact_id, title, body in conn.execute(
            "SELECT e.artifact_id, f.title, f.body FROM entries e JOIN entries_fts f ON f.rowid = e.rid"):
        i = where.get(artifact_id)
        if i is not None:
            terms[i].update(f"{title} {body}".split())
    vocab: dict[str, int] = {}
    if progress:
        progress(0.35)
    surface_counts: dict[str, Counter] = {}
    for _, title, _, _ in meta:
        kept = [w for w in words(title) if w not in STOPWORDS and len(w) <= 64]   # what `analyse` keeps
        stems = analyse(title)
        if len(stems) == len(kept):
            for word, s in zip(kept, stems):
                surface_counts.setdefault(s, Counter())[word] += 1
    surface = {s: c.most_common(1)[0][0] for s, c in surface_counts.items()}
    sel = np.flatnonzero(keep)
    ptr = np.zeros(len(sel) + 1, np.int64)
    ids_out: list[int] = []
    counts_out: list[int] = []
    for j, i in enumerate(sel):
        c = terms[i]
        ids_out.extend(vocab.setdefault(t, len(vocab)) for t in c)
        counts_out.extend(c.values())
        ptr[j + 1] = len(ids_out)
    return Snapshot(generation=gen, artifact_ids=[ids[i] for i in sel], titles=[meta[i][1] for i in sel],
                    created=np.array([meta[i][2] for i in sel], np.int64),
                    modified=np.array([meta[i][3] for i in sel], np.int64),
                    vectors=np.ascontiguousarray(vectors[sel]), vocabulary=list(vocab), term_ptr=ptr,
                    term_ids=np.array(ids_out, np.int64), term_counts=np.array(counts_out, np.float64),
                    surface=surface,
                    unlabelled=np.array([i for t, i in vocab.items() if len(t) < 2 or t.isdigit()], np.int64))


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


def _date(created: int, modified: int, date_field: str) -> int:
    if date_field == "modified":
        return modified or created
    return created or modified


def _iso(unix: int) -> str | None:
    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).date().isoformat() if unix > 0 else None


def period_key(unix: int, period: str) -> str:
    if unix <= 0:
        return "undated"
    d = dt.datetime.fromtimestamp(unix, dt.timezone.utc)
    if period == "year":
        return f"{d.year}"
    if period == "quarter":
        return f"{d.year}-Q{(d.month - 1) // 3 + 1}"
    return f"{d.year}-{d.month:02d}"


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


# ---------------------------------------------------------------------------- the service
@dataclass
class _Job:
    key: tuple
    progress: float = 0.0
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class TenantTopics:
    """The topic models of one tenant: cached per generation and k, computed in the background."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.models: dict[int, Model] = {}
        self.snapshot: Snapshot | None = None
        self.jobs: dict[int, _Job] = {}
        self.views: dict[tuple, View] = {}


class Topics:
    """Topic computations of one store (see the module docstring)."""

    def __init__(self, tenants: Tenants, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self._tenants = tenants
        self.wait_s = wait_s
        self._state: dict[str, TenantTopics] = {}
        self._registry = threading.Lock()

    @property
    def dimension(self) -> int:
        return self._tenants.settings.dimension

    def _tenant_state(self, tenant_id: str) -> TenantTopics:
        with self._registry:
            return self._state.setdefault(tenant_id, TenantTopics())

    async def view(self, tenant_id: str, filters: SearchFilters, k: int) -> View | dict[str, Any]:
        """The caller's view, or a status dict while the model is being computed."""
        check_k(k)
        tenant = await self._tenants.get(tenant_id)
        state = self._tenant_state(tenant_id)
        gen, visible = await asyncio.to_thread(self._visible, tenant, filters)
        with state.lock:
            model = state.models.get(k)
            if model is not None and model.snapshot.generation == gen:
                return self._cached_view(state, model, filters, visible)
            job = state.jobs.get(k)
            if job is None or job.done.is_set():
                job = _Job(key=(gen, k))
                state.jobs[k] = job
                threading.Thread(target=self._compute, args=(tenant, state, k, job), daemon=True,
                                 name=f"topics-{tenant_id}-{k}").start()
        deadline = time.monotonic() + self.wait_s
        while not job.done.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if job.error is not None:
            raise job.error
        with state.lock:
            model = state.models.get(k)
            if model is not None and job.done.is_set():
                return self._cached_view(state, model, filters, visible)
        return {"status": "computing", "progress": round(job.progress, 2),
                "message": f"topics of tenant '{tenant_id}' are being computed "
                           f"({time.monotonic() - job.started:.1f}s so far); ask again shortly"}

    def _cached_view(self, state: TenantTopics, model: Model, filters: SearchFilters,
                     visible: set[str] | None) -> View:
        key = (model.snapshot.generation, model.requested_k, filters)
        view = state.views.get(key)
        if view is None:
            view = make_view(model, visible)
            if len(state.views) >= VIEW_CACHE:
                state.views.clear()
            state.views[key] = view
        return view

    @staticmethod
    def _visible(tenant: Tenant, filters: SearchFilters) -> tuple[tuple[int, int], set[str] | None]:
        """The tenant's generation and the artifacts `filters` let through (None = all)."""
        with tenant.rw.read(), tenant.db.read("topics") as conn:
            gen = generation(conn)
            if filters.is_empty:
                return gen, None
            where, params = filter_clause(filters)
            rows = conn.execute("SELECT DISTINCT e.artifact_id FROM entries e JOIN artifacts a "
                                f"ON a.artifact_id = e.artifact_id WHERE {where}", params)
            return gen, {r[0] for r in rows}

    def _compute(self, tenant: Tenant, state: TenantTopics, k: int, job: _Job) -> None:
        def progress(p: float) -> None:
            job.progress = p
        try:
            # the snapshot under the tenant's read lock (a consistent view, and the tenant is not
            # evicted while it is read); the clustering after it holds no lock
            with tenant.rw.read(), tenant.db.read("topics") as conn:
                shared = state.snapshot          # another k of the same generation: same documents
                if shared is None or shared.generation != generation(conn):
                    shared = read_snapshot(conn, self._tenants.settings.dimension, progress)
            snapshot = shared
            model = build_model(snapshot, k, progress)
            with state.lock:
                state.snapshot = snapshot
                state.models = {kk: m for kk, m in state.models.items() if m.snapshot.generation == snapshot.generation}
                state.models[k] = model
                state.views = {key: v for key, v in state.views.items() if key[0] == snapshot.generation}
            log.info("topics of tenant %s: %d documents, k=%d (%s) in %.2fs", tenant.tenant_id,
                     len(snapshot.artifact_ids), model.k, model.criterion, model.seconds)
        except BaseException as err:             # reported to the caller waiting for it
            log.exception("computing topics of tenant %s failed", tenant.tenant_id)
            job.error = err
        finally:
            job.progress = 1.0
            job.done.set()


# ---------------------------------------------------------------------------- answers (JSON-ready)
def _doc(view: View, i: int, *, similarity: bool = True) -> dict[str, Any]:
    snap = view.model.snapshot
    out: dict[str, Any] = {"artifact_id": snap.artifact_ids[i], "title": snap.titles[i],
                           "created": _iso(int(snap.created[i])), "modified": _iso(int(snap.modified[i]))}
    if similarity:
        out["similarity"] = round(float(view.model.similarity[i]), 4)
    return out


def _header(view: View) -> dict[str, Any]:
    m = view.model
    return {"status": "ready", "k": m.k, "criterion": m.criterion, "documents": int(len(view.visible)),
            "computed_in_s": round(m.seconds, 3)}


def topics_answer(view: View, *, max_terms: int = 8, examples: int = 3) -> dict[str, Any]:
    snap = view.model.snapshot
    topics = []
    for t in sorted(view.labels):
        members = view.members(t)
        order = members[np.argsort(-view.model.similarity[members], kind="stable")]
        dates = [_date(int(snap.created[i]), int(snap.modified[i]), "created") for i in members]
        dated = [d for d in dates if d > 0]
        topics.append({
            "topic_id": t, "label": view.label(t), "size": int(len(members)),
            "terms": [{"term": snap.surface.get(term, term), "stem": term, "weight": round(w, 5)}
                      for term, w in view.labels[t][:max_terms]],
            "date_span": {"from": _iso(min(dated)) if dated else None, "to": _iso(max(dated)) if dated else None},
            "representative_documents": [_doc(view, int(i)) for i in order[:examples]],
        })
    topics.sort(key=lambda x: (-x["size"], x["topic_id"]))
    return {**_header(view), "topics": topics}


def nearest_topic(view: View, query_vector: NDArray[np.float32]) -> int:
    """The topic (among those the caller sees) whose centroid is closest to the query."""
    if not view.labels:
        raise InvalidArgument("query", "no topic is visible to the caller")
    ids = sorted(view.labels)
    sims = view.model.centroids[ids] @ query_vector.reshape(-1)
    return ids[int(np.argmax(sims))]


def _topic_arg(view: View, topic_id: int) -> int:
    if topic_id not in view.labels:
        raise InvalidArgument("topic_id", f"topic {topic_id} does not exist or has no document visible to the "
                                          f"caller; visible topics: {sorted(view.labels)}")
    return topic_id


def evolution_answer(view: View, *, period: str, date_field: str, topic_id: int | None = None,
                     query_vector: NDArray[np.float32] | None = None) -> dict[str, Any]:
    check_choice("period", period, PERIODS)
    check_choice("date_field", date_field, DATE_FIELDS)
    snap = view.model.snapshot
    chosen: list[int]
    how = "all topics"
    if query_vector is not None:
        chosen = [nearest_topic(view, query_vector)]
        how = "the query's topic (nearest centroid)"
    elif topic_id is not None and topic_id >= 0:
        chosen = [_topic_arg(view, topic_id)]
        how = f"topic {topic_id}"
    else:
        chosen = sorted(view.labels)
    periods: set[str] = set()
    rows = []
    for t in chosen:
        counts = Counter(period_key(_date(int(snap.created[i]), int(snap.modified[i]), date_field), period)
                         for i in view.members(t))
        periods |= set(counts)
        rows.append({"topic_id": t, "label": view.label(t), "total": int(sum(counts.values())),
                     "counts": dict(sorted(counts.items()))})
    return {**_header(view), "period": period, "date_field": date_field, "selection": how,
            "periods": sorted(periods), "topics": rows}


def members_answer(view: View, *, topic_id: int | None, query_vector: NDArray[np.float32] | None,
                   limit: int) -> dict[str, Any]:
    """The newest visible members of a topic (by id, or the query's nearest topic)."""
    snap = view.model.snapshot
    if query_vector is not None and (topic_id is None or topic_id < 0):
        t = nearest_topic(view, query_vector)
    elif topic_id is not None and topic_id >= 0:
        t = _topic_arg(view, topic_id)
    else:
        raise InvalidArgument("topic_id", "give a topic_id or a query")
    members = view.members(t)
    newest = sorted(members.tolist(), key=lambda i: (-max(int(snap.created[i]), int(snap.modified[i])),
                                                     snap.artifact_ids[i]))[:limit]
    return {**_header(view), "topic_id": t, "label": view.label(t),
            "terms": [snap.surface.get(term, term) for term, _ in view.labels[t][:8]],
            "documents": [_doc(view, i, similarity=False) for i in newest]}


def map_answer(view: View, *, max_points: int) -> dict[str, Any]:
    m = view.model
    snap = m.snapshot
    visible = view.visible
    if len(visible) > max_points:
        rng = np.random.default_rng(SEED)
        visible = np.sort(rng.choice(visible, max_points, replace=False))
    coords = (snap.vectors[visible] - m.pca_mean) @ m.pca_basis.T if len(visible) else np.zeros((0, 2))
    points = [{"artifact_id": snap.artifact_ids[i], "title": snap.titles[i], "x": round(float(x), 5),
               "y": round(float(y), 5), "topic_id": int(m.assign[i])}
              for i, (x, y) in zip(visible.tolist(), coords.tolist())]
    return {**_header(view), "projection": "PCA (2 components) of the tenant's document vectors",
            "topics": [{"topic_id": t, "label": view.label(t, 3)} for t in sorted(view.labels)],
            "points": points, "sampled": bool(len(visible) < len(view.visible))}


async def answer(topics: Topics, tenant_id: str, filters: SearchFilters, kind: str, *, k: int = 0,
                 max_terms: int = 8, examples: int = 3, period: str = "month", date_field: str = "created",
                 topic_id: int | None = None, query_vector: NDArray[np.float32] | None = None,
                 limit: int = 10, max_points: int = 2_000) -> dict[str, Any]:
    """One topic request of a caller (`filters` carry their visibility): kind "topics",
    "evolution", "members" (newest documents of a topic) or "map"."""
    check_choice("kind", kind, KINDS)
    check_range("max_terms", max_terms, 1, MAX_TERMS)
    check_range("examples", examples, 0, MAX_EXAMPLES)
    check_range("limit", limit, 1, MAX_LIST)
    check_range("max_points", max_points, 1, MAX_POINTS)
    if kind == "evolution":
        check_choice("period", period, PERIODS)
        check_choice("date_field", date_field, DATE_FIELDS)
    if topic_id is not None and not -1 <= topic_id <= MAX_K:
        raise InvalidArgument("topic_id", f"must be a topic id from 0 to {MAX_K} (-1 = none), got {topic_id}")
    if query_vector is not None:
        query_vector = np.asarray(query_vector, np.float32).reshape(-1)
        if query_vector.shape[0] != topics.dimension:
            raise InvalidArgument("query_vector", f"has {query_vector.shape[0]} dimensions, "
                                                  f"{topics.dimension} expected")
    view = await topics.view(tenant_id, filters, k)
    if isinstance(view, dict):
        return view
    if kind == "topics":
        return topics_answer(view, max_terms=max_terms, examples=examples)
    if kind == "evolution":
        return evolution_answer(view, period=period, date_field=date_field, topic_id=topic_id,
                                query_vector=query_vector)
    if kind == "members":
        return members_answer(view, topic_id=topic_id, query_vector=query_vector, limit=limit)
    return map_answer(view, max_points=max_points)


def dumps(answer: dict[str, Any]) -> str:
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False)
