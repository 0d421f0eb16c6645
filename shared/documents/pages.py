"""Page numbers of converted PDFs, for citations.

A PDF is converted page by page into one `# Page N` section per page (formats.py), and a new
page always starts a new chunk, so a chunk's heading path starts with its page. `page_of`
reads it back; `cite_uri` points a citation at that page (`<source_uri>#page=N`, the fragment
PDF viewers open at).
"""
from __future__ import annotations

import re

_PAGE = re.compile(r"^Page (\d{1,6})\b")


def page_of(headline: str, file_type: str) -> int | None:
    """The page of a chunk of a PDF (from its heading path), else None."""
    if file_type.lower() != "pdf":
        return None
    match = _PAGE.match(headline or "")
    return int(match.group(1)) if match else None


def cite_uri(source_uri: str, headline: str, file_type: str) -> str:
    """`source_uri`, pointed at the chunk's page when it is a page of a PDF."""
    page = page_of(headline, file_type)
    if page is None or not source_uri or "#" in source_uri:
        return source_uri
    return f"{source_uri}#page={page}"


__all__ = ["cite_uri", "page_of"]
