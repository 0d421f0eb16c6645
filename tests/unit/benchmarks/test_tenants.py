"""Tenant planning and the skip-what-is-done ingest, against the real KnowledgeStore core
(in-process, hash embedding function: the test is about bookkeeping, not vectors)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.beir import load_dataset
from benchmarks.tenants import Manifest, ingest_plan, plan_tenants
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.errors import InvalidArgument
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for


def _dataset(root: Path, n_docs: int = 10):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": f"Doc {i}", "text": f"body of document number {i} word{i}"}) + "\n"
        for i in range(n_docs)))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"word{i}"}) + "\n"
                                                for i in range(3)))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq1\td2\t1\n"
                                             "q2\td3\t0\n")
    return load_dataset(root)


def test_one_slice_is_the_whole_corpus_under_the_tenant_name(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    [plan] = plan_tenants([(ds, "t")], 1)
    assert plan.tenant == "t" and plan.rows == tuple(range(10))
    assert plan.query_ids == ["q0", "q1"]


def test_slices_partition_the_corpus_and_restrict_queries_and_qrels(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    plans = plan_tenants([(ds, "t")], 3)
    assert [p.tenant for p in plans] == ["t-s1of3", "t-s2of3", "t-s3of3"]
    rows = [r for p in plans for r in p.rows]
    assert sorted(rows) == list(range(10)) and len(set(rows)) == 10
    first, second, third = plans
    assert first.doc_ids == ["d0", "d3", "d6", "d9"]
    assert first.query_ids == ["q0"]                   # d3 of q2 is judged 0: not relevant
    assert second.query_ids == ["q1"] and third.query_ids == ["q1"]
    assert second.qrels()["q1"] == {"d1": 1} and third.qrels()["q1"] == {"d2": 1}


def test_bad_tenant_plans_are_rejected(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    with pytest.raises(InvalidArgument, match="named twice"):
        plan_tenants([(ds, "t"), (ds, "t")], 1)
    with pytest.raises(InvalidArgument, match="not a tenant id"):
        plan_tenants([(ds, "bad tenant!")], 1)
    with pytest.raises(InvalidArgument, match="slices"):
        plan_tenants([(ds, "t")], 11)
    with pytest.raises(InvalidArgument, match=">= 1"):
        plan_tenants([(ds, "t")], 0)


@pytest.fixture
async def store(tmp_path: Path):
    ks = KnowledgeStore(settings_for(tmp_path / "ks"), HashEmbedder())
    yield ks
    ks.close()


async def test_ingest_sends_everything_once_then_skips(tmp_path: Path, store) -> None:
    [plan] = plan_tenants([(_dataset(tmp_path / "ds"), "t")], 1)
    seen = []
    first = await ingest_plan(store, plan, tmp_path / "manifests", batch=4, progress=lambda d, t: seen.append((d, t)))
    assert first.ingested_now == 10 and first.skipped == 0 and first.measured_now
    assert first.tenant_artifacts == 10 and first.docs_per_s > 0 and not first.warnings
    assert seen[-1] == (10, 10)
    again = await ingest_plan(store, plan, tmp_path / "manifests", batch=4)
    assert again.ingested_now == 0 and again.skipped == 10 and not again.measured_now
    assert again.docs_per_s == pytest.approx(first.docs_per_s)     # the earlier measurement


async def test_an_interrupted_ingest_resumes_where_the_manifest_stops(tmp_path: Path, store) -> None:
    [plan] = plan_tenants([(_dataset(tmp_path / "ds"), "t")], 1)
    await ingest_plan(store, plan, tmp_path / "manifests", batch=4)
    manifest = Manifest(tmp_path / "manifests" / "t.json")
    await store.delete("t", manifest.data["doc_ids"][6:])           # as if the last batch never landed
    manifest.data["doc_ids"] = manifest.data["doc_ids"][:6]
    manifest.save()
    resumed = await ingest_plan(store, plan, tmp_path / "manifests", batch=4)
    assert resumed.ingested_now == 4 and resumed.skipped == 6 and resumed.tenant_artifacts == 10


async def test_a_manifest_the_store_contradicts_is_not_trusted(tmp_path: Path, store) -> None:
    [plan] = plan_tenants([(_dataset(tmp_path / "ds"), "t")], 1)
    await ingest_plan(store, plan, tmp_path / "manifests", batch=4)
    await store.delete("t", ["d0", "d1"])                           # data lost behind the manifest's back
    outcome = await ingest_plan(store, plan, tmp_path / "manifests", batch=4)
    assert outcome.ingested_now == 10 and outcome.tenant_artifacts == 10
    assert any("re-ingesting" in w for w in outcome.warnings)


async def test_documents_no_longer_planned_are_deleted(tmp_path: Path, store) -> None:
    ds = _dataset(tmp_path / "ds")
    [whole] = plan_tenants([(ds, "t")], 1)
    await ingest_plan(store, whole, tmp_path / "manifests", batch=4)
    smaller = type(whole)(tenant="t", dataset=ds, rows=tuple(range(5)))
    outcome = await ingest_plan(store, smaller, tmp_path / "manifests", batch=4)
    assert outcome.deleted_stale == 5 and outcome.ingested_now == 0 and outcome.tenant_artifacts == 5
