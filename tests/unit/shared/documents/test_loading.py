"""Files of every supported type become documents with the right title, dates, structure and
pages; broken files are rejected with their reason; front matter is YAML with line-exact errors."""
from __future__ import annotations

import pytest

from shared.documents import Rejected, iter_paths, load_document, load_documents, split_front_matter
from shared.errors import InvalidArgument
from benchmarks.sample_files import (CREATED, MODIFIED, write_broken_folder, write_docx,
                                                 write_good_folder, write_pdf)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    return root, write_good_folder(root)


def _by_id(root):
    return {d.artifact.artifact_id: d for p in iter_paths(root) for d in load_documents(p).documents}


def test_every_good_file_becomes_documents_with_the_expected_titles(good):
    root, titles = good
    docs = _by_id(root)
    assert {i: d.artifact.title for i, d in docs.items()} == titles


def test_pdf_pages_become_page_sections_with_metadata_dates(good):
    root, _ = good
    loaded = load_documents(root / "handbook.pdf")
    doc = loaded.documents[0]
    assert loaded.pages == 2
    assert doc.content_type == "text/markdown"
    assert doc.content.index("# Page 1") < doc.content.index("Welcome") < doc.content.index("# Page 2") \
        < doc.content.index("pelican")
    assert doc.artifact.created_unix == int(CREATED.timestamp())
    assert doc.artifact.file_type == "pdf"


def test_docx_keeps_headings_lists_and_tables_as_markdown(good):
    root, _ = good
    doc = load_document(root / "onboarding.docx")
    assert "# Onboarding checklist" in doc.content
    assert "- Collect the badge\n- Sign the ledger" in doc.content
    assert "| Item | Owner |\n| --- | --- |\n| Badge | Facilities |" in doc.content
    assert (doc.artifact.created_unix, doc.artifact.modified_unix) == (int(CREATED.timestamp()),
                                                                       int(MODIFIED.timestamp()))


def test_pptx_slides_and_xlsx_sheets_become_sections(good):
    root, _ = good
    deck = load_documents(root / "roadmap.pptx")
    assert deck.pages == 2
    assert "# Slide 1: Roadmap\n\n- Launch the narwhal tracker\n- Retire the old pager" in deck.documents[0].content
    assert deck.documents[0].content.count("Roadmap") == 1, "the slide title is not repeated as body text"
    sheet = load_document(root / "inventory.xlsx")
    assert "# Inventory\n\n| part | count | site |" in sheet.content and "| gyro pendulum | 12 | Oslo |" in sheet.content


def test_text_in_a_legacy_encoding_is_detected_not_refused(good):
    root, _ = good
    doc = load_document(root / "latin1.txt")
    assert "crème brûlée" in doc.content and "jalapeño" in doc.content


def test_front_matter_is_yaml_and_jsonl_records_default_their_ids(good):
    root, _ = good
    notes = load_document(root / "notes.md")
    assert notes.artifact.tags == ("ops", "notes")
    assert notes.artifact.created_unix == 1704412800 and notes.content.startswith("# Notes")
    records = load_documents(root / "records.jsonl").documents
    assert [d.artifact.artifact_id for d in records] == ["faq-1", "records-2"]
    assert records[1].artifact.created_unix == 1675209600


def test_every_broken_file_is_rejected_with_its_reason(tmp_path):
    expected = write_broken_folder(tmp_path / "bad")
    reasons = {}
    for path in sorted((tmp_path / "bad").iterdir()):
        with pytest.raises(Rejected) as err:
            load_documents(path)
        assert path.name in str(err.value)
        reasons[path.name] = err.value.reason
    assert reasons == expected


@pytest.mark.parametrize("block, line", [
    ("id: [unclosed\ntitle: x\n", 2),
    ("id: ok\ntitle: x\n  bad: indent\n", 4),
    ("id: ok\ntags: [a, b\nowners: [c]\n", 3),
])
def test_malformed_front_matter_names_the_file_and_line(block, line):
    with pytest.raises(InvalidArgument) as err:
        split_front_matter(f"---\n{block}---\nbody\n", "doc.md")
    assert err.value.field == f"doc.md:{line}", str(err.value)


def test_front_matter_that_never_ends_or_is_not_a_mapping_is_an_error():
    with pytest.raises(InvalidArgument, match="never ends"):
        split_front_matter("---\nid: x\nbody\n", "doc.md")
    with pytest.raises(InvalidArgument, match="mapping"):
        split_front_matter("---\n- a\n- b\n---\nbody\n", "doc.md")


def test_a_bad_date_in_front_matter_is_rejected_naming_the_field(tmp_path):
    path = tmp_path / "d.md"
    path.write_text("---\ncreated: someday\n---\nText.\n")
    with pytest.raises(Rejected) as err:
        load_documents(path)
    assert err.value.reason == "bad front matter" and "created" in str(err.value)


def test_a_large_text_file_is_loaded_whole(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("The albatross manual repeats itself. " * 120_000)          # ~4.4 MB
    assert len(load_document(path).content) > 4_000_000


def test_a_pdf_without_text_and_a_docx_with_a_bad_date_field(tmp_path):
    blank = write_pdf(tmp_path / "blank.pdf", [[], []])
    with pytest.raises(Rejected) as err:
        load_documents(blank)
    assert err.value.reason == "empty" and "2 pages" in str(err.value)
    assert load_document(write_docx(tmp_path / "ok.docx", "Fine")).artifact.title == "Fine"
