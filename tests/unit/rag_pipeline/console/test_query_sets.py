"""Stored query sets (per tenant, bounded, ids never paths) and background runs (the caller's only,
with progress, bounded concurrency)."""
from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from services.rag_pipeline.console import query_sets
from services.rag_pipeline.console.query_sets import MAX_SETS, EvalRuns, QuerySets
from shared.errors import InvalidArgument, NotFound, PermissionDenied, ResourceExhausted


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


async def _finished(runs: EvalRuns, owner, i: int):
    async def work(progress):
        progress(1)
        return {"rows": [{"query": f"q{i}", "ndcg_delta": 0.5}], "summary": {"queries": 1}}

    run = runs.start(owner, 1, {"a": "x", "b": "y", "tenant": ""}, work)
    await asyncio.wait_for(run.task, 5)
    return run


async def test_a_finished_run_reads_the_same_after_a_restart_and_stays_its_callers(tmp_path):
    run = await _finished(EvalRuns(tmp_path), ("acme", "carol"), 1)
    again = EvalRuns(tmp_path).get(("acme", "carol"), run.run_id)            # a new process, same data dir
    assert (again.status, again.done, again.total, again.form) == ("done", 1, 1, run.form)
    assert again.result == run.result
    restarted = EvalRuns(tmp_path)
    for other in (("acme", "alice"), ("globex", "carol"), ("", "carol")):
        with pytest.raises(NotFound):
            restarted.get(other, run.run_id)
    folder = tmp_path / "console" / "query_runs" / "acme"
    assert [p.name for p in folder.iterdir()] == [f"{run.run_id}.json"]      # no temporary file left


async def test_a_run_cut_by_a_restart_reads_as_interrupted_never_as_finished(tmp_path):
    runs = EvalRuns(tmp_path)
    gate = asyncio.Event()

    async def work(progress):
        progress(1)
        await gate.wait()
        return {"rows": [], "summary": {"queries": 2}}

    run = runs.start(("", "operator"), 2, {"a": "x"}, work)              # the operator names no tenant
    await asyncio.sleep(0)
    run.task.cancel()                                                     # the process dies mid-run
    with pytest.raises(asyncio.CancelledError):
        await run.task
    after = EvalRuns(tmp_path).get(("", "operator"), run.run_id)
    assert after.status == "interrupted" and after.result is None and after.total == 2
    assert (tmp_path / "console" / "query_runs" / "-" / f"{run.run_id}.json").is_file()


async def test_a_tenant_keeps_its_newest_runs_on_disk_only(tmp_path, monkeypatch):
    monkeypatch.setattr(query_sets, "RUNS_PER_TENANT", 3)
    runs = EvalRuns(tmp_path)
    folder = tmp_path / "console" / "query_runs" / "acme"
    done = [await _finished(runs, ("acme", "carol"), i) for i in range(3)]
    now = time.time()
    for age, run in zip((30, 20, 10), done):                              # the first the oldest
        os.utime(folder / f"{run.run_id}.json", (now - age, now - age))
    os.utime(folder / f"{done[1].run_id}.json", (now - query_sets.RUN_KEEP_S - 60,) * 2)    # past the keeping time
    await _finished(runs, ("globex", "gil"), 9)
    one = await _finished(runs, ("acme", "carol"), 7)
    assert {p.stem for p in folder.glob("*.json")} == {one.run_id, done[2].run_id, done[0].run_id}
    two = await _finished(runs, ("acme", "carol"), 8)                       # the oldest goes
    assert {p.stem for p in folder.glob("*.json")} == {two.run_id, one.run_id, done[2].run_id}
    assert len(list((tmp_path / "console" / "query_runs" / "globex").glob("*.json"))) == 1


def test_a_stored_set_is_deleted_by_its_uploader_or_the_tenants_admin_only(tmp_path):
    sets = QuerySets(tmp_path)
    mine, theirs = sets.save("acme", "mine", _raw(1), "carol"), sets.save("acme", "theirs", _raw(2), "dave")
    with pytest.raises(PermissionDenied):
        sets.delete("acme", theirs["id"], "carol", admin=False)
    with pytest.raises(NotFound):
        sets.delete("globex", mine["id"], "carol", admin=True)           # another tenant holds no such set
    for bad in ("../acme", "x" * 16):
        with pytest.raises(InvalidArgument):
            sets.delete("acme", bad, "carol", admin=True)
    assert sets.delete("acme", mine["id"], "carol", admin=False)["name"] == "mine"
    assert sets.delete("acme", theirs["id"], "ada", admin=True)["name"] == "theirs"
    assert sets.listed("acme") == [] and not list((tmp_path / "console" / "query_sets" / "acme").iterdir())
    with pytest.raises(NotFound):
        sets.load("acme", mine["id"])
