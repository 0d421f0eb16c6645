"""Per-field retrieval over a BEIR corpus, in process: the candidates and the features of the
learned re-ranker (ranking/features.py) for each query, as the store would serve them.

    keyword leg  BM25 (k1 1.2, b 0.75, the store's analyser shared/analysis.py, Lucene idf) over
                 title + text — the store's keyword leg at its default field weights (1, 1) —
                 optionally with RM3 feedback expansion (ranking/feedback.py)
    dense leg    cosine with the cached all-MiniLM-L6-v2 vector of title + text (the
                 `EmbeddingCache` arrays `nucleus bench` writes)
    candidates   the union of each leg's best `depth`, each with both scores complete (the
                 pipeline's score completion), ranked by the ranking core as the default
                 profile does (ranking/, adaptive fusion, richness from the store's formula)
    fields       title, body (the abstract) and doc (title + body); title vectors are encoded
                 once and cached beside the corpus vectors (`<fingerprint>_minilm_titles.npy`)

SciFact documents are single abstracts, so a document is one chunk here (chunk position 0):
what the stack does per chunk is done per document. The stack serves these per-field signals
through KnowledgeStore GetFieldSignals (docs/RANKING.md); this module computes them from the
corpus in process for the benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from dataclasses import fields as dc_fields
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy import sparse

from benchmarks.baseline import _save, encode
from benchmarks.beir import BeirDataset
from ranking import Candidates, RankingConfig
from ranking.feedback import FEEDBACK_DOCS, rm3
from ranking.profile import BUILTIN_PROFILE
from ranking.features import MAX_POSITIONS, FeatureInputs, FieldTerms, bm25, features
from ranking.query_features import query_features
from services.knowledge_store.richness import richness
from shared.analysis import analyse

_F32 = np.float32


def title_vectors(dataset: BeirDataset, model, cache_dir: Path) -> NDArray[np.float32]:
    """L2-normalised title vectors in corpus order (cached; an empty title gets a zero vector)."""
    path = cache_dir / f"{dataset.fingerprint}_minilm_titles.npy"
    if path.is_file():
        cached = np.load(path)
        if cached.shape[0] == len(dataset.corpus):
            return cached.astype(_F32)
    titles = [d.title for d in dataset.corpus]
    vectors = encode(model, [t or " " for t in titles])
    vectors[[i for i, t in enumerate(titles) if not t.strip()]] = 0.0
    _save(path, vectors)
    return vectors


@dataclass(frozen=True, slots=True)
class QueryCandidates:
    rows: NDArray[np.intp]           # corpus rows of the candidates
    candidates: Candidates           # complete scores of both legs
    config: RankingConfig            # the default profile's config for this query
    inputs: FeatureInputs


class FieldIndex:
    """Term statistics per field and the vectors of one corpus (module docstring)."""

    def __init__(self, dataset: BeirDataset, doc_vectors: NDArray[np.float32],
                 title_vecs: NDArray[np.float32], depth: int = 100) -> None:
        self.doc_ids = [d.id for d in dataset.corpus]
        self.depth = depth
        self.vocab: dict[str, int] = {}
        title_terms = [self._ids(analyse(d.title)) for d in dataset.corpus]
        body_terms = [self._ids(analyse(d.text)) for d in dataset.corpus]
        v, n = len(self.vocab), len(dataset.corpus)
        self.tf_title = _counts(title_terms, v).tocsc()
        self.tf_body = _counts(body_terms, v).tocsc()
        self.tf_doc = (self.tf_title + self.tf_body).tocsc()
        self.tf_doc_rows = self.tf_doc.tocsr()
        self.len_title = np.asarray([len(t) for t in title_terms], dtype=_F32)
        self.len_body = np.asarray([len(t) for t in body_terms], dtype=_F32)
        self.len_doc = self.len_title + self.len_body
        self.df = np.diff(self.tf_doc.indptr).astype(np.int64)
        self.n = n
        self.idf = np.log1p((n - self.df + 0.5) / (self.df + 0.5)).astype(_F32)
        self.body_pos = _padded(body_terms, v)
        self.title_pos = _padded(title_terms, v)
        self.doc_vectors = doc_vectors
        self.title_vecs = title_vecs
        self.richness = np.asarray([richness(d.body) for d in dataset.corpus], dtype=_F32)

    def _ids(self, terms: list[str]) -> NDArray[np.int32]:
        return np.asarray([self.vocab.setdefault(t, len(self.vocab)) for t in terms], dtype=np.int32)

    def query_ids(self, text: str) -> NDArray[np.intp]:
        seen: dict[int, None] = {}
        for term in analyse(text):
            if term in self.vocab:
                seen.setdefault(self.vocab[term], None)
        return np.asarray(list(seen), dtype=np.intp)

    def bm25_doc(self, ids: NDArray[np.intp], weights: NDArray[np.float64] | None = None) -> NDArray[np.float32]:
        """BM25 of every document (title + text) for the weighted terms."""
        if ids.size == 0:
            return np.zeros(self.n, dtype=_F32)
        tf = self.tf_doc[:, ids].toarray().astype(_F32)
        idf = self.idf[ids] * (1.0 if weights is None else weights.astype(_F32))
        return bm25(FieldTerms(tf=tf, length=self.len_doc, avg_length=float(self.len_doc.mean())), idf)

    def expanded(self, ids: NDArray[np.intp], scores: NDArray[np.float32]) -> tuple[NDArray[np.intp], NDArray]:
        top = np.lexsort((np.arange(self.n), -scores))[:FEEDBACK_DOCS]
        top = top[scores[top] > 0]
        block = self.tf_doc_rows[top]
        terms = np.unique(block.indices).astype(np.intp)
        dense = block[:, terms].toarray()
        return rm3(ids, dense, self.len_doc[top], scores[top], terms)

    def candidates(self, text: str, qvec: NDArray[np.float32], *, feedback: bool = False,
                   dense_weight: float | None = None, dense_all: NDArray[np.float32] | None = None) -> QueryCandidates:
        """The query's candidates (union of both legs' best `depth`, complete scores), its
        default config, and the feature inputs of every candidate. `dense_all`: the dense leg's
        score of every document instead of the document-vector cosine (an experiment's)."""
        ids = self.query_ids(text)
        bm25_all = self.bm25_doc(ids)
        if feedback and ids.size:
            bm25_all = self.bm25_doc(*self.expanded(ids, bm25_all))
        if dense_all is None:
            dense_all = np.clip(self.doc_vectors @ qvec, -1.0, 1.0).astype(_F32)
        k = min(self.depth, self.n)
        dense_top = np.argpartition(-dense_all, k - 1)[:k]
        hits = np.flatnonzero(bm25_all > 0)
        bm25_top = hits[np.argsort(-bm25_all[hits], kind="stable")[:k]]
        rows = np.union1d(dense_top, bm25_top).astype(np.intp)
        cands = Candidates.build(dense=dense_all[rows], bm25=bm25_all[rows], richness=self.richness[rows])
        cfg = default_config(query_features(text, self.df[ids].tolist(), self.n), dense_weight)
        return QueryCandidates(rows=rows, candidates=cands, config=cfg, inputs=self.inputs(ids, rows, cands, qvec))

    def inputs(self, ids: NDArray[np.intp], rows: NDArray[np.intp], cands: Candidates,
               qvec: NDArray[np.float32]) -> FeatureInputs:
        """Feature inputs of the candidates `rows` (fused is filled in by the caller)."""
        t = ids.size
        lut = np.full(len(self.vocab) + 1, -1, dtype=np.int32)          # last slot: the padding
        lut[ids] = np.arange(t, dtype=np.int32)
        fields = []
        for tf, length in ((self.tf_title, self.len_title), (self.tf_body, self.len_body),
                           (self.tf_doc, self.len_doc)):
            block = tf[:, ids][rows].toarray().astype(_F32) if t else np.zeros((rows.size, 0), _F32)
            fields.append(FieldTerms(tf=block, length=length[rows], avg_length=float(max(length.mean(), 1e-6))))
        n = rows.size
        return FeatureInputs(
            idf=self.idf[ids], title=fields[0], body=fields[1], doc=fields[2],
            body_positions=lut[self.body_pos[rows]], title_positions=lut[self.title_pos[rows]],
            dense_title=np.where(np.abs(self.title_vecs[rows]).sum(axis=1) > 0,
                                 self.title_vecs[rows] @ qvec, np.nan).astype(_F32),
            dense=cands.dense, bm25=cands.bm25, dense_rank=cands.dense_rank, bm25_rank=cands.bm25_rank,
            fused=np.zeros(n, dtype=_F32), chunk_position=np.zeros(n, dtype=_F32), richness=cands.richness,
            recency=np.full(n, 0.5, dtype=_F32), reputation=np.full(n, 0.5, dtype=_F32))


def default_config(features, dense_weight: float | None = None) -> RankingConfig:
    """The built-in profile as the pipeline builds its config (no recency on BEIR)."""
    p = BUILTIN_PROFILE
    return RankingConfig(weights=(p.relevancy_weight, p.recency_weight, p.richness_weight, p.reputation_weight),
                         fusion=p.fusion_method, dense_weight=p.dense_weight if dense_weight is None else dense_weight,
                         apply_recency=False, prior_strength=p.reputation_prior_strength, query=features)


def feature_matrix(inputs: FeatureInputs, fused: NDArray[np.float32], rows: NDArray[np.intp]) -> NDArray[np.float32]:
    """The features of the candidates `rows` (indices into the inputs) with their fused scores."""
    picked = {}
    for f in dc_fields(inputs):
        value = getattr(inputs, f.name)
        if f.name == "idf":
            picked[f.name] = value
        elif isinstance(value, FieldTerms):
            picked[f.name] = FieldTerms(tf=value.tf[rows], length=value.length[rows], avg_length=value.avg_length)
        else:
            picked[f.name] = value[rows]
    picked["fused"] = fused[rows].astype(_F32)
    return features(replace(inputs, **picked))


def _counts(terms: list[NDArray[np.int32]], v: int) -> sparse.csr_matrix:
    indptr = np.cumsum([0] + [len(t) for t in terms])
    data = np.ones(int(indptr[-1]), dtype=np.float32)
    cols = np.concatenate(terms) if terms else np.zeros(0, np.int32)
    m = sparse.csr_matrix((data, cols, indptr), shape=(len(terms), v))
    m.sum_duplicates()
    return m


def _padded(terms: list[NDArray[np.int32]], v: int) -> NDArray[np.int32]:
    """(docs, MAX_POSITIONS) term ids, padded with v (the lookup table's padding slot)."""
    out = np.full((len(terms), MAX_POSITIONS), v, dtype=np.int32)
    for i, t in enumerate(terms):
        out[i, :min(len(t), MAX_POSITIONS)] = t[:MAX_POSITIONS]
    return out
