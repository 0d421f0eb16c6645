"""Stored query sets (per tenant, bounded, ids never paths) and background runs (the caller's only,
with progress, bounded concurrency)."""
from __future__ import annotations

import asyncio
import json

import pytest

from services.rag_pipeline.console import query_sets
from services.rag_pipeline.console.query_sets import MAX_SETS, EvalRuns, QuerySets
from shared.errors import InvalidArgument, NotFound, ResourceExhausted


def _raw(i: int) -> bytes:
    return json.dumps({"query": f"query {i}", "relevant": [f"doc-{i}"]}).encode() + b"\n"


def test_a_stored_set_is_listed_and_loaded_in_its_tenant_only(tmp_path):
    sets = QuerySets(tmp_path)
    meta = sets.save("acme", "judged <b>.jsonl", _raw(1), "carol")
    assert meta["queries"] == 1 and meta["name"] == "judged _b_.jsonl"
    assert [m["id"] for m in sets.listed("acme")] == [meta["id"]] and sets.listed("globex") == []
    loaded_meta, queries = sets.load("acme", meta["id"])
    assert loaded_meta == meta and queries[0].query == "query 1"
    with pytest.raises(NotFound):
        sets.load("globex", meta["id"])
    for bad in ("../acme", "x" * 16, meta["id"][:15]):
        with pytest.raises(InvalidArgument):
            sets.load("acme", bad)
    with pytest.raises(InvalidArgument):
        sets.listed("../etc")
    with pytest.raises(InvalidArgument):                      # a set that does not parse is not stored
        sets.save("acme", "bad", b"not json\n", "carol")


def test_a_tenant_keeps_its_newest_sets_only(tmp_path, monkeypatch):
    sets = QuerySets(tmp_path)
    clock = iter(range(1000, 2000))
    monkeypatch.setattr(query_sets.time, "time", lambda: next(clock))
    ids = [sets.save("acme", f"s{i}", _raw(i), "carol")["id"] for i in range(MAX_SETS + 2)]
    assert [m["id"] for m in sets.listed("acme")] == ids[::-1][:MAX_SETS]
    assert len(list((tmp_path / "console" / "query_sets" / "acme").glob("*.jsonl"))) == MAX_SETS


async def test_a_background_run_reports_progress_and_belongs_to_its_caller():
    runs = EvalRuns()
    gate = asyncio.Event()

    async def work(progress):
        progress(1)
        await gate.wait()
        progress(2)
        return {"rows": [], "summary": {"queries": 2}}

    run = runs.start(("acme", "carol"), 2, {"a": "x"}, work)
    await asyncio.sleep(0)
    assert (run.status, run.done) == ("running", 1)
    with pytest.raises(NotFound):
        runs.get(("acme", "alice"), run.run_id)              # another user of the tenant
    with pytest.raises(NotFound):
        runs.get(("acme", "carol"), "../" + run.run_id)
    runs.start(("acme", "carol"), 2, {}, work)
    with pytest.raises(ResourceExhausted):                     # two at once per caller
        runs.start(("acme", "carol"), 2, {}, work)
    gate.set()
    await asyncio.wait_for(run.task, 5)
    assert runs.get(("acme", "carol"), run.run_id).status == "done" and run.result["summary"]["queries"] == 2


async def test_a_failed_run_says_why_without_internals():
    runs = EvalRuns()

    async def broken(progress):
        raise InvalidArgument("a", "no such profile")

    async def crashed(progress):
        raise RuntimeError("/secret/path exploded")

    one, two = runs.start(("t", "u"), 1, {}, broken), runs.start(("t", "v"), 1, {}, crashed)
    await asyncio.gather(one.task, two.task)
    assert one.status == "failed" and "no such profile" in one.error
    assert two.status == "failed" and "secret" not in two.error
