"""The benchmark's in-process per-field index: BM25 as written in its docstring, candidates with
complete scores, and feature rows for them; a small cross-fit runs end to end."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.beir import BeirDataset, Doc
from benchmarks.field_index import FieldIndex, feature_matrix
from ranking.features import FEATURE_NAMES
from services.rag_pipeline.learning.crossval import Learner, Prepared, Setting, query_groups
from shared.analysis import analyse

TEXTS = [("Vitamin D and bone", "vitamin d supplements raise bone density in older adults"),
         ("Aspirin trial", "low dose aspirin lowers stroke risk after surgery"),
         ("", "gut bacteria shape immune responses to vitamin intake"),
         ("Bone loss", "bone density falls without vitamin d or calcium"),
         ("Sleep", "short sleep raises blood pressure in adults")] * 4


def _dataset() -> BeirDataset:
    corpus = tuple(Doc(f"d{i}", t, x) for i, (t, x) in enumerate(TEXTS))
    queries = {"q1": "vitamin d bone density", "q2": "aspirin stroke", "q3": "sleep blood pressure",
               "q4": "immune bacteria"}
    qrels = {"q1": {"d0": 1, "d3": 1}, "q2": {"d1": 1}, "q3": {"d4": 1}, "q4": {"d2": 1}}
    return BeirDataset(root=Path("."), name="toy", split="test", corpus=corpus, queries=queries, qrels=qrels,
                       fingerprint="0" * 16)


def _index(dataset: BeirDataset) -> FieldIndex:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(dataset.corpus), 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return FieldIndex(dataset, vectors, vectors.copy(), depth=6)


def test_bm25_over_title_and_text_is_the_store_formula() -> None:
    dataset = _dataset()
    index = _index(dataset)
    ids = index.query_ids("vitamin bone")
    got = index.bm25_doc(ids)
    docs = [analyse(d.title) + analyse(d.text) for d in dataset.corpus]
    avg = sum(map(len, docs)) / len(docs)
    for i, terms in enumerate(docs):
        want = 0.0
        for q in ("vitamin", "bone"):
            term = analyse(q)[0]
            df = sum(1 for d in docs if term in d)
            idf = math.log1p((len(docs) - df + 0.5) / (df + 0.5))
            tf = terms.count(term)
            want += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(terms) / avg))
        assert got[i] == pytest.approx(want, rel=1e-5)


def test_candidates_carry_both_scores_and_one_feature_row_each() -> None:
    dataset = _dataset()
    index = _index(dataset)
    qv = index.doc_vectors[0]
    qc = index.candidates("vitamin d bone density", qv, feedback=True)
    assert not np.isnan(qc.candidates.dense).any() and not np.isnan(qc.candidates.bm25).any()
    rows = np.arange(len(qc.rows))
    x = feature_matrix(qc.inputs, np.linspace(0, 1, len(qc.rows)).astype(np.float32), rows)
    assert x.shape == (len(qc.rows), len(FEATURE_NAMES))
    title_less = [i for i, r in enumerate(qc.rows) if not dataset.corpus[r].title]
    assert np.isnan(x[title_less, FEATURE_NAMES.index("dense_title")]).all()


def test_a_cross_validated_choice_runs_end_to_end_on_a_toy_corpus() -> None:
    dataset = _dataset()
    index = _index(dataset)

    def source(qid: str, feedback: bool) -> Prepared:
        qc = index.candidates(dataset.queries[qid], index.doc_vectors[int(qid[1:])], feedback=feedback)
        return Prepared([index.doc_ids[r] for r in qc.rows], qc.candidates, qc.config,
                        lambda rows, fused, qc=qc: feature_matrix(qc.inputs, fused, rows))

    qids = list(dataset.queries)
    learner = Learner(source, dataset.qrels, (Setting(), Setting("linear", 6)), inner_folds=2,
                      groups=query_groups(qids, dataset.qrels, dataset.queries))
    chosen = learner.choose(qids)
    assert set(chosen.inner) == {"off", "linear N6"}
    assert all(0.0 <= v <= 1.0 for v in chosen.inner.values())
    assert len(learner.scores(qids, chosen.setting, chosen.model)) == 4
