"""A folder of hostile and broken files next to good ones, through FolderIngest into the real
KnowledgeStore core: every good file is ingested, every bad one listed with file, line where
there is one, and reason; folder files get a citable source_uri from the folder's base URL
(PDF citations keep their page); removals are reported by the folder's own relative path."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.hostile_files import write_hostile_folder
from benchmarks.sample_files import write_good_folder
from cli.folder_ingest import FAILED, INGESTED, REMOVED, UNCHANGED, FolderIngest
from cli.ingest import watch_lines
from services.knowledge_store.embedded.core import KnowledgeStore
from services.rag_pipeline.tools.convert import http_uri
from shared.documents.limits import Limits
from shared.documents.manifest import Manifest, manifest_path
from shared.documents.pages import cite_uri
from shared.errors import InvalidArgument
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for

SMALL = Limits(max_entry_mb=4, max_archive_mb=8, max_pdf_stream_mb=4, memory_mb=512, timeout_s=60)
BASE = "https://files.example/team-docs/"


@pytest.fixture
def store(tmp_path):
    ks = KnowledgeStore(settings_for(tmp_path / "store"), HashEmbedder())
    yield ks
    ks.close()


def run(store, root: Path, state: Path, isolate: bool = False, **kw) -> FolderIngest:
    """In-process conversion unless `isolate` (the worker is the hostile folder's concern)."""
    return FolderIngest(store, root, "t", manifest=Manifest.load(manifest_path(state, "t", root), root),
                        limits=SMALL, isolate=isolate, **kw)


async def test_a_hostile_folder_ingests_every_good_file_and_lists_every_bad_one(store, tmp_path):
    root = tmp_path / "docs"
    titles = write_good_folder(root)
    expected = write_hostile_folder(root / "hostile", inflate_mb=16)
    summary = await run(store, root, tmp_path / "state", base_url=BASE, isolate=True).run()
    failed = {os.path.basename(o.path): o for o in summary.failed}
    assert set(failed) == set(expected)
    for name, (reason, words) in expected.items():
        assert failed[name].reason == reason, (name, failed[name])
        assert words in failed[name].detail and failed[name].detail.startswith(str(root / "hostile" / name)), \
            (name, failed[name].detail)
    assert summary.count(INGESTED) == 9
    hits, _ = await store.keyword("t", "pelican walrus cormorant", [], 50, SearchFilters(), hits=True)
    found = {h.entry.artifact_id: h for h in hits}
    assert {"handbook", "notes-2024", "plain"} <= set(found)
    assert (await store.stats("t")).artifacts == len(titles)
    # a folder PDF's citation: the base URL + its path, pointed at the page (never file://)
    pdf = found["handbook"]
    assert pdf.artifact.source_uri == "https://files.example/team-docs/handbook.pdf"
    assert http_uri(cite_uri(pdf.artifact.source_uri, pdf.entry.headline, pdf.artifact.file_type)) \
        == "https://files.example/team-docs/handbook.pdf#page=2"
    assert found["notes-2024"].artifact.source_uri == "https://files.example/team-docs/notes.md"


async def test_the_base_url_is_remembered_and_a_new_one_reingests_every_file(store, tmp_path):
    root, state = tmp_path / "docs", tmp_path / "state"
    root.mkdir()
    (root / "a.md").write_text("Alpha about the ibis.\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.md").write_text("Beta about the ibis.\n")
    first = await run(store, root, state).run()
    assert first.count(INGESTED) == 2
    hits, _ = await store.keyword("t", "ibis", [], 10, SearchFilters(), hits=True)
    assert {h.artifact.source_uri for h in hits} == {""}                     # no base URL: none, not file://
    assert (await run(store, root, state, base_url="https://x.example/d").run()).count(INGESTED) == 2
    again = await run(store, root, state).run()                              # remembered: nothing changed
    assert again.count(UNCHANGED) == 2
    hits, _ = await store.keyword("t", "ibis", [], 10, SearchFilters(), hits=True)
    assert {h.artifact.source_uri for h in hits} == {"https://x.example/d/a.md", "https://x.example/d/sub/b.md"}
    with pytest.raises(InvalidArgument, match="--base-url"):
        run(store, root, state, base_url="file:///srv/docs")


async def test_a_removal_is_reported_by_the_folders_relative_path_and_not_counted_as_present(store, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, state = Path("docs"), tmp_path / "state"
    root.mkdir()
    (root / "keep.md").write_text("Kept note on herons.\n")
    (root / "gone.md").write_text("Gone note on herons.\n")
    first = await run(store, root, state, sync=True).run()
    assert first.count(INGESTED) == 2, first.outcomes
    (root / "gone.md").unlink()
    summary = await run(store, root, state, sync=True).run()
    removed = [o for o in summary.outcomes if o.status == REMOVED]
    assert removed, summary.outcomes
    assert [o.path for o in removed] == [str(Path("docs") / "gone.md")]
    assert not [o for o in summary.outcomes if o.status == FAILED]
    assert watch_lines(summary, root) == ["[green]removed[/green] docs/gone.md",
                                          "[dim]in sync (1 file); watching docs[/dim]"]

