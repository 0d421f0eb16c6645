"""The checks that keep one hostile file from costing more than its `Limits` (limits.py),
made before (archives, HTML) or while (PDF streams) a converter reads it.

An Office file is a zip of XML parts. Before python-docx / python-pptx / openpyxl open it,
every entry is decompressed once as a stream — never held whole — counting the bytes it really
expands to (a header can lie), and every XML part is fed to expat on the way, which refuses a
DOCTYPE (OOXML never has one, and without it there is no entity, internal or external, to
expand) and nesting deeper than the limit. A PDF's objects and pages are counted once pypdf has
read its cross-reference table, and pypdf's own per-stream decompression limits are set to
ours. HTML nesting is counted on the tags (elements whose end tag HTML lets one omit, and void
elements, are not counted).
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path
from xml.parsers import expat

from shared.documents.limits import MB, Limits
from shared.documents.rejected import CONVERSION_FAILED, OVER_LIMIT, Rejected

_CHUNK = 1 << 20
_XML_SUFFIXES = (".xml", ".rels", ".vml")
_RATIO_FLOOR = 1 * MB            # below this an entry's ratio is not checked (small XML compresses well)


class _TooDeep(Exception):
    pass


class _Doctype(Exception):
    pass


def _xml_parser(max_depth: int) -> expat.XMLParserType:
    parser = expat.ParserCreate()
    depth = [0]

    def start(_name: str, _attrs: object) -> None:
        depth[0] += 1
        if depth[0] > max_depth:
            raise _TooDeep()

    def end(_name: str) -> None:
        depth[0] -= 1

    def doctype(*_args: object) -> None:
        raise _Doctype()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = doctype
    parser.ExternalEntityRefHandler = lambda *_a: 0        # never fetched (and a DOCTYPE is refused first)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    return parser


def check_archive(path: Path, limits: Limits, kind: str) -> None:
    """Refuse an Office file (`kind`: DOCX, PPTX, XLSX) whose zip entries or XML are over `limits`."""
    where = str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > limits.max_entries:
                raise Rejected(where, OVER_LIMIT, f"holds more than {limits.max_entries} archive entries")
            total = 0
            for info in infos:
                if info.is_dir():
                    continue
                total += _check_entry(archive, info, limits, where, total)
    except Rejected:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError, ValueError) as err:
        raise Rejected(where, CONVERSION_FAILED, f"is not a readable {kind}: {type(err).__name__}: {err}") from None


def _check_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limits: Limits, where: str, before: int) -> int:
    entry_limit, archive_limit = limits.max_entry_mb * MB, limits.max_archive_mb * MB
    name = info.filename
    if info.file_size > entry_limit:
        raise Rejected(where, OVER_LIMIT, f"{name} expands to more than {limits.max_entry_mb} MB")
    parser = _xml_parser(limits.max_xml_depth) if name.lower().endswith(_XML_SUFFIXES) else None
    size = 0
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                size += len(chunk)
                if size > entry_limit:
                    raise Rejected(where, OVER_LIMIT, f"{name} expands to more than {limits.max_entry_mb} MB")
                if before + size > archive_limit:
                    raise Rejected(where, OVER_LIMIT, f"expands to more than {limits.max_archive_mb} MB in all")
                if size > _RATIO_FLOOR and size > limits.max_ratio * max(1, info.compress_size):
                    raise Rejected(where, OVER_LIMIT, f"{name} expands more than {limits.max_ratio} times "
                                                      f"its compressed size (a zip bomb)")
                if parser is not None:
                    parser.Parse(chunk, False)
            if parser is not None:
                parser.Parse(b"", True)
    except _TooDeep:
        raise Rejected(where, OVER_LIMIT,
                       f"{name} nests XML elements deeper than {limits.max_xml_depth} levels") from None
    except _Doctype:
        raise Rejected(where, OVER_LIMIT, f"{name} declares a DOCTYPE or entities "
                                          f"(refused: no entity is expanded or fetched)") from None
    except expat.ExpatError as err:
        raise Rejected(where, CONVERSION_FAILED, f"{name} is not well-formed XML: {err}") from None
    return size


def pdf_configuration(limits: Limits):
    """pypdf's configuration (a context manager) with its per-stream decompression limits set to ours."""
    from pypdf import apply_configuration

    cap = limits.max_pdf_stream_mb * MB
    return apply_configuration(
        maximum_declared_stream_length=cap, array_based_stream_maximum_output_length=cap,
        jbig2_maximum_output_length=cap, lzw_maximum_output_length=cap, run_length_maximum_output_length=cap,
        zlib_maximum_output_length=cap, brotli_maximum_output_length=cap, image_maximum_buffer_size=cap,
        stream_decoding_work_maximum_length=4 * cap)


def check_pdf(reader, path: Path, limits: Limits) -> None:
    """Refuse a PDF with more objects or pages than `limits` allow (`reader` has read its xref)."""
    objects = sum(len(v) for v in reader.xref.values()) + len(reader.xref_objStm)
    if objects > limits.max_pdf_objects:
        raise Rejected(str(path), OVER_LIMIT, f"has more than {limits.max_pdf_objects} PDF objects")
    pages = len(reader.pages)
    if pages > limits.max_pages:
        raise Rejected(str(path), OVER_LIMIT, f"has more than {limits.max_pages} pages")


# Elements whose end tag may be omitted, and void elements: not counted as nesting.
_UNCOUNTED = frozenset(
    "p li dt dd tr td th thead tbody tfoot option optgroup colgroup caption rb rt rp rtc html head body "
    "area base br col embed hr img input link meta param source track wbr".split())
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^>]*?(/?)>")


def check_html_depth(text: str, path: Path, limits: Limits) -> None:
    """Refuse HTML whose elements nest deeper than `limits.max_html_depth`."""
    depth = 0
    for m in _TAG.finditer(text):
        closing, name, self_closing = m.group(1), m.group(2).lower(), m.group(3)
        if name in _UNCOUNTED or self_closing:
            continue
        if closing:
            depth = max(0, depth - 1)
        else:
            depth += 1
            if depth > limits.max_html_depth:
                raise Rejected(str(path), OVER_LIMIT, f"nests HTML elements deeper than {limits.max_html_depth} levels")


__all__ = ["check_archive", "check_html_depth", "check_pdf", "pdf_configuration"]
