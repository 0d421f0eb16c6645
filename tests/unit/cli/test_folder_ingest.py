"""Folder ingest against the real KnowledgeStore core (SQLite + FAISS in a tmp dir): an outcome
per file, the manifest (only new or changed files), --sync, --strict, large files, --watch."""
from __future__ import annotations

import asyncio
import os

import pytest

from cli.folder_ingest import FAILED, INGESTED, REMOVED, TRUNCATED, UNCHANGED, FolderIngest, watch
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.documents.manifest import Manifest, manifest_path
from shared.errors import NotFound
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for
from benchmarks.sample_files import CREATED, write_broken_folder, write_good_folder, write_long_sheet
from shared.documents.limits import Limits

F = SearchFilters()


@pytest.fixture
def store(tmp_path):
    ks = KnowledgeStore(settings_for(tmp_path / "store"), HashEmbedder())
    yield ks
    ks.close()


def run(store, root, state, **kw) -> FolderIngest:
    manifest = Manifest.load(manifest_path(state, "t", root), root)
    return FolderIngest(store, root, "t", manifest=manifest, **kw)


async def search(store, words: str) -> dict[str, object]:
    try:
        hits, _ = await store.keyword("t", words, [], 50, F, hits=True)
    except NotFound:                    # nothing ingested for the tenant yet
        return {}
    return {h.entry.artifact_id: h for h in hits}


async def test_every_good_file_is_ingested_and_every_broken_one_reported_with_its_reason(store, tmp_path):
    root = tmp_path / "docs"
    titles = write_good_folder(root)
    reasons = write_broken_folder(root / "broken")
    summary = await run(store, root, tmp_path / "state").run()
    failed = {os.path.basename(o.path): o.reason for o in summary.failed}
    assert failed == reasons
    assert summary.count(INGESTED) == 9 and summary.count(FAILED) == len(reasons)
    found = await search(store, "pelican quokka narwhal gyro lighthouse walrus cormorant brûlée ocelot heron")
    assert {a: h.artifact.title for a, h in found.items()} == titles
    pdf = found["handbook"]
    assert pdf.entry.headline == "Page 2" and "pelican" in pdf.entry.text
    assert pdf.entry.timestamp_unix == int(CREATED.timestamp())
    assert (await store.stats("t")).artifacts == len(titles)


async def test_a_rerun_ingests_only_changes_and_sync_removes_gone_files(store, tmp_path):
    root, state = tmp_path / "docs", tmp_path / "state"
    write_good_folder(root)
    first = await run(store, root, state).run()
    assert first.count(INGESTED) == 9
    again = await run(store, root, state).run()
    assert again.count(UNCHANGED) == 9 and again.count(INGESTED) == 0
    (root / "plain.txt").write_text("Plain text about the flamingo schedule.\n")
    (root / "records.jsonl").write_text('{"id": "faq-1", "text": "Badges come from the lynx desk."}\n')
    (root / "notes.md").unlink()
    changed = await run(store, root, state).run()
    assert sorted(os.path.basename(o.path) for o in changed.outcomes if o.status == INGESTED) == \
        ["plain.txt", "records.jsonl"]
    found = await search(store, "flamingo cormorant lynx heron walrus")
    assert set(found) == {"plain", "faq-1", "notes-2024"}, "records-2 went with its line; notes stay without sync"
    synced = await run(store, root, state, sync=True).run()
    assert [os.path.basename(o.path) for o in synced.outcomes if o.status == REMOVED] == ["notes.md"]
    assert "notes-2024" not in await search(store, "walrus")
    assert (await store.stats("t")).artifacts == 8


