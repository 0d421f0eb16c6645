"""The needle set, the committed query split and the calibration measure of `nucleus bench`."""
from __future__ import annotations

import json

import pytest

from benchmarks import needles
from benchmarks.beir import load_dataset
from benchmarks.calibration import expected_calibration_error, judged_pairs, reliability
from benchmarks.splits import RULE, load_split, make_split, path_for
from shared.analysis import analyse, words

DOCS = [
    ("d1", "Dock firmware", "The dock firmware update restarts the dock. Error XK4471 means the charger contacts "
                            "are dirty; clean them with a dry cloth before the next update."),
    ("d2", "Battery guide", "Charge the battery overnight. The battery controller resets itself after an update "
                            "and the status light blinks green while it reloads."),
    ("d3", "Safety card", "Never mute the lidar field in service mode. Mixed zones allow 1.2 m/s only, and the "
                          "robot stops when a person steps into the lidar field."),
]


def test_needles_are_deterministic_and_each_is_held_by_exactly_one_document():
    ids, titles, texts = zip(*DOCS)
    first = needles.generate(ids, titles, texts, tokens=10, phrases=3, seed=3)
    assert first == needles.generate(ids, titles, texts, tokens=10, phrases=3, seed=3)
    assert {n.kind for n in first} == {"token", "phrase"}
    bodies = {i: f"{t}\n{x}" for i, t, x in DOCS}
    for n in first:
        if n.kind == "token":
            (term,) = analyse(n.query)
            assert [i for i, b in bodies.items() if term in analyse(b)] == [n.doc_id]
        else:
            assert n.query.startswith('"') and n.query.endswith('"')
            run = " " + " ".join(words(n.query)) + " "
            assert [i for i, b in bodies.items() if run in " " + " ".join(words(b)) + " "] == [n.doc_id]
    assert any(n.query == "XK4471" for n in needles.generate(ids, titles, texts, tokens=100, phrases=0))


def test_hits_count_distinct_documents_and_summaries_average_per_kind():
    assert needles.hits(["a", "a", "b", "c", "d", "e", "t"], "t") == {"hit@1": 0.0, "hit@5": 0.0}
    assert needles.hits(["b", "b", "t"], "t") == {"hit@1": 0.0, "hit@5": 1.0}
    ns = [needles.Needle("token-1", "token", "x", "t"), needles.Needle("phrase-1", "phrase", '"x y"', "u")]
    summary = needles.summarise({"token-1": {"hit@1": 1.0, "hit@5": 1.0}}, ns)
    assert summary["token"]["hit@1"] == 1.0 and summary["phrase"]["hit@5"] == 0.0
    assert summary["all"] == {"needles": 2, "hit@1": 0.5, "hit@5": 0.5}


def test_ece_is_zero_when_scores_match_relevance_rates_and_large_when_overconfident():
    assert expected_calibration_error([0.25] * 4 + [0.85] * 20, [1, 0, 0, 0] + [1] * 17 + [0] * 3) == \
        pytest.approx(0.0, abs=1e-12)
    assert expected_calibration_error([0.95] * 10, [1] + [0] * 9) == pytest.approx(0.85)
    table = reliability([0.05, 0.95, 1.0, 0.0], [0, 1, 1, 0])
    assert [(r["lo"], r["pairs"]) for r in table] == [(0.0, 2), (0.9, 2)]
    assert judged_pairs(["a", "a", "b", "c"], [0.9, 0.8, 0.4, 0.1], {"b": 1}, top=2) == [(0.9, 0), (0.4, 1)]


def test_the_committed_scifact_split_follows_its_rule_and_halves_are_disjoint():
    split = load_split("scifact", "test")
    assert split is not None
    data = json.loads(path_for("scifact", "test").read_text())
    assert data["rule"] == RULE
    assert not set(split.tune) & set(split.heldout) and len(split.tune) == len(split.heldout) == 150
    parts = split.parts(list(split.tune[:3]) + list(split.heldout[:2]) + ["new"])
    assert (len(parts["tune"]), len(parts["heldout"]), len(parts["all"])) == (3, 2, 6)


def test_make_split_is_a_fixed_function_of_the_query_ids(tmp_path):
    root = tmp_path / "scifact"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": "x"}) + "\n" for i in range(4)))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": str(i), "text": "q"}) + "\n" for i in range(10)))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" +
                                             "".join(f"{i}\td{i % 4}\t1\n" for i in range(10)))
    first, second = make_split(load_dataset(root)), make_split(load_dataset(root))
    assert first == second and len(first.tune) == 5 and set(first.tune) | set(first.heldout) == {str(i) for i in range(10)}
