from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.beir import load_dataset
from shared.errors import InvalidArgument

CORPUS = [{"_id": "d1", "title": "Alpha", "text": "first"}, {"_id": "d2", "title": "", "text": "second"},
          {"_id": "d3", "title": "Gamma only"}]
QUERIES = [{"_id": "q1", "text": "alpha?"}, {"_id": "q2", "text": "second?"}, {"_id": "q3", "text": "unjudged"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t0\n"


def _write(root: Path, corpus=None, queries=None, qrels: str | None = QRELS) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", corpus if corpus is not None else CORPUS),
                       ("queries.jsonl", queries if queries is not None else QUERIES)):
        (root / name).write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    if qrels is not None:
        (root / "qrels" / "test.tsv").write_text(qrels)
    return root


def _error(root: Path, **kw) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        load_dataset(root, **kw)
    return info.value


def test_a_well_formed_dataset_loads_in_file_order(tmp_path: Path) -> None:
    ds = load_dataset(_write(tmp_path / "mini"))
    assert [d.id for d in ds.corpus] == ["d1", "d2", "d3"]
    assert ds.corpus[0].body == "Alpha\nfirst" and ds.corpus[1].body == "second"
    assert ds.queries["q3"] == "unjudged"
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}
    assert ds.evaluated_query_ids == ["q1", "q2"]
    assert ds.name == "mini" and len(ds.fingerprint) == 16


def test_the_fingerprint_changes_with_the_corpus(tmp_path: Path) -> None:
    a = load_dataset(_write(tmp_path / "a"))
    b = load_dataset(_write(tmp_path / "b", corpus=CORPUS + [{"_id": "d4", "text": "more"}]))
    assert a.fingerprint != b.fingerprint


def test_a_missing_directory_or_file_is_named(tmp_path: Path) -> None:
    assert str(tmp_path / "nope") in str(_error(tmp_path / "nope"))
    root = _write(tmp_path / "x")
    (root / "queries.jsonl").unlink()
    err = _error(root)
    assert err.field == str(root / "queries.jsonl") and "does not exist" in str(err)


def test_a_missing_split_names_the_qrels_file(tmp_path: Path) -> None:
    err = _error(_write(tmp_path / "x"), split="dev")
    assert err.field.endswith("qrels/dev.tsv") and "--split" in str(err)


def test_malformed_json_names_the_file_and_line(tmp_path: Path) -> None:
    root = _write(tmp_path / "x", corpus=[CORPUS[0], "", '{"_id": "d2", "text": oops}'])
    err = _error(root)
    assert err.field == f"{root / 'corpus.jsonl'}:3"
    assert "not valid JSON" in str(err)


@pytest.mark.parametrize("line, problem", [
    ('["d1", "x"]', "expected an object"),
    ('{"title": "t", "text": "x"}', '"_id"'),
    ('{"_id": "", "text": "x"}', "empty"),
    ('{"_id": "a#1", "text": "x"}', "'#'"),
    ('{"_id": "d9", "text": 5}', '"text" is a JSON int'),
    ('{"_id": "d9", "title": "", "text": "  "}', "neither title nor text"),
    ('{"_id": "d1", "text": "again"}', "repeats line 1"),
])
def test_bad_corpus_lines_are_rejected_with_the_reason(tmp_path: Path, line: str, problem: str) -> None:
    root = _write(tmp_path / "x", corpus=[CORPUS[0], line])
    err = _error(root)
    assert err.field == f"{root / 'corpus.jsonl'}:2"
    assert problem in str(err)


def test_a_query_without_text_is_rejected(tmp_path: Path) -> None:
    root = _write(tmp_path / "x", queries=[QUERIES[0], {"_id": "q2"}])
    err = _error(root)
    assert err.field == f"{root / 'queries.jsonl'}:2" and '"text"' in str(err)


@pytest.mark.parametrize("qrels, lineno, problem", [
    ("qid\tdid\trel\nq1\td1\t1\n", 1, "header"),
    ("query-id\tcorpus-id\tscore\nq1\td1\n", 2, "3"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\thigh\n", 3, "not an integer"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1.5\n", 2, "not an integer"),
    ("query-id\tcorpus-id\tscore\nq1\tghost\t1\n", 2, "corpus id 'ghost' is not in corpus.jsonl"),
    ("query-id\tcorpus-id\tscore\nq9\td1\t1\n", 2, "query id 'q9' is not in queries.jsonl"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n", 3, "judged twice"),
])
def test_bad_qrels_lines_name_the_file_and_line(tmp_path: Path, qrels: str, lineno: int, problem: str) -> None:
    root = _write(tmp_path / "x", qrels=qrels)
    err = _error(root)
    assert err.field == f"{root / 'qrels' / 'test.tsv'}:{lineno}"
    assert problem in str(err)


def test_empty_files_are_rejected(tmp_path: Path) -> None:
    err = _error(_write(tmp_path / "x", corpus=[]))
    assert "no documents" in str(err)
    err = _error(_write(tmp_path / "y", qrels="query-id\tcorpus-id\tscore\n"))
    assert "no judgements" in str(err)
