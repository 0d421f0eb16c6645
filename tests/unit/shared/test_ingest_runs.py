"""shared.ingest_runs: each tenant's last folder ingests, bounded, newest first, paths relative to
the folder (never the host's layout), written whole (a reader never sees a torn file)."""
from __future__ import annotations

from cli.folder_ingest import FileOutcome as Outcome
from shared import ingest_runs
from shared.ingest_runs import MAX_FILES, MAX_RUNS, log_path, read_runs, record_run


def test_a_run_is_kept_with_relative_paths_failed_files_first_and_counts(tmp_path):
    folder = tmp_path / "host" / "secret-layout" / "docs"
    folder.mkdir(parents=True)
    outcomes = [Outcome(str(folder / "a.md"), "ingested", documents=1, entries=3),
                Outcome(str(folder / "sub" / "b.pdf"), "failed", reason="encrypted",
                        detail=f"{folder / 'sub' / 'b.pdf'}: " + "x" * 1000),
                Outcome(str(folder / "c.md"), "unchanged")]
    record_run(tmp_path / "data", "acme", folder, "sync", outcomes, 1.234)
    [run] = read_runs(tmp_path / "data", "acme")
    assert run["folder"] == "docs" and run["mode"] == "sync" and run["seconds"] == 1.23
    assert [f["path"] for f in run["files"]] == ["sub/b.pdf", "a.md", "c.md"]
    assert run["counts"] == {"ingested": 1, "failed": 1, "unchanged": 1}
    assert len(run["files"][0]["detail"]) == ingest_runs.MAX_TEXT and run["files"][0]["detail"].startswith("sub/b.pdf: x")
    assert "secret-layout" not in log_path(tmp_path / "data", "acme").read_text()


def test_only_the_last_runs_and_files_are_kept_newest_first(tmp_path):
    many = [Outcome(f"/f{i}.md", "ingested") for i in range(MAX_FILES + 7)]
    for i in range(MAX_RUNS + 3):
        record_run(tmp_path, "acme", tmp_path, f"run{i}", many if i == 0 else [], 0.0)
    runs = read_runs(tmp_path, "acme")
    assert len(runs) == MAX_RUNS and runs[0]["mode"] == f"run{MAX_RUNS + 2}"
    record_run(tmp_path, "globex", tmp_path, "big", many, 0.0)
    [big] = read_runs(tmp_path, "globex")
    assert len(big["files"]) == MAX_FILES and big["files_left_out"] == 7


def test_a_tenant_reads_only_its_own_file_and_an_unsafe_tenant_id_names_none(tmp_path):
    record_run(tmp_path, "acme", tmp_path, "sync", [Outcome("/a.md", "ingested")], 0.0)
    assert read_runs(tmp_path, "globex") == [] and read_runs(None, "acme") == []
    for bad in ("../acme", "a/b", ".hidden", ""):
        assert log_path(tmp_path, bad) is None and record_run(tmp_path, bad, tmp_path, "x", [], 0.0) is None
    log_path(tmp_path, "acme").write_text("{torn")
    assert read_runs(tmp_path, "acme") == []
