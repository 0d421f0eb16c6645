"""Hostile documents, small on disk, made on the spot: zip bombs (DOCX, XLSX, PPTX), a PDF bomb,
a billion-laughs XML inside a DOCX, deeply nested HTML, plus the front-matter and binary-text
cases of a folder that must still ingest every good file (docs/INGEST.md, "Limits").

`write_hostile_folder(root, inflate_mb)` writes them next to nothing else and returns file name
→ (reason, a word its detail must hold). The bombs inflate to `inflate_mb` MB: pick it above
the limits in use (tests set small ones; the benchmark the defaults).
"""
from __future__ import annotations

import zlib
import zipfile
from pathlib import Path

from benchmarks.sample_files import assemble_pdf, write_docx, write_pptx, write_xlsx

_CHUNK = 1 << 20
_ENTITIES = '<!ENTITY lol0 "lol">' + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
BILLION_LAUGHS = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
                  f"<!DOCTYPE lolz [{_ENTITIES}]>\n"
                  '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
                  "<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>").encode()


def _rewrite(src: Path, dst: Path, part: str, write_part) -> Path:
    """`src` (a zip) copied to `dst` with `part` replaced by what `write_part(stream, original)` writes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == part:
                replaced = zipfile.ZipInfo(part, date_time=info.date_time)
                replaced.compress_type = zipfile.ZIP_DEFLATED
                with zout.open(replaced, "w", force_zip64=True) as stream:
                    write_part(stream, data)
            else:
                zout.writestr(info, data)
    return dst


def _padded(inflate_mb: int):
    """A writer of the original part with `inflate_mb` MB of spaces before its root element's
    end: well-formed XML, and a zip entry a thousand times its compressed size."""
    def write(stream, original: bytes) -> None:
        head, _, tail = original.rpartition(b"</")
        stream.write(head)
        block = b" " * _CHUNK
        for _ in range(inflate_mb):
            stream.write(block)
        stream.write(b"</" + tail)
    return write


def write_zip_bomb(path: Path, inflate_mb: int) -> Path:
    """A DOCX, XLSX or PPTX (by `path`'s suffix) whose main XML part inflates to `inflate_mb` MB."""
    writers = {".docx": (write_docx, "word/document.xml"), ".xlsx": (write_xlsx, "xl/worksheets/sheet1.xml"),
               ".pptx": (write_pptx, "ppt/slides/slide1.xml")}
    if path.suffix.lower() not in writers:
        raise ValueError(f"no zip bomb for {path.suffix}")
    write, part = writers[path.suffix.lower()]
    tmp = path.with_name(f".{path.name}.src")
    write(tmp, "Bomb")
    _rewrite(tmp, path, part, _padded(inflate_mb))
    tmp.unlink()
    return path


def write_billion_laughs_docx(path: Path) -> Path:
    """A DOCX whose document.xml declares the nine-level "billion laughs" entities."""
    tmp = path.with_name(f".{path.name}.src")
    write_docx(tmp, "Laughs")
    _rewrite(tmp, path, "word/document.xml", lambda stream, _original: stream.write(BILLION_LAUGHS))
    tmp.unlink()
    return path


def write_pdf_bomb(path: Path, inflate_mb: int) -> Path:
    """A one-page PDF whose content stream is FlateDecode of `inflate_mb` MB (spaces, then text)."""
    packer = zlib.compressobj(9)
    parts = [packer.compress(b" " * _CHUNK) for _ in range(inflate_mb)]
    parts.append(packer.compress(b"\nBT /F1 12 Tf 72 720 Td (bomb) Tj ET\n"))
    parts.append(packer.flush())
    stream = b"".join(parts)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R "
               b"/Resources << /Font << /F1 3 0 R >> >> >>",
               f"<< /Length {len(stream)} /Filter /FlateDecode >>\nstream\n".encode() + stream + b"\nendstream"]
    path.write_bytes(assemble_pdf(objects))
    return path


def write_deep_html(path: Path, depth: int = 100_000) -> Path:
    path.write_text("<html><body>" + "<div>" * depth + "deep" + "</div>" * depth + "</body></html>")
    return path


def write_hostile_folder(root: Path, inflate_mb: int = 64) -> dict[str, tuple[str, str]]:
    """Every hostile case of docs/INGEST.md in `root`; file name → (reason, a word of its detail)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("bomb.docx", "bomb.xlsx", "bomb.pptx"):
        write_zip_bomb(root / name, inflate_mb)
    write_billion_laughs_docx(root / "laughs.docx")
    write_pdf_bomb(root / "bomb.pdf", inflate_mb)
    write_deep_html(root / "deep.html")
    (root / "baddate.md").write_text("---\ntitle: Bad date\ncreated: 2025-02-30\n---\nbody\n")
    (root / "badmonth.md").write_text("---\ncreated: 2025-13-45\n---\nbody\n")
    (root / "badrep.md").write_text("---\ntitle: Bad reputation\nowners: [a]\nreputation: 3\n---\nbody\n")
    (root / "notadate.md").write_text("---\ntitle: x\nmodified: not-a-date\n---\nbody\n")
    (root / "nul.txt").write_bytes(b"abc\x00def binary\n")
    (root / "controls.txt").write_bytes(b"abc\x01\x02\x03\x04\x05\x06\x07\x08 control text\n")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    return {
        "bomb.docx": ("over a limit", "expands"), "bomb.xlsx": ("over a limit", "expands"),
        "bomb.pptx": ("over a limit", "expands"), "laughs.docx": ("over a limit", "DOCTYPE"),
        "bomb.pdf": ("over a limit", "expands"), "deep.html": ("over a limit", "deeper than"),
        "baddate.md": ("bad front matter", "baddate.md:3: created: '2025-02-30' is not a date"),
        "badmonth.md": ("bad front matter", "badmonth.md:2: created: '2025-13-45' is not a date"),
        "badrep.md": ("bad front matter", "badrep.md:4: reputation: '3' is not a number in [0, 1]"),
        "notadate.md": ("bad front matter", "notadate.md:3: modified: 'not-a-date' is not a date"),
        "nul.txt": ("unreadable", "binary"), "controls.txt": ("unreadable", "binary"),
        "photo.png": ("unsupported type", "photo.png: '.png' is not a supported type"),
    }


__all__ = ["BILLION_LAUGHS", "write_billion_laughs_docx", "write_deep_html", "write_hostile_folder",
           "write_pdf_bomb", "write_zip_bomb"]