async def test_strict_stops_at_the_first_rejected_file(store, tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("Alpha about albatrosses.\n")
    (root / "b.md").write_text("")
    (root / "c.md").write_text("Gamma about gannets.\n")
    summary = await run(store, root, tmp_path / "state", strict=True).run()
    assert [(os.path.basename(o.path), o.status) for o in summary.outcomes] == [("b.md", FAILED), ("a.md", INGESTED)]
    assert set(await search(store, "albatrosses gannets")) == {"a"}


async def test_a_sheet_cut_short_by_the_row_limit_is_truncated_and_strict_rejects_it(store, tmp_path):
    root, state = tmp_path / "docs", tmp_path / "state"
    root.mkdir()
    write_long_sheet(root / "ledger.xlsx", rows=30, columns=2)
    limits = Limits(max_sheet_rows=20)
    left_out = "10 rows of sheet 'Ledger' left out (at most 20 data rows per sheet"
    strict = await run(store, root, state, strict=True, limits=limits, isolate=False).run()
    assert [(o.status, o.reason) for o in strict.outcomes] == [(FAILED, TRUNCATED)]
    assert left_out in strict.outcomes[0].detail and not await search(store, "r20c2")
    summary = await run(store, root, state, limits=limits, isolate=False).run()
    assert [(o.status, o.reason) for o in summary.outcomes] == [(TRUNCATED, TRUNCATED)]
    assert left_out in summary.outcomes[0].detail and summary.outcomes[0].entries > 0
    assert set(await search(store, "r20c2")) == {"ledger"}



async def test_strict_also_stops_at_the_first_document_the_store_refuses(tmp_path):
    ks = KnowledgeStore(settings_for(tmp_path / "store", max_document_chars=200), HashEmbedder())
    try:
        root = tmp_path / "docs"
        root.mkdir()
        (root / "a.md").write_text("Alpha about albatrosses. " * 20)      # 500 characters: refused
        (root / "b.md").write_text("Beta about boobies.\n")
        (root / "c.md").write_text("Gamma about gannets.\n")
        (root / "d.md").write_text("Delta about dippers.\n")
        summary = await run(ks, root, tmp_path / "state", strict=True, batch_docs=2).run()
        assert [(os.path.basename(o.path), o.status, o.reason) for o in summary.outcomes] == \
            [("a.md", FAILED, "refused by the store"), ("b.md", INGESTED, "")], \
            "the rest of a's request is committed, no later file is sent"
        assert set(await search(ks, "albatrosses boobies gannets dippers")) == {"b"}
        manifest = Manifest.load(manifest_path(tmp_path / "state", "t", root), root)
        assert sorted(manifest.files) == ["b.md"]
        whole = await run(ks, root, tmp_path / "state").run()                # without --strict: every file
        assert sorted((os.path.basename(o.path), o.status) for o in whole.outcomes) == \
            [("a.md", FAILED), ("b.md", UNCHANGED), ("c.md", INGESTED), ("d.md", INGESTED)]
    finally:
        ks.close()


async def test_strict_does_not_count_a_file_whose_documents_were_not_all_sent(tmp_path):
    ks = KnowledgeStore(settings_for(tmp_path / "store", max_document_chars=200), HashEmbedder())
    try:
        root = tmp_path / "docs"
        root.mkdir()
        (root / "a.md").write_text("Alpha about albatrosses. " * 20)      # refused, in the first request
        (root / "b.jsonl").write_text("".join(f'{{"text": "Line {i} about boobies."}}\n' for i in range(3)))
        summary = await run(ks, root, tmp_path / "state", strict=True, batch_docs=2).run()
        assert [(os.path.basename(o.path), o.status) for o in summary.outcomes] == [("a.md", FAILED)], \
            "b-2 and b-3 were never sent, so b.jsonl is neither ingested nor recorded"
        assert not Manifest.load(manifest_path(tmp_path / "state", "t", root), root).files
    finally:
        ks.close()

async def test_files_sharing_an_id_are_not_silently_merged(store, tmp_path):
    root = tmp_path / "docs"
    for folder, word in (("one", "kiwi"), ("two", "kakapo")):
        (root / folder).mkdir(parents=True)
        (root / folder / "index.md").write_text(f"About the {word}.\n")
    summary = await run(store, root, tmp_path / "state").run()
    assert [o.reason for o in summary.failed] == ["duplicate id"]
    assert "one/index.md" in summary.failed[0].detail


async def test_a_large_file_is_chunked_across_bounded_requests_not_refused(store, tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.txt").write_text("\n\n".join(f"Section {i}: the ibis ledger entry number {i}." for i in range(90_000)))
    (root / "small.md").write_text("A small note on ibises.\n")
    assert (root / "big.txt").stat().st_size > 4_000_000
    summary = await run(store, root, tmp_path / "state", batch_chars=100_000).run()
    assert summary.count(INGESTED) == 2 and not summary.failed
    assert [o.entries > 500 for o in summary.outcomes] == [True, False]


async def test_watch_reflects_added_changed_and_deleted_files_and_resumes_from_the_manifest(store, tmp_path):
    root, state = tmp_path / "docs", tmp_path / "state"
    root.mkdir()
    (root / "one.md").write_text("The first note mentions marmots.\n")
    passes: asyncio.Queue = asyncio.Queue()
    stop = asyncio.Event()

    async def until(predicate, what: str) -> None:
        async def loop():
            while not await predicate():
                await passes.get()
        try:
            await asyncio.wait_for(loop(), timeout=20)
        except TimeoutError:
            pytest.fail(f"watch did not reflect: {what}")

    async def found(words):
        try:
            return set(await search(store, words))
        except NotFound:                    # before the first pass created the tenant
            return set()

    task = asyncio.create_task(watch(lambda: run(store, root, state, sync=True), root,
                                     on_pass=passes.put_nowait, stop=stop, debounce_ms=100))
    try:
        await until(lambda: _eq(found("marmots"), {"one"}), "the initial pass")
        (root / "two.md").write_text("The second note mentions beavers.\n")
        await until(lambda: _eq(found("beavers"), {"two"}), "an added file")
        (root / "one.md").write_text("The first note now mentions otters.\n")
        await until(lambda: _eq(found("otters"), {"one"}), "a changed file")
        assert "one" not in await search(store, "marmots")
        (root / "two.md").unlink()
        await until(lambda: _eq(found("beavers"), set()), "a deleted file")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=20)
    # a watcher killed while a file was added resumes from the manifest at its next start
    (root / "three.md").write_text("The third note mentions lemmings.\n")
    restarted = await run(store, root, state, sync=True).run()
    assert [os.path.basename(o.path) for o in restarted.outcomes if o.status == INGESTED] == ["three.md"]
    assert restarted.count(UNCHANGED) == 1


async def _eq(awaitable, expected) -> bool:
    return await awaitable == expected
