"""Topics of a tenant, on either backend: k-means clusters of its documents, labelled for each
caller from the documents that caller may see.

    snapshot   one read of the tenant (the backend's `TopicSource.read`): every artifact's
               vector (the mean of its chunk vectors, L2-normalised), dates, title and
               analysed terms (title and body, exactly our analyser's terms, shared/analysis.py),
               in artifact id order; `snapshot_of` builds it from per-artifact sums and counts
    model      tenant-wide, per k: spherical k-means (faiss.Kmeans, seed 1234) over the
               artifact vectors; k given, or chosen by the best silhouette (cosine distance,
               on a fixed sample of at most SILHOUETTE_SAMPLE documents) over
               k in [2 .. min(MAX_AUTO_K, n - 1)]; a 2-D PCA basis (numpy SVD) for the map
    view       per caller (their visibility filters): only the documents the caller may see
               count — labels (c-TF-IDF of the visible members' terms), sizes, date spans,
               representative documents (closest to the centroid), evolution counts, map
               points. A hidden document's terms never reach a label.

Caching: the model is keyed by the tenant's write generation (the backend's: embedded, the
entry count and last entry row id; qdrant, a token on the tenant's statistics point that every
write replaces), so it holds until the next write; views are cached per (generation, k, filters).

Non-blocking: a model is computed on a background thread (FAISS limited to one OpenMP
thread); a call waits at most `wait_s` for it, then answers {"status": "computing",
"progress": ...} and the next call picks the result up. The clustering, labelling and
projection hold no lock (the backend's read may: embedded/topics.py).

This module serves them (the background jobs, the caches, the dispatch of a request); the model
and the views are topic_model.py's, the answers and the checks of a request's arguments
topic_answers.py's, the reads the backends' (embedded/topics.py, qdrant/topics.py).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.topic_answers import (
    DATE_FIELDS,
    MAX_K,
    PERIODS,
    check_choice,
    check_k,
    check_range,
    evolution_answer,
    map_answer,
    members_answer,
    period_key,
    topics_answer,
)
from services.knowledge_store.topic_model import (
    MAX_TERMS,
    Model,
    Snapshot,
    View,
    build_model,
    make_view,
    silhouette,
)
from shared.analysis import STOPWORDS, analyse, words
from shared.errors import InvalidArgument
from shared.records import SearchFilters

log = logging.getLogger(__name__)

DEFAULT_WAIT_S = 2.0
MAX_EXAMPLES = 20
MAX_POINTS = 20_000
MAX_LIST = 200
KINDS = ("topics", "evolution", "members", "map")
VIEW_CACHE = 64

Progress = Callable[[float], None]


class TopicSource(Protocol):
    """What a backend gives the topic service: its tenants' generations, visibility and reads."""

    async def visible(self, tenant_id: str, filters: SearchFilters) -> tuple[Hashable, set[str] | None, Any]:
        """(the tenant's write generation, the artifacts `filters` let through (None: all), a
        handle `read` takes); NotFound for a tenant without data."""
        ...

    def read(self, handle: Any, shared: Snapshot | None, progress: Progress) -> Snapshot:
        """On the compute thread: the tenant's snapshot (`shared` itself while it is still of
        the tenant's generation)."""
        ...


