"""A tenant's FAISS index: an in-memory derivative of the vectors held in SQLite.

Ids are entry row ids (`entries.rid`, AUTOINCREMENT, never reused), scores are inner
products of L2-normalised vectors (= cosine).

    kind   structure                                   removal
    flat   IndexIDMap2(IndexFlatIP)         exact      remove_ids
    hnsw   IndexIDMap2(IndexHNSWFlat, IP)   M, efConstruction, efSearch   tombstones, excluded by selector;
                                                       rebuilt past 20 % tombstones
    ivf    IndexIVFFlat(IndexFlatIP), IP    nlist, nprobe  remove_ids (hashtable direct map)
           trained on the tenant's vectors; needs 39 · nlist of them (auto nlist =
           clamp(4·√n, 1, n / 39), at least 1,024 vectors), else it serves as flat until
           there are; retrained once the tenant has grown 4× since training.
    auto   flat below `auto_threshold` live vectors, hnsw from there on (rebuilt as hnsw once a
           flat one crosses it, back to flat below half of it): the default (settings
           `default_index_kind`, `hnsw_threshold`); `kind` names the structure serving now.

HNSW's efSearch is chosen per index from a recall target, measured on its own vectors when it
is built and when it has doubled since (search_depth.py); the configured efSearch is the most it
may be. `ef_search` is the one searches use, `depth` what was measured.

Persistence (persistence.py): `save` writes the FAISS index with `faiss.write_index`;
`restore` reads one back with the state FAISS does not keep (kind, tombstones, training size).

Not thread-safe: the owner (the core) holds a readers/writer lock around every call.
Filtering happens inside FAISS through `SearchParameters.sel` (an `IDSelectorBatch` of the
allowed ids); `exact` reconstructs candidate vectors from the index for the cases where an
approximate index cannot promise k results under a selective filter.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import faiss
import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.embedded import search_depth
from services.knowledge_store.embedded.search_depth import Depth

MIN_IVF_VECTORS = 1_024
IVF_POINTS_PER_LIST = 39
HNSW_EF_CONSTRUCTION = 80
TOMBSTONE_REBUILD_FRACTION = 0.2
IVF_RETRAIN_GROWTH = 4.0
AUTO_HNSW_THRESHOLD = 20_000


@dataclass(frozen=True, slots=True)
class IndexConfig:
    kind: str = "flat"
    hnsw_m: int = 32
    hnsw_ef_search: int = 64
    hnsw_ef_construction: int = HNSW_EF_CONSTRUCTION
    ivf_nlist: int = 0            # 0 = auto from the number of vectors
    ivf_nprobe: int = 8

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> IndexConfig:
        return cls(**json.loads(text))


#: The service's FAISS threads (main.py sets them): searches are one query at a time, where a second
#: thread costs more in wake-ups than it saves (SciFact flat, 11k vectors: 0.6 ms with 1, 1.0 with 2; lab/NOTES.md).
FAISS_THREADS = 1
_omp_threads = 0        # 0 = FAISS's default (one thread per core)


def set_threads(n: int) -> None:
    """OpenMP threads for every later FAISS call of this process (the service: FAISS_THREADS;
    `benchmarks.scale` more for its bulk builds). `omp_set_num_threads` only affects the thread
    that calls it, and searches run on executor threads, so each call below re-applies the value."""
    global _omp_threads
    _omp_threads = max(0, int(n))


def _apply_threads() -> None:
    if _omp_threads:
        faiss.omp_set_num_threads(_omp_threads)


def auto_nlist(n: int) -> int:
    return max(1, min(int(round(4 * math.sqrt(n))), n // IVF_POINTS_PER_LIST))


class VectorIndex:
    """One tenant's vectors in FAISS (see the module docstring)."""

    def __init__(self, dimension: int, config: IndexConfig, ids: NDArray[np.int64],
                 vectors: NDArray[np.float32], *, auto_threshold: int = AUTO_HNSW_THRESHOLD) -> None:
        self.dimension = dimension
        self.config = config
        self.auto_threshold = auto_threshold
        self._tombstones: set[int] = set()
        self._trained_on = 0
        self._mapped = False
        self.depth: Depth | None = None
        self._index, self.kind = self._build(ids, vectors)
        self._measure()

    @classmethod
    def restore(cls, dimension: int, config: IndexConfig, path: str, *, kind: str, tombstones: list[int],
                trained_on: int, auto_threshold: int = AUTO_HNSW_THRESHOLD, mapped: bool = False,
                depth: object = None) -> VectorIndex:
        """An index written by `save` (the caller has checked its file and header). `mapped`:
        flat and HNSW codes stay memory-mapped from the file (read-only) until the first write
        makes the index an owned copy (`_own`)."""
        index = cls.__new__(cls)
        index.dimension, index.config, index.auto_threshold = dimension, config, auto_threshold
        index._tombstones = set(int(t) for t in tombstones)
        index._trained_on = int(trained_on)
        index.depth = Depth.from_json(depth) if kind == "hnsw" else None
        index._mapped = mapped and kind in ("flat", "hnsw")
        flags = faiss.IO_FLAG_MMAP_IFC if index._mapped else 0
        index._index, index.kind = faiss.read_index(path, flags), kind
        if index._index.d != dimension:
            raise ValueError(f"the saved index is {index._index.d}-dimensional, not {dimension}")
        return index

    def save(self, path: str) -> dict:
        """Write the FAISS index to `path`; returns the state `restore` needs besides it."""
        faiss.write_index(self._index, path)
        return {"kind": self.kind, "tombstones": sorted(self._tombstones), "trained_on": self._trained_on,
                **({"depth": self.depth.to_json()} if self.depth is not None else {})}

    def _own(self) -> None:
        """Before a write: a memory-mapped index becomes an owned copy (FAISS cannot grow or
        shrink mapped codes)."""
        if self._mapped:
            self._index = faiss.deserialize_index(faiss.serialize_index(self._index))
            self._mapped = False

    def memory_bytes(self) -> int:
        """Estimated resident size: codes, id maps and (HNSW) graph links."""
        per = self.dimension * 4 + 48                   # float32 codes + id map and its reverse
        if self.kind == "hnsw":
            per += int(2 * self.config.hnsw_m * 4 * 1.05) + 16
        return int(self._index.ntotal) * per

    # -- construction ------------------------------------------------------------------------

    def _build(self, ids: NDArray[np.int64], vectors: NDArray[np.float32]) -> tuple[faiss.Index, str]:
        _apply_threads()
        d, cfg, n = self.dimension, self.config, len(ids)
        if cfg.kind == "hnsw" or (cfg.kind == "auto" and n >= self.auto_threshold):
            hnsw = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = max(cfg.hnsw_ef_construction, cfg.hnsw_m)
            hnsw.hnsw.efSearch = cfg.hnsw_ef_search      # the cap; searches pass `ef_search`
            index, kind = faiss.IndexIDMap2(hnsw), "hnsw"
        elif cfg.kind == "ivf" and self._ivf_trainable(n):
            nlist = cfg.ivf_nlist or auto_nlist(n)
            ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
            ivf.cp.seed = 1234
            ivf.train(vectors)
            ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
            ivf.nprobe = min(cfg.ivf_nprobe, nlist)
            index, kind = ivf, "ivf"
            self._trained_on = n
        else:
            index, kind = faiss.IndexIDMap2(faiss.IndexFlatIP(d)), "flat"
        if n:
            index.add_with_ids(vectors, ids)
        return index, kind

    def _ivf_trainable(self, n: int) -> bool:
        if self.config.ivf_nlist:
            return n >= IVF_POINTS_PER_LIST * self.config.ivf_nlist
        return n >= MIN_IVF_VECTORS

    # -- search depth ------------------------------------------------------------------------

    @property
    def ef_search(self) -> int:
        """HNSW's efSearch for searches: the measured choice, at most the configured value (which
        it is until measured)."""
        cap = self.config.hnsw_ef_search
        return min(self.depth.ef_search, cap) if self.depth is not None else cap

    def _measure(self) -> None:
        """Choose efSearch for the recall target on the index's own vectors (search_depth.py)."""
        if self.kind == "hnsw" and int(self._index.ntotal) >= search_depth.MIN_VECTORS:
            _apply_threads()
            self.depth = search_depth.choose(self._index, self.config.hnsw_ef_search)

    # -- state -------------------------------------------------------------------------------

    @property
    def ntotal(self) -> int:
        """Live vectors (tombstoned ones excluded)."""
        return int(self._index.ntotal) - len(self._tombstones)

    @property
    def needs_rebuild(self) -> bool:
        """True when a rebuild from the system of record would serve searches better."""
        total = int(self._index.ntotal)
        if self._tombstones and len(self._tombstones) > TOMBSTONE_REBUILD_FRACTION * total:
            return True
        if self.config.kind == "auto":
            live = self.ntotal
            return (self.kind == "flat" and live >= self.auto_threshold) or \
                (self.kind == "hnsw" and live < self.auto_threshold // 2)
        if self.config.kind == "ivf":
            live = self.ntotal
            if self.kind == "flat":
                return self._ivf_trainable(live)
            return live >= IVF_RETRAIN_GROWTH * max(self._trained_on, 1)
        return False

    # -- updates -----------------------------------------------------------------------------

    def add(self, ids: NDArray[np.int64], vectors: NDArray[np.float32]) -> None:
        if len(ids):
            self._own()
            _apply_threads()
            self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                                     np.ascontiguousarray(ids, dtype=np.int64))
            grown = self.depth is None or self._index.ntotal >= search_depth.GROWTH * max(self.depth.measured_at, 1)
            if self.kind == "hnsw" and grown:
                self._measure()

    def remove(self, ids: NDArray[np.int64], *, only_present: bool = False) -> None:
        """Remove `ids`; with `only_present`, some may not be in the index (a replay)."""
        if not len(ids):
            return
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if self.kind == "hnsw" and only_present:
            ids = ids[np.isin(ids, faiss.vector_to_array(self._index.id_map))]
            ids = ids[~np.isin(ids, np.fromiter(self._tombstones, np.int64, len(self._tombstones)))]
        if self.kind == "hnsw":                   # HNSW cannot delete: hide, rebuild later
            self._tombstones.update(int(i) for i in ids)
            return
        self._own()
        if self.kind == "ivf":                  # the hashtable direct map wants an array
            self._index.remove_ids(faiss.IDSelectorArray(ids))
        else:
            self._index.remove_ids(faiss.IDSelectorBatch(ids))

    # -- search ------------------------------------------------------------------------------

    def search(self, queries: NDArray[np.float32], k: int, allowed: NDArray[np.int64] | None = None,
               selector: faiss.IDSelector | None = None) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Top `k` per query among `allowed` ids (None = all). Missing results: id -1.

        `selector`, when given, is `id_selector(allowed)` built earlier (the core caches it with
        the allowed ids; building one costs about as much as the search)."""
        q = queries.shape[0]
        k_eff = min(k, int(self._index.ntotal))
        if k_eff <= 0 or (allowed is not None and len(allowed) == 0):
            return np.zeros((q, 0), np.float32), np.zeros((q, 0), np.int64)
        keep: list[object] = []                  # selectors must outlive the search call
        sel = None
        if allowed is not None:
            sel = selector if selector is not None else id_selector(allowed)
            keep.append(sel)
        elif self._tombstones:
            inner = faiss.IDSelectorBatch(np.fromiter(self._tombstones, np.int64, len(self._tombstones)))
            sel = faiss.IDSelectorNot(inner)
            keep += [inner, sel]
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k_eff))
        elif self.kind == "ivf":
            params = faiss.SearchParametersIVF(nprobe=self._index.nprobe)
        else:
            params = faiss.SearchParameters() if sel is not None else None
        if params is not None and sel is not None:
            params.sel = sel
        _apply_threads()
        scores, ids = self._index.search(queries, k_eff, params=params)
        return scores, ids

    def exact(self, queries: NDArray[np.float32], k: int,
              candidates: NDArray[np.int64]) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Exact top `k` per query among `candidates` (ids that are in the index)."""
        candidates = np.ascontiguousarray(candidates, dtype=np.int64)
        if self._tombstones:
            candidates = candidates[~np.isin(candidates, np.fromiter(self._tombstones, np.int64))]
        return exact_top_k(queries, candidates, self._reconstruct(candidates), k)

    def stored_vectors(self, ids: NDArray[np.int64]) -> tuple[NDArray[np.float32], NDArray[np.bool_]]:
        """The vectors stored for `ids`, exactly as added (every kind here keeps flat float32
        codes: IndexFlat, HNSWFlat and IVFFlat reconstruct bit for bit), and which ids were
        found: a tombstoned or unknown id gets a zero row and False."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        found = np.ones(len(ids), bool)
        if self._tombstones:
            found &= ~np.isin(ids, np.fromiter(self._tombstones, np.int64, len(self._tombstones)))
        out = np.zeros((len(ids), self.dimension), np.float32)
        if found.all():
            try:
                return self._reconstruct(ids), found
            except RuntimeError:             # an id FAISS does not hold: fall back to one by one
                pass
        for i in np.flatnonzero(found):
            try:
                out[i] = self._index.reconstruct(int(ids[i]))
            except RuntimeError:
                found[i] = False
        return out, found

    def _reconstruct(self, ids: NDArray[np.int64]) -> NDArray[np.float32]:
        out = np.empty((len(ids), self.dimension), np.float32)
        step = 65_536
        for start in range(0, len(ids), step):
            out[start:start + step] = self._index.reconstruct_batch(ids[start:start + step])
        return out


def id_selector(ids: NDArray[np.int64]) -> faiss.IDSelectorBatch:
    """A FAISS selector of `ids` (it copies them, so `ids` may be freed afterwards)."""
    return faiss.IDSelectorBatch(np.ascontiguousarray(ids, dtype=np.int64))


def exact_top_k(queries: NDArray[np.float32], ids: NDArray[np.int64], vectors: NDArray[np.float32],
                k: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Top `k` inner products per query, descending (equal scores: lower id first).

    Rows with fewer than `k` candidates are padded with (-inf, -1).
    """
    q = queries.shape[0]
    scores = np.full((q, k), -np.inf, np.float32)
    labels = np.full((q, k), -1, np.int64)
    n = len(ids)
    if n == 0 or k <= 0:
        return scores, labels
    sims = queries @ vectors.T                   # (q, n)
    kk = min(k, n)
    for row in range(q):
        s = sims[row]
        top = np.argpartition(-s, kk - 1)[:kk] if kk < n else np.arange(n)
        order = top[np.lexsort((ids[top], -s[top]))]
        scores[row, :kk] = s[order]
        labels[row, :kk] = ids[order]
    return scores, labels
