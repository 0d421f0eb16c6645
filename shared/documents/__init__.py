"""Reading documents from disk for ingest — text with YAML front matter, PDF, DOCX, PPTX,
XLSX, JSONL — as `shared.records.DocumentIn`, and the folder-sync manifest.

    front_matter.py   the YAML block at the top of a text document
    formats.py        office formats → Markdown (pypdf, python-docx, python-pptx, openpyxl)
    rejected.py       `Rejected` and its reasons
    loading.py        a file → its documents, or `Rejected` (empty, unreadable, encrypted,
                      unsupported type, conversion failed, over a limit, bad front matter)
    limits.py         what one file may cost (sizes, ratio, depth, pages, time, memory): settings
    bounded.py        the checks that hold a file to its limits (zip entries, XML, PDF, HTML)
    worker.py         conversion in a worker process with address-space and time limits
    manifest.py       path → content hash → artifact ids, so a re-run ingests only changes
"""
from shared.documents.front_matter import split_front_matter
from shared.documents.loading import (SUPPORTED, Loaded, is_supported, iter_files, iter_paths, load_document,
                                      load_documents)
from shared.documents.rejected import Rejected

__all__ = ["SUPPORTED", "Loaded", "Rejected", "is_supported", "iter_files", "iter_paths", "load_document",
           "load_documents", "split_front_matter"]
