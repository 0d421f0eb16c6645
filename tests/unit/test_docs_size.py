"""docs/BENCHMARKS.md holds the figures of record only; the history of the experiments is lab/NOTES.md."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 40 * 1024


def test_benchmarks_doc_stays_small_and_its_history_lives_in_lab_notes():
    benchmarks = REPO / "docs" / "BENCHMARKS.md"
    size = benchmarks.stat().st_size
    assert size <= LIMIT, (
        f"docs/BENCHMARKS.md is {size:,} bytes, over {LIMIT:,}: keep there only the current figure of each "
        f"measure (command, date, revision) and move superseded figures and experiment history to lab/NOTES.md")
    assert (REPO / "lab" / "NOTES.md").is_file(), "lab/NOTES.md (the dated history of the benchmarks) is missing"
