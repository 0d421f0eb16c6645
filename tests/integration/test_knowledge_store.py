"""KnowledgeStore as a real process (gRPC), embedding through the real LlmOrchestration:
ingest, upsert, delete, both searches, filters, tenant isolation with canaries, bad input,
and kill -9 during ingest recovered against the acknowledged writes."""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from services.llm_orchestration.client import LlmOrchestrationClient
from shared.errors import InvalidArgument, NotFound
from tests.support.retrieval import candidates_by_both_legs, candidates_by_filters, candidates_by_vector, candidates_by_vector_with_completion, search_by_filters, search_by_vector

pytestmark = pytest.mark.integration
DAY = 86_400


def start_store(data_dir: Path, llm_target: str, **env_extra: str) -> tuple[subprocess.Popen, str]:
    ready = data_dir / "ks.ready.json"
    ready.unlink(missing_ok=True)
    env = dict(os.environ, NUCLEUS_DATA_DIR=str(data_dir), NUCLEUS_KS_GRPC_PORT="0", NUCLEUS_KS_MCP_PORT="-1", NUCLEUS_KS_DATA_DIR=str(data_dir),
               NUCLEUS_KS_LLM_TARGET=llm_target, **env_extra)
    proc = subprocess.Popen([sys.executable, "-m", "services.knowledge_store.main", "--ready-file", str(ready)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, "knowledge store exited during start-up"
        assert time.monotonic() < deadline, "knowledge store did not start"
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["grpc"]


def doc(artifact_id: str, text: str, **meta) -> DocumentIn:
    return DocumentIn(artifact=ArtifactMeta(artifact_id=artifact_id, title=meta.pop("title", artifact_id), **meta),
                      content=text)


@pytest.fixture(scope="module")
async def store(stack):
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def llm(stack):
    client = LlmOrchestrationClient(stack["llm_orchestration"]["grpc"])
    yield client
    await client.close()


async def test_ingest_then_both_searches_find_the_document(store, llm):
    tenant = "ks-basic"
    now = int(time.time())
    await store.ingest(tenant, "", [
        doc("volcano", "Volcanic eruptions release sulfur dioxide that cools the climate for a year or two.",
            source_type="wiki", modified_unix=now),
        doc("bread", "Sourdough bread rises because wild yeast and lactobacilli ferment the dough.",
            source_type="blog", modified_unix=now),
    ])
    vec = await llm.embed(["why do eruptions cool the planet"])
    dense = (await search_by_vector(store, tenant, vec, 2, SearchFilters()))[0]
    assert dense[0].entry.artifact_id == "volcano"
    assert dense[0].score > dense[1].score
    keyword, terms = await search_by_filters(store, tenant, "sourdough yeast", [], 5, SearchFilters())
    assert keyword[0].entry.artifact_id == "bread"
    assert "sourdough" in terms
    stats = await store.stats(tenant)
    assert stats.artifacts == 2 and stats.entries == stats.vectors == stats.keyword_docs >= 2
    # GetFieldSignals over gRPC: the stored terms per field and the title vectors ingest embedded
    signals = await store.get_field_signals(tenant, ["volcano#0", "bread#0", "nope#0"], "volcanic eruptions",
                                            vec[0])
    assert signals.query_terms == ("volcan", "erupt") and signals.found.tolist() == [True, True, False]
    assert signals.body_tf[:2].tolist() == [[1, 1], [0, 0]] and np.isnan(signals.body_tf[2]).all()
    assert signals.body_positions[0, :2].tolist() == [0, 1] and signals.chunk_position[:2].tolist() == [0, 0]
    titles = await llm.embed(["volcano", "bread"], purpose="document")       # the doc helper's titles
    titles = titles / np.linalg.norm(titles, axis=1, keepdims=True)
    expected = titles @ (vec[0] / np.linalg.norm(vec[0]))
    assert signals.dense_title[:2].tolist() == pytest.approx(expected.tolist(), abs=1e-4)
    assert np.isnan(signals.dense_title[2]) and signals.dense_title[0] > signals.dense_title[1]


async def test_upsert_replaces_old_chunks_in_every_index(store, llm):
    tenant = "ks-upsert"
    await store.ingest(tenant, "", [doc("policy", "The reimbursement ceiling is forty dollars per zeppelin ride.")])
    report = await store.ingest(tenant, "", [doc("policy", "Meals are reimbursed up to sixty euros per day.")])
    assert report.results[0].entries_replaced >= 1
    old, _ = await search_by_filters(store, tenant, "zeppelin", [], 5, SearchFilters())
    assert old == []
    vec = await llm.embed(["reimbursement ceiling zeppelin ride"])
    dense = (await search_by_vector(store, tenant, vec, 5, SearchFilters()))[0]
    assert all("zeppelin" not in h.entry.text for h in dense)
    stats = await store.stats(tenant)
    assert stats.artifacts == 1 and stats.entries == stats.vectors == stats.keyword_docs


async def test_delete_removes_the_artifact_from_every_index(store, llm):
    tenant = "ks-delete"
    await store.ingest(tenant, "", [doc("a", "Quantum gravimeters measure tiny changes in gravity."),
                                     doc("b", "Tide tables list high and low water times.")])
    assert await store.delete(tenant, ["a"]) == (1, 1)
    hits, _ = await search_by_filters(store, tenant, "gravimeters gravity", [], 5, SearchFilters())
    assert [h.entry.artifact_id for h in hits] == []
    vec = await llm.embed(["quantum gravimeter"])
    dense = (await search_by_vector(store, tenant, vec, 5, SearchFilters()))[0]
    assert {h.entry.artifact_id for h in dense} == {"b"}
    stats = await store.stats(tenant)
    assert (stats.artifacts, stats.entries, stats.vectors, stats.keyword_docs) == (1, 1, 1, 1)


async def ingest_solar_corpus(store, tenant: str, base: int) -> None:
    """40 forum notes dated `base`, 5 official inverter guides 30 days later."""
    docs = [doc(f"noise-{i}", f"Solar panel maintenance note number {i}: clean the solar panel surface.",
                source_type="forum", tags=("misc",), owners=("bob",), modified_unix=base) for i in range(40)]
    docs += [doc(f"match-{i}", f"Solar panel inverter guide {i}: reset the inverter after a fault.",
                 source_type="official-docs", tags=("inverter",), owners=("alice",),
                 modified_unix=base + 30 * DAY) for i in range(5)]
    await store.ingest(tenant, "", docs)


async def test_filters_apply_inside_the_search_and_still_fill_k(store, llm):
    tenant = "ks-filters"
    base = 1_700_000_000
    await ingest_solar_corpus(store, tenant, base)
    vec = await llm.embed(["solar panel"])
    for filters in (SearchFilters(source_types=("official-docs",)), SearchFilters(tags=("inverter",)),
                    SearchFilters(owners=("alice",)), SearchFilters(date_from_unix=base + DAY),
                    SearchFilters(artifact_ids=tuple(f"match-{i}" for i in range(5)))):
        dense = (await search_by_vector(store, tenant, vec, 5, filters))[0]
        keyword, _ = await search_by_filters(store, tenant, "solar panel", [], 5, filters)
        for hits in (dense, keyword):
            assert len(hits) == 5, filters
            assert all(h.entry.artifact_id.startswith("match-") for h in hits), filters


async def test_candidate_columns_carry_the_same_ranking_as_hits_and_each_entrys_signals(store, llm):
    """The cheap candidate transfer RAGPipeline uses must agree with the full hits: same
    entries in the same order with the same scores, and the signals ranking needs."""
    tenant = "ks-columns"
    await ingest_solar_corpus(store, tenant, 1_700_000_000)
    vec = await llm.embed(["solar panel inverter", "clean the surface"])
    for filters in (SearchFilters(), SearchFilters(source_types=("official-docs",))):
        hits = await search_by_vector(store, tenant, vec, 20, filters)
        columns = await candidates_by_vector(store, tenant, vec, 20, filters)
        assert len(hits) == len(columns) == 2
        keyword, terms = await search_by_filters(store, tenant, "solar inverter", ["fault"], 20, filters)
        keyword_columns, column_terms = await candidates_by_filters(store, tenant, "solar inverter", ["fault"], 20,
                                                                          filters)
        assert terms == column_terms
        for leg_hits, leg_columns in [*zip(hits, columns), (keyword, keyword_columns)]:
            assert len(leg_hits) > 0
            assert list(leg_columns.entry_ids) == [h.entry.id for h in leg_hits]
            assert list(leg_columns.artifact_ids) == [h.entry.artifact_id for h in leg_hits]
            assert np.allclose(leg_columns.scores, [h.score for h in leg_hits], atol=1e-6)
            assert leg_columns.timestamps_unix.tolist() == [
                h.entry.timestamp_unix or h.artifact.modified_unix or h.artifact.created_unix for h in leg_hits]
            assert np.allclose(leg_columns.richness, [h.entry.richness for h in leg_hits])
            assert np.allclose(leg_columns.reputation_prior, [h.artifact.reputation_prior for h in leg_hits])
            assert leg_columns.feedback_helpful.tolist() == [h.artifact.feedback_helpful for h in leg_hits]
    official = await candidates_by_vector(store, tenant, vec, 20, SearchFilters(source_types=("official-docs",)))
    assert all(a.startswith("match-") for a in official[0].artifact_ids) and len(official[0]) == 5
    with pytest.raises(InvalidArgument, match="top_k"):
        await candidates_by_vector(store, tenant, vec, 0, SearchFilters())
    with pytest.raises(NotFound):
        await candidates_by_filters(store, "never-written", "x", [], 5, SearchFilters())


def assert_same_columns(a, b) -> None:
    assert list(a.entry_ids) == list(b.entry_ids) and list(a.artifact_ids) == list(b.artifact_ids)
    for name in ("scores", "timestamps_unix", "richness", "reputation_prior", "feedback_helpful",
                 "feedback_unhelpful", "row_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


async def test_both_legs_in_one_call_answer_exactly_what_the_two_calls_answer(store, llm, stack):
    """RetrieveRequest with keyword_leg and query_vectors: the keyword leg's columns and terms, the vector
    leg's columns and the completion of both legs' rows, as the two separate calls give them."""
    tenant = "ks-both-legs"
    await ingest_solar_corpus(store, tenant, 1_700_000_000)
    vec = await llm.embed(["solar inverter fault", "inverter shows an error"])
    cases = [("solar inverter", ["fault"], SearchFilters()),
             ("solar inverter", ["fault"], SearchFilters(source_types=("official-docs",))),
             ("zzzunknownword", [], SearchFilters())]          # a keyword leg that finds nothing
    for keywords, extra, filters in cases:
        keyword, terms, dense, completion = await candidates_by_both_legs(store, 
            tenant, vec, 20, filters, keywords=keywords, extra_keywords=extra)
        keyword_alone, terms_alone = await candidates_by_filters(store, tenant, keywords, extra, 20, filters)
        dense_alone, completion_alone = await candidates_by_vector_with_completion(store, 
            tenant, vec, 20, filters, keywords=keywords, extra_keywords=extra, complete_rows=keyword_alone.row_ids)
        assert terms == terms_alone
        assert_same_columns(keyword, keyword_alone)
        assert len(dense) == len(dense_alone) == 2 and len(dense[0]) > 0
        for one, alone in zip(dense, dense_alone):
            assert_same_columns(one, alone)
        assert np.array_equal(completion.row_ids, completion_alone.row_ids)
        assert np.array_equal(completion.dense, completion_alone.dense, equal_nan=True)
        assert np.array_equal(completion.bm25, completion_alone.bm25, equal_nan=True)
        assert completion.keyword_stats == completion_alone.keyword_stats
        if keywords == "zzzunknownword":
            assert len(keyword) == 0 and len(completion) > 0
        else:
            assert len(keyword) > 0 and set(keyword.row_ids.tolist()) <= set(completion.row_ids.tolist())
    with pytest.raises(NotFound):
        await candidates_by_both_legs(store, "never-written", vec, 5, SearchFilters(), keywords="x")
    with pytest.raises(InvalidArgument, match="top_k"):
        await candidates_by_both_legs(store, tenant, vec, 0, SearchFilters(), keywords="solar")
    from nucleus.v1 import knowledge_store_pb2 as ks_pb
    from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc

    async with grpc.aio.insecure_channel(stack["knowledge_store"]["grpc"]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ks_grpc.KnowledgeStoreStub(channel).Retrieve(ks_pb.RetrieveRequest(
                tenant_id=tenant, top_k=5, complete_scores=True, keyword_leg=True,
                keywords="solar", complete_row_ids=[1], query_vectors=[ks_pb.FloatVector(values=vec[0].tolist())]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "complete_row_ids" in err.value.details()


async def test_tenant_isolation_with_canaries_on_both_legs(store, llm):
    tenants = [f"iso-{i}" for i in range(6)]
    for t in tenants:
        await store.ingest(t, "", [doc(f"canary-{t}", f"Canary phrase zebra-{t} mango telescope for {t}."),
                                   doc(f"common-{t}", "Shared words: mango telescope observatory.")])
    vec = await llm.embed(["mango telescope canary zebra"])
    for t in tenants:
        dense = (await search_by_vector(store, t, vec, 50, SearchFilters()))[0]
        keyword, _ = await search_by_filters(store, t, "canary zebra mango telescope", [], 50, SearchFilters())
        seen = {h.entry.artifact_id for h in dense + keyword}
        assert seen == {f"canary-{t}", f"common-{t}"}, (t, seen)
        columns = (await candidates_by_vector(store, t, vec, 50, SearchFilters()))[0]
        keyword_columns, _ = await candidates_by_filters(store, t, "canary zebra mango telescope", [], 50,
                                                               SearchFilters())
        assert set(columns.artifact_ids) | set(keyword_columns.artifact_ids) == seen, t
        assert all(h.entry.tenant_id == t for h in dense + keyword)


async def test_bad_input_is_refused_and_nothing_is_written(store, llm):
    tenant = "ks-bad"
    await store.ingest(tenant, "", [doc("ok", "A valid first document about lighthouses.")])
    before = await store.stats(tenant)
    cases = [
        ("", [doc("x", "text")], "tenant"),
        (tenant, [doc("good", "fine text"), doc("empty", "   ")], "documents[1]"),
        (tenant, [doc("dup", "first"), doc("dup", "second")], "documents[1].artifact.artifact_id"),
        (tenant, [DocumentIn(artifact=ArtifactMeta(artifact_id=""), content="no id")], "artifact_id"),
        (tenant, [DocumentIn(artifact=ArtifactMeta(artifact_id="t"), content="x", content_type="application/pdf")],
         "content_type"),
    ]
    for t, docs, field in cases:
        with pytest.raises(InvalidArgument) as err:
            await store.ingest(t, "", docs)
        assert field in str(err.value), (field, str(err.value))
    with pytest.raises(InvalidArgument) as err:
        await search_by_vector(store, tenant, np.ones((1, 12), np.float32), 5, SearchFilters())
    assert "384" in str(err.value) and "12" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        await search_by_filters(store, tenant, "x", [], 5, SearchFilters(date_from_unix=10, date_to_unix=5))
    assert "date" in str(err.value)
    with pytest.raises(NotFound):
        await search_by_filters(store, "never-written", "x", [], 5, SearchFilters())
    after = await store.stats(tenant)
    assert (after.artifacts, after.entries, after.vectors) == (before.artifacts, before.entries, before.vectors)


def _crash_doc(i: int) -> DocumentIn:
    # ~3 chunks each, so a half-written artifact would show as a short chunk count.
    body = "\n\n".join(f"## Part {p}\n" + " ".join(f"crashword{i}x{p}y{w}" for w in range(150)) for p in range(3))
    return DocumentIn(artifact=ArtifactMeta(artifact_id=f"crash-{i}", title=f"Crash doc {i}"), content=body,
                      content_type="text/markdown")


async def _ingest_until_killed(target: str, acked: list[str], attempted: list[str], start: int) -> None:
    client = KnowledgeStoreClient(target, ingest_timeout_s=30)
    try:
        i = start
        while True:
            attempted.append(f"crash-{i}")
            try:
                await client.ingest("crash", "", [_crash_doc(i)])
            except Exception:  # noqa: BLE001 - the process was killed under us
                return
            acked.append(f"crash-{i}")
            i += 1
    finally:
        await client.close()


@pytest.mark.slow
async def test_kill_9_during_ingest_recovers_exactly_the_acknowledged_writes(tmp_path, stack):
    llm_target = stack["llm_orchestration"]["grpc"]
    acked: list[str] = []
    attempted: list[str] = []
    rng = random.Random(7)
    for round_ in range(3):
        proc, target = start_store(tmp_path, llm_target)
        acked_before = len(acked)
        task = asyncio.create_task(_ingest_until_killed(target, acked, attempted, start=len(attempted)))
        deadline = time.monotonic() + 60
        while len(acked) == acked_before and not task.done():   # at least one ack per round
            assert time.monotonic() < deadline, "no ingest was acknowledged"
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.random() * 1.0)   # then kill at a random moment
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        await asyncio.wait_for(task, timeout=30)

    proc, target = start_store(tmp_path, llm_target)
    client = KnowledgeStoreClient(target)
    try:
        stats = await client.stats("crash")
        assert stats.entries == stats.vectors == stats.keyword_docs, stats
        present: dict[str, int] = {}
        for artifact_id in attempted:
            hits, _ = await search_by_filters(client, "crash", "", [], 100, SearchFilters(artifact_ids=(artifact_id,)))
            if hits:
                present[artifact_id] = len(hits)
        assert set(acked) <= set(present), f"lost acknowledged writes: {sorted(set(acked) - set(present))}"
        unacked_present = set(present) - set(acked)
        assert len(unacked_present) <= 3, unacked_present   # at most the one in flight per kill
        counts = set(present.values())
        assert len(counts) == 1, f"half-written artifacts: {present}"
        assert stats.artifacts == len(present)
        assert len(acked) >= 3, "the test must have acknowledged some writes before the kills"
    finally:
        await client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


async def test_a_batch_with_commit_valid_commits_the_good_documents_and_reports_the_bad_by_index(store):
    tenant = "commitvalid"
    report = await store.ingest(tenant, "", [doc("cv-good", "Narwhals use their tusks to sense salinity."),
                                             doc("cv-empty", " "), doc("cv-good-2", "Capybaras are social rodents.")],
                                commit_valid=True)
    assert [(r.index, r.artifact_id) for r in report.results] == [(0, "cv-good"), (2, "cv-good-2")]
    assert [(r.index, r.artifact_id, r.field) for r in report.rejected] == [(1, "cv-empty", "documents[1].content")]
    hits, _ = await search_by_filters(store, tenant, "narwhals capybaras", [], 10, SearchFilters())
    assert {h.entry.artifact_id for h in hits} == {"cv-good", "cv-good-2"}
    with pytest.raises(InvalidArgument):                # without it, the batch is all-or-nothing
        await store.ingest(tenant, "", [doc("cv-3", "Okapis."), doc("cv-empty", "")])


async def test_nucleus_ingest_of_a_mixed_folder_ingests_the_good_files_and_exits_non_zero(store, stack, tmp_path):
    from benchmarks.sample_files import write_broken_folder, write_good_folder
    from tests.support.processes import run_cli

    def main(argv: list[str]) -> int:          # the CLI runs its own event loop: a process of its own
        return run_cli(argv).returncode

    titles = write_good_folder(tmp_path / "docs")
    write_broken_folder(tmp_path / "docs" / "broken")
    argv = ["--data-dir", str(tmp_path / "cli-data"), "ingest", str(tmp_path / "docs"), "--tenant", "cli-folder",
            "--knowledge-store-target", stack["knowledge_store"]["grpc"]]
    assert await asyncio.to_thread(main, argv) == 2, "rejected files make the exit code non-zero"
    hits, _ = await search_by_filters(store, "cli-folder", "pelican quokka narwhal gyro lighthouse walrus cormorant "
                                            "brûlée ocelot heron", [], 50, SearchFilters())
    assert {h.entry.artifact_id: h.artifact.title for h in hits} == titles
    assert await asyncio.to_thread(main, argv + ["--strict"]) == 2
    (tmp_path / "docs" / "broken").rename(tmp_path / "elsewhere")
    assert await asyncio.to_thread(main, argv + ["--sync"]) == 0, "unchanged good files, nothing rejected"


async def test_nucleus_ingest_of_a_long_sheet_reports_truncated_and_a_kill_after_its_progress_keeps_one_version(
        stack, tmp_path):
    """`nucleus ingest` of a 3,000-row sheet against a 2,000-row limit, on a KnowledgeStore of its
    own: `truncated` with the count (`--strict`: rejected), rows before the limit searchable by their
    identifiers; then a new version of the sheet, and a kill -9 of that KnowledgeStore alone once the
    CLI shows its first progress line: the report never comes (progress arrives before it), and the
    restarted store holds the previous version or the whole new one."""
    from benchmarks.sample_files import write_long_sheet
    from tests.support.processes import read_until, run_cli, start_cli

    (tmp_path / "ks").mkdir()
    batch = {"NUCLEUS_KS_EMBED_BATCH_SIZE": "8"}                # progress every 8 entries
    proc, target = start_store(tmp_path / "ks", stack["llm_orchestration"]["grpc"], **batch)
    sheet = tmp_path / "sheets" / "ledger.xlsx"
    sheet.parent.mkdir()
    write_long_sheet(sheet, rows=3000, columns=2)
    argv = ["--data-dir", str(tmp_path / "cli-data"), "ingest", str(sheet.parent), "--tenant", "cli-sheets",
            "--knowledge-store-target", target]
    limit = {"NUCLEUS_INGEST_MAX_SHEET_ROWS": "2000"}
    left_out = "1000 rows of sheet 'Ledger' left out (at most 2000 data rows per sheet"
    client = KnowledgeStoreClient(target)
    try:
        strict = await asyncio.to_thread(run_cli, argv + ["--strict"], env=limit)
        assert strict.returncode == 2, strict.stdout + strict.stderr
        assert f"rejected truncated: {sheet}: {left_out}" in " ".join(strict.stdout.split())

        done = await asyncio.to_thread(run_cli, argv, env=limit)
        assert done.returncode == 0, done.stdout + done.stderr
        out = " ".join(done.stdout.split())
        assert f"truncated {sheet}: {left_out}" in out
        assert re.search(r"ingest 1 files, (\d+)/\1 entries embedded", out), out   # the streamed progress
        assert re.search(r"\btruncated\W+1\W+1\W", out), out                   # the table: 1 file, 1 document
        [run] = json.loads((tmp_path / "cli-data" / "ingest_runs" / "cli-sheets.json").read_text())["runs"][:1]
        assert run["counts"] == {"truncated": 1} and left_out in run["files"][0]["detail"]
        hits, _ = await search_by_filters(client, "cli-sheets", "r1999c2", [], 5, SearchFilters())
        assert [h.entry.artifact_id for h in hits][:1] == ["ledger"] and "r1999c2" in hits[0].entry.text
        hits, _ = await search_by_filters(client, "cli-sheets", "r2001c1", [], 5, SearchFilters())
        assert hits == [], "rows past the limit are not stored"
        first = (await client.stats("cli-sheets")).entries

        write_long_sheet(sheet, rows=3000, columns=2, version="s")
        cli = start_cli(argv, env=limit)
        shown, progress = await asyncio.to_thread(read_until, cli, r"([\d,]+)/([\d,]+) entries embedded")
        assert progress is not None, shown
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        rest = (await asyncio.to_thread(cli.communicate, timeout=120))[0].decode(errors="replace")
        assert cli.returncode != 0, shown + rest                    # killed before its report
        second = int(progress[2].replace(",", ""))
    finally:
        await client.close()
    proc, target = start_store(tmp_path / "ks", stack["llm_orchestration"]["grpc"], **batch)
    client = KnowledgeStoreClient(target)
    try:
        stats = await client.stats("cli-sheets")
        hits, _ = await search_by_filters(client, "cli-sheets", "", [], 500, SearchFilters(artifact_ids=("ledger",)))
        versions = {v for h in hits for v in re.findall(r"\b([rs])\d+c\d", h.entry.text)}
        assert (versions, len(hits)) in [({"r"}, first), ({"s"}, second)], (versions, len(hits), first, second)
        assert stats.entries == stats.vectors == stats.keyword_docs == len(hits)
    finally:
        await client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
