"""Converters from office formats to Markdown the chunker reads, each through a maintained
library: PDF with pypdf (page by page), DOCX with python-docx, PPTX with python-pptx, XLSX
with openpyxl (read-only, streaming rows).

    PDF   one `# Page N` section per page, so every chunk's heading path starts with its page
          (a citation points at `<source_uri>#page=N`); title/dates from the document info
    DOCX  Heading N / Title styles → `#` headings, list styles → `- ` / `1. ` items, tables →
          Markdown tables, in document order; title/dates from the core properties
    PPTX  one `# Slide N: <slide title>` section per slide, text frames as paragraphs or
          indented `- ` items, tables → Markdown tables
    XLSX  one `# <sheet>` section per sheet, rows as a Markdown table (first row = header) as
          wide as its widest row; every row is read, whatever dimension the sheet declares;
          data rows past `Limits.max_sheet_rows` are left out and counted in `truncated`

Each returns a `Converted`; a problem with the file raises `Rejected` with its reason. A PDF
over its `Limits` (objects, pages, a stream's decompressed size) is refused `over a limit`
(bounded.py); the zip checks of DOCX/PPTX/XLSX run before these converters (loading.py).
A `MemoryError` is never turned into a conversion failure: the worker reports it (worker.py).
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import dropwhile
from pathlib import Path

from shared.documents.bounded import check_pdf, pdf_configuration
from shared.documents.limits import Limits
from shared.documents.rejected import CONVERSION_FAILED, EMPTY, ENCRYPTED, OVER_LIMIT, Rejected


@dataclass(frozen=True, slots=True)
class Converted:
    text: str                     # Markdown
    title: str = ""
    created_unix: int = 0
    modified_unix: int = 0
    pages: int = 0                # pages, slides or sheets converted
    truncated: str = ""           # what a limit left out, with the count; '' when nothing was


def _unix(value: object) -> int:
    if not isinstance(value, dt.datetime):
        return 0
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return max(0, int(value.timestamp()))


def _escape_headings(text: str) -> str:
    """Keep a line of extracted text that starts with '#' from reading as a heading."""
    return re.sub(r"(?m)^(\s*)#", r"\1\\#", text)


def _cell(value: object) -> str:
    return "" if value is None else " ".join(str(value).split()).replace("|", "\\|")


def markdown_table(rows: Iterable[Iterable[object]]) -> str:
    """A Markdown table of `rows` (the first non-empty one is the header) as wide as its widest
    row: shorter rows are padded, none is cut; '' when there are none."""
    table = list(dropwhile(lambda cells: not cells, ([_cell(c) for c in row] for row in rows)))
    width = max(map(len, table), default=0)
    if not width:
        return ""
    lines = ["| " + " | ".join(cells + [""] * (width - len(cells))) + " |" for cells in table]
    return "\n".join([lines[0], "|" + " --- |" * width, *lines[1:]])


def pdf(path: Path, limits: Limits | None = None) -> Converted:
    limits = limits or Limits()
    with pdf_configuration(limits):
        return _pdf(path, limits)


def _pdf(path: Path, limits: Limits) -> Converted:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, LimitReachedError, PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise Rejected(str(path), ENCRYPTED, "is an encrypted PDF (a password is needed to read it)")
        check_pdf(reader, path, limits)
        sections = []
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            if text:
                sections.append(f"# Page {number}\n\n{_escape_headings(text)}")
        info = reader.metadata
        n_pages = len(reader.pages)
    except Rejected:
        raise
    except FileNotDecryptedError:
        raise Rejected(str(path), ENCRYPTED, "is an encrypted PDF (a password is needed to read it)") from None
    except LimitReachedError as err:
        raise Rejected(str(path), OVER_LIMIT, f"expands to more than {limits.max_pdf_stream_mb} MB "
                                              f"in a PDF stream ({err})") from None
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, RecursionError) as err:
        raise Rejected(str(path), CONVERSION_FAILED, f"is not a readable PDF: {type(err).__name__}: {err}") from None
    if not sections:
        raise Rejected(str(path), EMPTY, f"has no extractable text in {n_pages} pages (scanned pages need OCR)")
    title = created = modified = None
    if info is not None:
        title, created, modified = info.title, info.creation_date, info.modification_date
    return Converted("\n\n".join(sections), title=str(title or "").strip(), created_unix=_unix(created),
                     modified_unix=_unix(modified), pages=n_pages)


def _docx_blocks(document) -> Iterator[str]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for item in document.iter_inner_content():
        if isinstance(item, Table):
            yield markdown_table([c.text for c in row.cells] for row in item.rows)
        elif isinstance(item, Paragraph):
            text = item.text.strip()
            if not text:
                continue
            style = (item.style.name if item.style is not None else "") or ""
            level = re.fullmatch(r"Heading (\d)", style)
            if style == "Title":
                yield f"# {text}"
            elif level:
                yield "#" * min(6, int(level.group(1))) + " " + text
            elif style.startswith("List Number"):
                yield f"1. {text}"
            elif style.startswith("List"):
                yield f"- {text}"
            else:
                yield _escape_headings(text)


def docx(path: Path, limits: Limits | None = None) -> Converted:
    import docx as python_docx

    try:
        document = python_docx.Document(str(path))
        text = "\n\n".join(b for b in _docx_blocks(document) if b)
        props = document.core_properties
    except MemoryError:
        raise
    except Exception as err:  # python-docx raises many kinds (zip, xml, key) for a damaged file
        raise Rejected(str(path), CONVERSION_FAILED, f"is not a readable DOCX: {type(err).__name__}: {err}") from None
    return Converted(_join_lists(text), title=(props.title or "").strip(), created_unix=_unix(props.created),
                     modified_unix=_unix(props.modified))


def _join_lists(text: str) -> str:
    """Consecutive list items as one list block (no blank line between them)."""
    return re.sub(r"(?m)^((?:- |1\. ).*)\n\n(?=(?:- |1\. ))", r"\1\n", text)


def _shape_blocks(shape) -> Iterator[str]:
    if getattr(shape, "has_table", False) and shape.has_table:
        yield markdown_table([c.text for c in row.cells] for row in shape.table.rows)
    elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = []
        for p in shape.text_frame.paragraphs:
            text = "".join(r.text for r in p.runs).strip()
            if text:
                lines.append(("  " * p.level + "- " + text) if p.level or len(shape.text_frame.paragraphs) > 1
                             else _escape_headings(text))
        if lines:
            yield "\n".join(lines)
    for child in getattr(shape, "shapes", ()):          # group shapes
        yield from _shape_blocks(child)


def pptx(path: Path, limits: Limits | None = None) -> Converted:
    from pptx import Presentation

    try:
        deck = Presentation(str(path))
        sections = []
        if len(deck.slides) > (limits or Limits()).max_pages:
            raise Rejected(str(path), OVER_LIMIT, f"has more than {(limits or Limits()).max_pages} slides")
        for number, slide in enumerate(deck.slides, start=1):
            title_shape = slide.shapes.title
            title = title_shape.text_frame.text.strip() if title_shape is not None else ""
            title_id = title_shape.shape_id if title_shape is not None else None
            blocks = [b for s in slide.shapes if s.shape_id != title_id for b in _shape_blocks(s)]
            if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
                notes = slide.notes_slide.notes_text_frame.text.strip()
                if notes:
                    blocks.append(f"Notes: {notes}")
            if title or blocks:
                heading = f"# Slide {number}: {title}" if title else f"# Slide {number}"
                sections.append("\n\n".join([heading, *blocks]))
        props = deck.core_properties
        n = len(deck.slides)
    except MemoryError:
        raise
    except Rejected:
        raise
    except Exception as err:  # python-pptx raises many kinds for a damaged file
        raise Rejected(str(path), CONVERSION_FAILED, f"is not a readable PPTX: {type(err).__name__}: {err}") from None
    if not sections:
        raise Rejected(str(path), EMPTY, f"has no text in {n} slides")
    return Converted("\n\n".join(sections), title=(props.title or "").strip(), created_unix=_unix(props.created),
                     modified_unix=_unix(props.modified), pages=n)


def _sheet_rows(sheet, max_rows: int) -> tuple[list[tuple[object, ...]], int]:
    """The sheet's non-empty rows — its header and at most `max_rows` data rows, each without
    its trailing empty cells — and how many data rows were left out. The dimension a sheet
    declares is not trusted (other tools often write a stale one): every row of its XML is read."""
    sheet.reset_dimensions()
    rows: list[tuple[object, ...]] = []
    left_out = 0
    for row in sheet.iter_rows(values_only=True):
        end = len(row)
        while end and (row[end - 1] is None or not str(row[end - 1]).strip()):
            end -= 1
        if not end:
            continue
        if len(rows) > max_rows:
            left_out += 1
        else:
            rows.append(row[:end])
    return rows, left_out


def xlsx(path: Path, limits: Limits | None = None) -> Converted:
    from openpyxl import load_workbook

    limits = limits or Limits()
    try:
        book = load_workbook(str(path), read_only=True, data_only=True)
        try:
            if len(book.worksheets) > limits.max_pages:
                raise Rejected(str(path), OVER_LIMIT, f"has more than {limits.max_pages} sheets")
            sections, left_out = [], []
            for sheet in book.worksheets:
                rows, more = _sheet_rows(sheet, limits.max_sheet_rows)
                table = markdown_table(rows)
                if more:
                    left_out.append(f"{more} rows of sheet {sheet.title!r}")
                    table += f"\n\n({more} rows after the first {limits.max_sheet_rows} left out)"
                if table:
                    sections.append(f"# {sheet.title}\n\n{table}")
            props = book.properties
            n = len(book.worksheets)
        finally:
            book.close()
    except (MemoryError, Rejected):
        raise
    except Exception as err:  # openpyxl raises many kinds for a damaged file
        raise Rejected(str(path), CONVERSION_FAILED, f"is not a readable XLSX: {type(err).__name__}: {err}") from None
    if not sections:
        raise Rejected(str(path), EMPTY, f"has no cell values in {n} sheets")
    truncated = (f"{', '.join(left_out)} left out (at most {limits.max_sheet_rows} data rows per sheet, "
                 f"NUCLEUS_INGEST_MAX_SHEET_ROWS)") if left_out else ""
    return Converted("\n\n".join(sections), title=(props.title or "").strip(), created_unix=_unix(props.created),
                     modified_unix=_unix(props.modified), pages=n, truncated=truncated)


CONVERTERS = {".pdf": pdf, ".docx": docx, ".pptx": pptx, ".xlsx": xlsx}
