"""The federation benchmark's pure parts: the evaluated subset, RRF over sources, doc ids of
remote results, and the foreign server's own scale."""
from __future__ import annotations

from benchmarks.beir import BeirDataset, Doc
from benchmarks.federate import doc_of, evaluated_rows, rrf
from benchmarks.foreign_rag import ForeignDoc, ForeignIndex


def dataset(n_docs: int, qrels: dict[str, dict[str, int]]) -> BeirDataset:
    corpus = tuple(Doc(id=f"d{i}", title=f"t{i}", text=f"text {i}") for i in range(n_docs))
    return BeirDataset(root=None, name="mini", split="test", corpus=corpus, queries={q: q for q in qrels},
                       qrels=qrels, fingerprint="x")


def test_the_subset_holds_every_judged_document_of_the_chosen_queries_and_spaced_distractors():
    ds = dataset(100, {"q1": {"d5": 1, "d77": 1}, "q2": {"d9": 1}, "q3": {"d50": 1}})
    qids, rows = evaluated_rows(ds, 2, 10)
    assert qids == ["q1", "q2"]
    assert {5, 77, 9} <= set(rows) and len(rows) == 10 and rows == sorted(rows)
    assert evaluated_rows(ds, 0, 0) == (["q1", "q2", "q3"], list(range(100)))


def test_rrf_and_remote_doc_ids():
    assert rrf([["a", "b", "c"], ["b", "a"], ["c"]]) == ["a", "b", "c"]    # a and b tie; c: 1/61 + 1/63
    assert rrf([["x", "y"], ["y"]])[0] == "y"
    assert doc_of("foreign:123") == "123" and doc_of("456") == "456"


def test_the_foreign_index_scores_on_its_own_scale():
    docs = [ForeignDoc("1", "Battery reset", "hold the reset button"), ForeignDoc("2", "Garden", "water daily")]
    bm25 = ForeignIndex(docs, "bm25").search("battery reset", 5)
    distance = ForeignIndex(docs, "distance").search("battery reset", 5)
    assert [d.id for d, _ in bm25] == ["1"] and bm25[0][1] > 1.0
    assert distance[0][1] == 1.0 / (1.0 + bm25[0][1])
