"""Hostile and awkward files are per-file errors with file, line and reason, never a stopped
folder: impossible dates, a reputation out of range, binary text (NUL, control characters),
zip bombs, a billion-laughs XML, deep XML and HTML nesting, a PDF bomb; and the conversion
worker bounds time and memory per file. Limits are small here; the hostile files are made on
the spot (benchmarks/hostile_files.py) and are small on disk."""
from __future__ import annotations

import codecs
import os
import zipfile

import pytest

from benchmarks.hostile_files import (write_billion_laughs_docx, write_deep_html, write_pdf_bomb,
                                      write_zip_bomb)
from benchmarks.sample_files import write_docx, write_pdf, write_xlsx
from shared.documents import Rejected, load_document, load_documents
from shared.documents.limits import Limits
from shared.documents.worker import ConversionWorker
from shared.errors import InvalidArgument

SMALL = Limits(max_entry_mb=4, max_archive_mb=8, max_pdf_stream_mb=4, max_xml_depth=64, max_html_depth=64,
               memory_mb=512, timeout_s=30)


def rejected(path, limits: Limits = SMALL) -> Rejected:
    with pytest.raises(Rejected) as err:
        load_documents(path, limits=limits)
    return err.value


# -- front matter (issue 33 items 1 and 6) ------------------------------------------------

@pytest.mark.parametrize("value, line_text", [("2025-02-30", "day is out of range for month"),
                                              ("2025-13-45", "month must be in 1..12")])
def test_an_impossible_date_is_bad_front_matter_at_its_line(tmp_path, value, line_text):
    path = tmp_path / "baddate.md"
    path.write_text(f"---\ntitle: T\ncreated: {value}\n---\nbody\n")
    err = rejected(path)
    assert err.reason == "bad front matter"
    assert str(err) == f"{path}:3: created: '{value}' is not a date: {line_text}"


@pytest.mark.parametrize("value", ["3", "-0.5", "lots", "true"])
def test_a_reputation_outside_0_to_1_is_bad_front_matter_at_its_line(tmp_path, value):
    path = tmp_path / "rep.md"
    path.write_text(f"---\ntitle: T\nowners: [a]\nreputation: {value}\n---\nbody\n")
    err = rejected(path)
    assert err.reason == "bad front matter"
    assert str(err).startswith(f"{path}:4: reputation: '") and "is not a number in [0, 1]" in str(err)


def test_a_bad_date_string_has_its_line_and_no_doubled_key(tmp_path):
    path = tmp_path / "d.md"
    path.write_text("---\ntitle: x\nmodified: not-a-date\n---\nbody\n")
    err = rejected(path)
    assert str(err) == f"{path}:3: modified: 'not-a-date' is not a date (use YYYY-MM-DD or ISO 8601)"
    assert str(err).count("modified") == 1


def test_a_bad_field_of_a_jsonl_record_names_its_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "bad", "reputation": 7}\n')
    assert str(rejected(path)) == f"{path}:2: reputation: '7' is not a number in [0, 1]"


def test_a_reputation_inside_0_to_1_is_kept(tmp_path):
    path = tmp_path / "ok.md"
    path.write_text("---\nreputation: 0.75\ncreated: 2025-02-28\n---\nbody\n")
    assert load_document(path).artifact.reputation_prior == 0.75


# -- binary text (issue 33 item 2) ---------------------------------------------------------

@pytest.mark.parametrize("data", [b"abc\x00def binary\n", b"x" * 20_000 + b"\x00",
                                  b"abc\x01\x02\x03\x04\x05\x06\x07\x08 control text\n",
                                  "caf\u00e9 \x01\x02\x03".encode("utf-8"),
                                  "text".encode("utf-16-le")])        # UTF-16 without a BOM: NULs
