"""The datasets the operator lists for the console: the file checked field by field, a tenant sees
its names only, a form names a dataset by name only (a path or an unknown name refused), the BEIR
queries and qrels read as judged queries."""
from __future__ import annotations

import json

import pytest

from services.rag_pipeline.console.datasets import ConsoleDatasets
from shared.errors import InvalidArgument


@pytest.fixture
def listed(tmp_path):
    folder = tmp_path / "beir" / "tiny"
    (folder / "qrels").mkdir(parents=True)
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"question {q}"}) + "\n"
                                                  for q in ("10", "2", "3", "unjudged")))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n2\td2\t1\n10\td10\t2\n10\td11\t0\n"
                                               "3\td3\t0\n")
    config = tmp_path / "datasets.json"
    config.write_text(json.dumps({"datasets": [
        {"name": "tiny", "folder": "beir/tiny", "tenants": ["acme"]},
        {"name": "everyone", "folder": str(folder), "split": "test", "tenants": ["*"]}]}))
    return ConsoleDatasets.load(config)


def test_a_tenant_sees_and_uses_only_the_names_listed_for_it(listed):
    assert listed.names_for("acme") == ["everyone", "tiny"] and listed.names_for("globex") == ["everyone"]
    dataset, queries, total = listed.queries("acme", "tiny")
    assert total == 2 and [q.query for q in queries] == ["question 2", "question 10"]     # judged ones, natural order
    assert queries[1].grades == {"d10": 2.0} and dataset.split == "test"
    with pytest.raises(InvalidArgument, match="not a dataset listed for this tenant") as err:
        listed.queries("globex", "tiny")                                  # another tenant's name
    assert err.value.field == "dataset" and "everyone" in str(err.value)


@pytest.mark.parametrize("typed", ["/etc", "../beir/tiny", "beir/tiny", "tiny/../../x", "", " tiny", "C:\\data"])
def test_a_path_or_anything_but_a_listed_name_is_refused(listed, typed):
    with pytest.raises(InvalidArgument) as err:
        listed.queries("acme", typed)
    assert err.value.field == "dataset" and ("never a path" in str(err.value) or "not a dataset" in str(err.value))


@pytest.mark.parametrize("entry, field", [
    ({"name": "../x", "folder": "f", "tenants": ["acme"]}, "name"),
    ({"name": "x", "tenants": ["acme"]}, "folder"),
    ({"name": "x", "folder": "f", "split": "../t", "tenants": ["acme"]}, "split"),
    ({"name": "x", "folder": "f", "tenants": []}, "tenants"),
    ({"name": "x", "folder": "f", "tenants": ["acme"], "path": "/"}, "path"),
])
def test_the_operators_file_is_checked_field_by_field(tmp_path, entry, field):
    config = tmp_path / "datasets.json"
    config.write_text(json.dumps({"datasets": [entry]}))
    with pytest.raises(InvalidArgument) as err:
        ConsoleDatasets.load(config)
    assert err.value.field.endswith(f"datasets[0].{field}")
