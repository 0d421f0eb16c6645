"""Topics of a tenant: k-means clusters of its documents, labelled for each caller from the
documents that caller may see.

    snapshot   one SQLite read snapshot (no index lock held): every artifact's vector (the
               mean of its chunk vectors, L2-normalised), dates, title and analysed terms
               (the FTS5 rows, i.e. exactly our analyzer's terms, ../analysis.py)
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

This module serves them (the snapshot read, the background jobs, the caches, the dispatch of a
request); the model and the views are topic_model.py's, the answers and the checks of a
request's arguments topic_answers.py's.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shared.analysis import STOPWORDS, analyse, words
from services.knowledge_store.embedded.storage.filter_sql import filter_clause
from services.knowledge_store.embedded.tenants import Tenant, Tenants
from services.knowledge_store.embedded.topic_answers import (
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
from services.knowledge_store.embedded.topic_model import (
    MAX_TERMS,
    Model,
    Snapshot,
    View,
    build_model,
    make_view,
    silhouette,
)
from shared.errors import InvalidArgument
from shared.records import SearchFilters

log = logging.getLogger(__name__)

DEFAULT_WAIT_S = 2.0
MAX_EXAMPLES = 20
MAX_POINTS = 20_000
MAX_LIST = 200
KINDS = ("topics", "evolution", "members", "map")
VIEW_CACHE = 64


# ---------------------------------------------------------------------------- the tenant's snapshot
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


__all__ = ["MAX_TERMS", "Topics", "answer", "make_view", "period_key", "silhouette"]   # (the tests' way in)
