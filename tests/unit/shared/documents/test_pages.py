"""shared.documents.pages: a PDF chunk's citation points at its page; nothing else is touched."""
from __future__ import annotations

from services.rag_pipeline.models import RankedResult
from services.rag_pipeline.tools.convert import hit_out
from shared.documents.pages import cite_uri, page_of
from shared.records import ArtifactSummary, Entry


def test_the_page_comes_from_a_pdf_chunks_heading_path():
    assert page_of("Page 12 > Results", "pdf") == 12
    assert page_of("Page 3", "PDF") == 3
    assert page_of("Page 3", "md") is None                 # a Markdown heading called "Page 3"
    assert page_of("Pages of history", "pdf") is None


def test_a_citation_points_at_the_page_only_when_there_is_one():
    assert cite_uri("https://x.example/report.pdf", "Page 7", "pdf") == "https://x.example/report.pdf#page=7"
    assert cite_uri("https://x.example/report.pdf#page=2", "Page 7", "pdf") == "https://x.example/report.pdf#page=2"
    assert cite_uri("https://x.example/notes.md", "Page 7", "md") == "https://x.example/notes.md"
    assert cite_uri("", "Page 7", "pdf") == ""


def test_raw_results_carry_the_page_of_a_pdf_chunk():
    entry = Entry(id="report#4", tenant_id="t", persona_id="", artifact_id="report", chunk_index=4,
                  text="Yields rose.", headline="Page 5", content_summary="Yields rose.", timestamp_unix=0,
                  richness=0.5)
    artifact = ArtifactSummary(artifact_id="report", title="Report", source_uri="https://x.example/report.pdf",
                               file_name="report.pdf", file_type="pdf")
    hit = hit_out(RankedResult(entry=entry, artifact=artifact, snippet="Yields rose.", overall=0.8,
                               scores=(0.8, 0.5, 0.5, 0.5), explanation=None),
                 "https://rag.example/documents/report%234")
    assert hit.provenance.page == 5
    assert hit.provenance.source_uri == "https://x.example/report.pdf#page=5"
