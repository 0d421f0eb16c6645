"""Spreadsheets are read whole and nothing is left out silently: a stale declared dimension is not
trusted, a table is as wide as its widest row, and rows past the per-sheet limit (a setting, handed
to the conversion worker) are reported in the document's `truncated`, with their count."""
from __future__ import annotations

import re
import zipfile

import pytest

from benchmarks.sample_files import write_long_sheet
from shared.documents import load_document
from shared.documents.formats import markdown_table
from shared.documents.limits import Limits
from shared.documents.worker import ConversionWorker
from shared.errors import InvalidArgument


def row(i: int, columns: int = 6) -> str:
    return "| " + " | ".join(f"r{i}c{j}" for j in range(1, columns + 1)) + " |"


@pytest.fixture
def ledger(tmp_path):
    path = write_long_sheet(tmp_path / "ledger.xlsx", rows=3000, columns=6, declared="A1:A1")
    with zipfile.ZipFile(path) as archive:
        xml = archive.read("xl/worksheets/sheet1.xml").decode()
    assert re.findall(r"<dimension [^>]*>", xml) == ['<dimension ref="A1:A1"/>']
    return path


def test_a_table_is_as_wide_as_its_widest_row_and_no_row_is_cut():
    assert markdown_table([["Title"], ["a", "b", "c"], ["d"]]) == (
        "| Title |  |  |\n| --- | --- | --- |\n| a | b | c |\n| d |  |  |")
    assert markdown_table([[], []]) == ""


def test_a_sheet_declaring_a_stale_dimension_is_read_whole(ledger):
    doc = load_document(ledger)
    assert doc.content.startswith("# Ledger\n\n| Ledger of parts |  |  |  |  |  |\n| --- |")
    for i in (1, 1500, 3000):
        assert f"\n{row(i)}" in doc.content
    assert doc.truncated == ""


def test_rows_past_the_sheet_limit_are_left_out_and_reported_with_their_count(ledger):
    with ConversionWorker(Limits(max_sheet_rows=2000)) as worker:      # the limit reaches the worker
        [doc] = worker.load(ledger).documents
    assert doc.truncated == ("1000 rows of sheet 'Ledger' left out "
                             "(at most 2000 data rows per sheet, NUCLEUS_INGEST_MAX_SHEET_ROWS)")
    assert f"\n{row(1)}" in doc.content and f"\n{row(2000)}\n" in doc.content   # every cell of every kept row
    assert "r2001c1" not in doc.content and "r3000c6" not in doc.content
    assert doc.content.endswith("\n\n(1000 rows after the first 2000 left out)")


def test_the_sheet_row_limit_is_a_setting():
    assert Limits.from_env({"NUCLEUS_INGEST_MAX_SHEET_ROWS": "2000"}).max_sheet_rows == 2000
    assert Limits().max_sheet_rows == 100_000
    with pytest.raises(InvalidArgument, match="NUCLEUS_INGEST_MAX_SHEET_ROWS: must be positive, got 0"):
        Limits.from_env({"NUCLEUS_INGEST_MAX_SHEET_ROWS": "0"})
