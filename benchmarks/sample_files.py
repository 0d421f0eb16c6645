"""Builders of sample files of every supported type, made with the libraries that read them
(python-docx, python-pptx, openpyxl; pypdf to encrypt), PDFs written by hand (text pages with
a standard font), and broken ones (zero bytes, truncated and encrypted PDFs, binary junk,
bad front matter, non-UTF-8 text)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

CREATED = dt.datetime(2024, 3, 2, 9, 0, tzinfo=dt.timezone.utc)
MODIFIED = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.timezone.utc)


def _pdf_text(s: str) -> str:
    return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: list[list[str]], title: str = "", created: dt.datetime | None = None) -> bytes:
    """A PDF whose page i shows the lines pages[i] in Helvetica, with an Info dictionary."""
    n = len(pages)
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>",
                            b"<< /Type /Pages /Kids [" + b" ".join(f"{4 + 2 * i} 0 R".encode() for i in range(n))
                            + f"] /Count {n} >>".encode(),
                            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, lines in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"] + [f"({_pdf_text(line)}) Tj T*" for line in lines] + ["ET"]
        stream = "\n".join(ops).encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
                       "/Resources << /Font << /F1 3 0 R >> >> >>".encode())
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    info = "<< "
    if title:
        info += f"/Title ({_pdf_text(title)}) "
    if created:
        info += f"/CreationDate (D:{created:%Y%m%d%H%M%S}Z) /ModDate (D:{created:%Y%m%d%H%M%S}Z) "
    objects.append((info + ">>").encode())
    return assemble_pdf(objects, info=len(objects))


def assemble_pdf(objects: list[bytes], *, info: int = 0) -> bytes:
    """A PDF file of numbered `objects` (1 is the catalog; `info`: the Info object's number, 0 =
    none) with its cross-reference table and trailer."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    trailer = f"/Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "")
    out += f"trailer\n<< {trailer} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def write_pdf(path: Path, pages: list[list[str]], title: str = "", created: dt.datetime | None = None) -> Path:
    path.write_bytes(pdf_bytes(pages, title, created))
    return path


def write_encrypted_pdf(path: Path, pages: list[list[str]]) -> Path:
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(pages))))
    writer.encrypt(user_password="s3cret", owner_password="owner", algorithm="RC4-128")
    with path.open("wb") as f:
        writer.write(f)
    return path


def _stamp(props, title: str) -> None:
    """Title and the fixed created / modified times on Office core properties (naive UTC)."""
    props.title = title
    props.created = CREATED.replace(tzinfo=None)
    props.modified = MODIFIED.replace(tzinfo=None)


def write_docx(path: Path, title: str) -> Path:
    import docx

    d = docx.Document()
    d.add_heading(title, 0)
    d.add_heading("Onboarding checklist", 1)
    d.add_paragraph("Every new hire receives a quokka badge on day one.")
    d.add_paragraph("Collect the badge", style="List Bullet")
    d.add_paragraph("Sign the ledger", style="List Bullet")
    table = d.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "Item", (0, 1): "Owner", (1, 0): "Badge", (1, 1): "Facilities"}.items():
        table.cell(r, c).text = text
    _stamp(d.core_properties, title)
    d.save(str(path))
    return path