def test_text_with_a_nul_or_many_control_characters_is_binary(tmp_path, data):
    path = tmp_path / "bin.txt"
    path.write_bytes(data)
    err = rejected(path)
    assert err.reason == "unreadable" and "is binary, not text" in str(err)


def test_a_few_control_characters_tabs_form_feeds_and_ansi_colours_are_text(tmp_path):
    path = tmp_path / "log.txt"
    body = ("\x1b[31mred\x1b[0m line\twith a tab\f\r\n" * 50) + "one bell \x07 in a long text\n" + "word " * 100
    path.write_text(body)
    assert load_document(path).content.startswith("\x1b[31mred")


@pytest.mark.parametrize("codec, bom", [("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE),
                                        ("utf-32-le", codecs.BOM_UTF32_LE), ("utf-32-be", codecs.BOM_UTF32_BE),
                                        ("utf-8", codecs.BOM_UTF8)])
def test_text_is_decoded_by_its_byte_order_mark_first(tmp_path, codec, bom):
    path = tmp_path / "bom.md"
    path.write_bytes(bom + "---\ntitle: Grüße\n---\nÜber die Brücke.\n".encode(codec))
    doc = load_document(path)
    assert doc.artifact.title == "Grüße" and doc.content.strip() == "Über die Brücke."


# -- bounded parsing (issue 31 item 3) -------------------------------------------------------

@pytest.mark.parametrize("name", ["bomb.docx", "bomb.xlsx", "bomb.pptx"])
def test_an_office_zip_bomb_is_refused_before_it_inflates(tmp_path, name):
    err = rejected(write_zip_bomb(tmp_path / name, inflate_mb=16))
    assert err.reason == "over a limit" and "expands to more than 4 MB" in str(err)
    assert os.path.getsize(tmp_path / name) < 200_000
    err = rejected(tmp_path / name, Limits())       # the defaults: caught by its ratio long before 256 MB
    assert "expands more than 200 times its compressed size (a zip bomb)" in str(err)


def test_an_entry_over_the_size_limit_is_refused_even_when_it_compresses_poorly(tmp_path):
    path = tmp_path / "big.docx"
    write_zip_bomb(path, inflate_mb=6)
    err = rejected(path, Limits(max_entry_mb=4, max_ratio=100_000))
    assert str(err) == f"{path}: word/document.xml expands to more than 4 MB"


def test_a_billion_laughs_docx_is_refused_without_expanding_anything(tmp_path):
    err = rejected(write_billion_laughs_docx(tmp_path / "laughs.docx"))
    assert err.reason == "over a limit" and "declares a DOCTYPE or entities" in str(err)


def test_an_external_entity_docx_is_refused(tmp_path):
    path = tmp_path / "xxe.docx"
    write_docx(path.with_name("src.docx"), "Plain")
    with zipfile.ZipFile(path.with_name("src.docx")) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "word/document.xml":
                data = data.replace(b"?>", b'?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>', 1)
            zout.writestr(info, data)
    assert "DOCTYPE" in str(rejected(path))


def test_deeply_nested_xml_and_html_are_refused(tmp_path):
    path = tmp_path / "deep.docx"
    write_docx(path.with_name("src.docx"), "Deep")
    with zipfile.ZipFile(path.with_name("src.docx")) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "word/document.xml":
                data = data.replace(b"<w:body>", b"<w:body>" + b"<w:sdt>" * 100 + b"</w:sdt>" * 100, 1)
            zout.writestr(info, data)
    assert "nests XML elements deeper than 64 levels" in str(rejected(path))
    assert "nests HTML elements deeper than 64 levels" in str(rejected(write_deep_html(tmp_path / "d.html", 1000)))
    ok = tmp_path / "sloppy.html"                 # unclosed <p>/<li>/<br>: not nesting
    ok.write_text("<html><body>" + "<p>para<br><li>item" * 500 + "</body></html>")
    assert load_document(ok, limits=SMALL).content_type == "text/html"


def test_a_pdf_bomb_and_a_pdf_over_the_page_limit_are_refused(tmp_path):
    err = rejected(write_pdf_bomb(tmp_path / "bomb.pdf", inflate_mb=8))
    assert err.reason == "over a limit" and "expands to more than 4 MB in a PDF stream" in str(err)
    pages = write_pdf(tmp_path / "pages.pdf", [[f"page {i}"] for i in range(5)])
    assert "has more than 3 pages" in str(rejected(pages, Limits(max_pages=3)))
    assert "more than 4 PDF objects" in str(rejected(pages, Limits(max_pdf_objects=4)))
    sheets = write_xlsx(tmp_path / "one-sheet.xlsx", "Sheets")
    assert "has more than 0 sheets" in str(rejected(sheets, Limits(max_pages=0)))


def test_limits_are_settings_with_defaults():
    assert Limits.from_env({}) == Limits()
    limits = Limits.from_env({"NUCLEUS_INGEST_MAX_ENTRY_MB": "8", "NUCLEUS_INGEST_TIMEOUT_S": "2.5"})
    assert (limits.max_entry_mb, limits.timeout_s, limits.memory_mb) == (8, 2.5, Limits().memory_mb)
    with pytest.raises(InvalidArgument, match="NUCLEUS_INGEST_MEMORY_MB"):
        Limits.from_env({"NUCLEUS_INGEST_MEMORY_MB": "lots"})
    assert Limits.from_env(limits.env()) == limits


def test_the_worker_bounds_time_and_memory_per_file_and_goes_on(tmp_path):
    good = tmp_path / "good.md"
    good.write_text("---\ntitle: Good\n---\nA good note.\n")
    stuck = tmp_path / "stuck.txt"
    os.mkfifo(stuck)                        # opening it waits for a writer that never comes
    big = tmp_path / "big.txt"
    big.write_bytes(b"word " * (8 << 20))  # 40 MB of text: several copies do not fit in 260 MB
    with ConversionWorker(Limits(timeout_s=1.5, memory_mb=260)) as worker:
        with pytest.raises(Rejected, match=r"stuck.txt: took longer than 1.5 s") as err:
            worker.load(stuck)
        assert err.value.reason == "over a limit"
        assert worker.load(good, "https://docs.example/good.md").documents[0].artifact.title == "Good"
        with pytest.raises(Rejected, match=r"big.txt: needs more than 260 MB of memory"):
            worker.load(big)
        doc = worker.load(good, "https://docs.example/good.md").documents[0]
        assert doc.artifact.source_uri == "https://docs.example/good.md"
        with pytest.raises(Rejected, match="bad front matter|2025-02-30") as err:
            bad = tmp_path / "bad.md"
            bad.write_text("---\ncreated: 2025-02-30\n---\nx\n")
            worker.load(bad)
        assert err.value.reason == "bad front matter" and str(err.value).startswith(f"{bad}:2: created:")


def test_a_pdf_without_metadata_is_titled_by_its_file_name_not_its_first_page(tmp_path):
    pdf = write_pdf(tmp_path / "quarterly-report.pdf", [["Revenue grew."], ["Costs fell."]])
    doc = load_document(pdf)
    assert doc.artifact.title == "quarterly-report" and "# Page 1" in doc.content
    assert load_document(write_pdf(tmp_path / "t.pdf", [["x"]], title="Real Title")).artifact.title == "Real Title"


def test_a_file_gets_the_source_uri_it_is_given_never_a_file_uri(tmp_path):
    path = tmp_path / "note.md"
    path.write_text("A note.\n")
    given = "https://d.example/note.md"
    assert load_document(path).artifact.source_uri == ""
    assert load_document(path, source_uri=given).artifact.source_uri == given
    path.write_text("---\nsource_uri: https://wiki.example/note\n---\nA note.\n")
    assert load_document(path, source_uri=given).artifact.source_uri == "https://wiki.example/note"
