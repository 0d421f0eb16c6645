"""HNSW search depth (efSearch) chosen per index from a recall target, on the index's own vectors.

One efSearch for every size wastes time on small indexes: 768 was chosen at 1M chunks, where
it is needed for recall@10 0.95; at 100k chunks the chosen 256 gave 0.997 in 1.3 ms p50 where
768 took 2.8 ms (docs/BENCHMARKS.md, "HNSW search depth by size", with the command). So when
an HNSW index is built (or rebuilt), it is measured on its own vectors:

    queries   SAMPLE_QUERIES query-like points: the normalised midpoint of two random stored
              vectors (a stored vector itself would be its own nearest neighbour, found at any
              depth, and overstate recall)
    truth     their exact top-k by inner product over every vector of the index (faiss.knn)
    choice    the smallest efSearch of LADDER, at most the configured one (the cap), whose
              recall@k reaches the target (settings `hnsw_recall_target`, default 0.99); none
              does: the cap

Cost: one exact search of the sample over the index's own flat storage (measured in
docs/BENCHMARKS.md) and one HNSW search of the sample per rung tried. An index that grows by
adds to GROWTH × the size it was measured at is measured again (under the writer's lock, like
the add). The choice is saved with the index (its manifest's vector state) and reported in the
tenant's stats; an index saved before this existed keeps the configured efSearch until it is
measured (its next build, or growth).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import faiss
import numpy as np

LADDER = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
SAMPLE_QUERIES = 200
K = 10
MIN_VECTORS = 1_000               # below this an HNSW index keeps the configured efSearch (too few to measure)
GROWTH = 2.0                      # measured again once the index holds this many times the vectors

_target = 0.99                    # set from the settings by the service (`set_recall_target`)


def set_recall_target(target: float) -> None:
    """The recall@10 every later HNSW build aims for; 0 = no choice, the configured efSearch."""
    global _target
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"hnsw_recall_target must be in [0, 1], got {target}")
    _target = float(target)


def recall_target() -> float:
    return _target


@dataclass(frozen=True, slots=True)
class Depth:
    ef_search: int
    recall: float                 # measured recall@K at ef_search (0 = not measured)
    target: float
    measured_at: int = 0          # vectors in the index when measured
    seconds: float = 0.0          # what the measurement took

    def to_json(self) -> dict:
        return {"ef_search": self.ef_search, "recall": self.recall, "target": self.target,
                "measured_at": self.measured_at, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: object) -> "Depth | None":
        if not isinstance(data, dict):
            return None
        try:
            return cls(int(data["ef_search"]), float(data["recall"]), float(data["target"]),
                       int(data.get("measured_at", 0)), float(data.get("seconds", 0.0)))
        except (KeyError, TypeError, ValueError):
            return None


def choose(index: faiss.Index, cap: int, *, target: float | None = None, queries: int = SAMPLE_QUERIES,
           seed: int = 0) -> Depth:
    """The smallest efSearch (of LADDER, at most `cap`) whose recall@K on `index` (an
    IndexIDMap2 over an IndexHNSWFlat) reaches `target` (module docstring). The exact answers
    come from the index's own flat storage, so no copy of the vectors is needed."""
    target = _target if target is None else target
    hnsw = faiss.downcast_index(index.index)
    storage = faiss.downcast_index(hnsw.storage)
    n = int(storage.ntotal)
    if target <= 0 or n < MIN_VECTORS:
        return Depth(cap, 0.0, target, n)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    rows = np.unique(rng.integers(0, n, 2 * queries))
    sample = storage.reconstruct_batch(rows.astype(np.int64))
    order = rng.permutation(len(rows))
    half = len(order) // 2
    q = sample[order[:half]] + sample[order[half:2 * half]]
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    q = np.ascontiguousarray(q, dtype=np.float32)
    _, exact = storage.search(q, K)                          # exact inner products over every stored vector
    truth = faiss.vector_to_array(index.id_map)[exact]       # storage rows -> the index's ids
    best = Depth(cap, 0.0, target, n)
    for ef in [e for e in LADDER if e < cap] + [cap]:
        _, found = index.search(q, K, params=faiss.SearchParametersHNSW(efSearch=max(ef, K)))
        recall = round(float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found.tolist(), truth.tolist())])), 4)
        best = Depth(ef, recall, target, n, round(time.perf_counter() - started, 3))
        if recall >= target:
            break
    return best