def write_pptx(path: Path, title: str) -> Path:
    from pptx import Presentation

    deck = Presentation()
    for number, (heading, bullets) in enumerate([("Roadmap", ["Launch the narwhal tracker", "Retire the old pager"]),
                                                ("Risks", ["Supply of zirconium widgets"])], start=1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = heading
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for b in bullets[1:]:
            body.add_paragraph().text = b
    _stamp(deck.core_properties, title)
    deck.save(str(path))
    return path


def write_xlsx(path: Path, title: str) -> Path:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Inventory"
    for row in [("part", "count", "site"), ("flux capacitor", 3, "Lisbon"), ("gyro pendulum", 12, "Oslo")]:
        sheet.append(row)
    book.properties.title = title
    book.properties.created = CREATED.replace(tzinfo=None)
    book.save(str(path))
    return path


def write_long_sheet(path: Path, rows: int, columns: int, declared: str = "A1:A1", version: str = "r") -> Path:
    """An XLSX whose sheet "Ledger" has a one-cell title row over `rows` rows of `columns` cells
    (`<version><row>c<column>`, rows from 1), its XML declaring the dimension `declared` — a stale
    one, as files from other tools often carry."""
    import re
    import zipfile

    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Ledger"
    sheet.append(["Ledger of parts"])
    for i in range(1, rows + 1):
        sheet.append([f"{version}{i}c{j}" for j in range(1, columns + 1)])
    book.save(str(path))
    with zipfile.ZipFile(path) as archive:
        parts = {info: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in parts.items():
            if info.filename == "xl/worksheets/sheet1.xml":
                data, n = re.subn(rb'<dimension ref="[^"]*"\s*/>', f'<dimension ref="{declared}"/>'.encode(), data)
                assert n == 1, "the sheet XML has no dimension element to rewrite"
            archive.writestr(info, data)
    return path


def write_good_folder(root: Path) -> dict[str, str]:
    """A folder with one good file of every supported type; file name → expected title."""
    root.mkdir(parents=True, exist_ok=True)
    write_pdf(root / "handbook.pdf", [["Welcome to the handbook."], ["The pelican protocol applies on page two."]],
              title="Field Handbook", created=CREATED)
    write_docx(root / "onboarding.docx", "Onboarding Guide")
    write_pptx(root / "roadmap.pptx", "Roadmap Deck")
    write_xlsx(root / "inventory.xlsx", "Parts Inventory")
    (root / "page.html").write_text("<html><head><title>Harbour Page</title></head><body><h1>Harbour</h1>"
                                    "<p>The lighthouse keeper logs every barge.</p></body></html>")
    (root / "notes.md").write_text("---\nid: notes-2024\ntitle: \"Team Notes #ops\"\ncreated: 2024-01-05\n"
                                   "tags: [ops, notes]\n---\n# Notes\n\nThe walrus rota changes on Mondays.\n")
    (root / "plain.txt").write_text("Plain text about the cormorant schedule.\n")
    (root / "latin1.txt").write_bytes("Café menu: crème brûlée and jalapeño tapas for the señor. "
                                      "Déjà vu at the façade of the château.\n".encode("cp1252"))
    (root / "records.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"id": "faq-1", "title": "Badge FAQ", "text": "Lost badges are replaced by the ocelot desk."},
        {"title": "Parking FAQ", "text": "Parking passes are issued by the heron office.", "created": "2023-02-01"},
    ]) + "\n")
    return {"handbook": "Field Handbook", "onboarding": "Onboarding Guide", "roadmap": "Roadmap Deck",
            "inventory": "Parts Inventory", "page": "Harbour Page", "notes-2024": "Team Notes #ops",
            "plain": "plain", "latin1": "latin1", "faq-1": "Badge FAQ", "records-2": "Parking FAQ"}


def write_broken_folder(root: Path) -> dict[str, str]:
    """A folder of broken files; file name → the reason each is rejected with."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "empty.md").write_bytes(b"")
    good = pdf_bytes([["Some text that will be cut off in the middle of the file."]] * 3)
    (root / "truncated.pdf").write_bytes(good[: len(good) // 3])
    write_encrypted_pdf(root / "locked.pdf", [["Top secret kestrel."]])
    (root / "junk.txt").write_bytes(bytes(range(256)) * 8)
    (root / "junk.docx").write_bytes(b"PK\x03\x04 definitely not a zip archive")
    (root / "bad-front-matter.md").write_text("---\nid: [unclosed\ntitle: x\n---\nBody text.\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return {"empty.md": "empty", "truncated.pdf": "conversion failed", "locked.pdf": "encrypted",
            "junk.txt": "unreadable", "junk.docx": "conversion failed", "bad-front-matter.md": "bad front matter",
            "image.png": "unsupported type"}