# ---------------------------------------------------------------------------- the snapshot
def snapshot_of(generation: Hashable, artifact_ids: Sequence[str], titles: Sequence[str],
                created: Sequence[int], modified: Sequence[int], sums: NDArray[np.float64],
                terms: Sequence[Counter]) -> Snapshot:
    """The snapshot of per-artifact rows (artifact id order): `sums` the sum of each artifact's
    chunk vectors (an artifact without one is left out: it cannot be clustered), `terms` the
    counts of its entries' analysed title and body terms."""
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    vectors = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    keep = norms[:, 0] > 0
    surface_counts: dict[str, Counter] = {}
    for title in titles:
        kept = [w for w in words(title) if w not in STOPWORDS and len(w) <= 64]   # what `analyse` keeps
        stems = analyse(title)
        if len(stems) == len(kept):
            for word, s in zip(kept, stems):
                surface_counts.setdefault(s, Counter())[word] += 1
    surface = {s: c.most_common(1)[0][0] for s, c in surface_counts.items()}
    sel = np.flatnonzero(keep)
    vocab: dict[str, int] = {}
    ptr = np.zeros(len(sel) + 1, np.int64)
    ids_out: list[int] = []
    counts_out: list[int] = []
    for j, i in enumerate(sel):
        c = terms[i]
        ids_out.extend(vocab.setdefault(t, len(vocab)) for t in c)
        counts_out.extend(c.values())
        ptr[j + 1] = len(ids_out)
    return Snapshot(generation=generation, artifact_ids=[artifact_ids[i] for i in sel],
                    titles=[titles[i] for i in sel], created=np.array([created[i] for i in sel], np.int64),
                    modified=np.array([modified[i] for i in sel], np.int64),
                    vectors=np.ascontiguousarray(vectors[sel]), vocabulary=list(vocab), term_ptr=ptr,
                    term_ids=np.array(ids_out, np.int64), term_counts=np.array(counts_out, np.float64),
                    surface=surface,
                    unlabelled=np.array([i for t, i in vocab.items() if len(t) < 2 or t.isdigit()], np.int64))


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
    """Topic computations of one store over its `source` (see the module docstring)."""

    def __init__(self, source: TopicSource, dimension: int, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self._source = source
        self.dimension = dimension
        self.wait_s = wait_s
        self._state: dict[str, TenantTopics] = {}
        self._registry = threading.Lock()

    def _tenant_state(self, tenant_id: str) -> TenantTopics:
        with self._registry:
            return self._state.setdefault(tenant_id, TenantTopics())

    async def view(self, tenant_id: str, filters: SearchFilters, k: int) -> View | dict[str, Any]:
        """The caller's view, or a status dict while the model is being computed."""
        check_k(k)
        gen, visible, handle = await self._source.visible(tenant_id, filters)
        state = self._tenant_state(tenant_id)
        with state.lock:
            model = state.models.get(k)
            if model is not None and model.snapshot.generation == gen:
                return self._cached_view(state, model, filters, visible)
            job = state.jobs.get(k)
            if job is None or job.done.is_set():
                job = _Job(key=(gen, k))
                state.jobs[k] = job
                threading.Thread(target=self._compute, args=(tenant_id, handle, state, k, job), daemon=True,
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

    @staticmethod
    def _cached_view(state: TenantTopics, model: Model, filters: SearchFilters, visible: set[str] | None) -> View:
        key = (model.snapshot.generation, model.requested_k, filters)
        view = state.views.get(key)
        if view is None:
            view = make_view(model, visible)
            if len(state.views) >= VIEW_CACHE:
                state.views.clear()
            state.views[key] = view
        return view

    def _compute(self, tenant_id: str, handle: Any, state: TenantTopics, k: int, job: _Job) -> None:
        def progress(p: float) -> None:
            job.progress = p
        try:
            snapshot = self._source.read(handle, state.snapshot, progress)   # another k of the same generation:
            model = build_model(snapshot, k, progress)                      # the same documents
            with state.lock:
                state.snapshot = snapshot
                state.models = {kk: m for kk, m in state.models.items() if m.snapshot.generation == snapshot.generation}
                state.models[k] = model
                state.views = {key: v for key, v in state.views.items() if key[0] == snapshot.generation}
            log.info("topics of tenant %s: %d documents, k=%d (%s) in %.2fs", tenant_id,
                     len(snapshot.artifact_ids), model.k, model.criterion, model.seconds)
        except BaseException as err:             # reported to the caller waiting for it
            log.exception("computing topics of tenant %s failed", tenant_id)
            job.error = err
        finally:
            job.progress = 1.0
            job.done.set()


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


__all__ = ["MAX_TERMS", "TopicSource", "Topics", "answer", "make_view", "period_key", "silhouette", "snapshot_of"]
