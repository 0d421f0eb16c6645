"""Files on disk → `DocumentIn`s for ingest, or a `Rejected` naming the file and its reason.

    .md .markdown .txt .html .htm   decoded (UTF-8, else the encoding charset-normalizer
                                    detects), optional YAML front matter (front_matter.py)
    .pdf .docx .pptx .xlsx          converted to Markdown (formats.py)
    .jsonl                          one document per line: a JSON object with `text` (or
                                    `content`) and the front-matter fields; `id` defaults to
                                    `<file stem>-<line>`

Missing fields get defaults from the file: id = file stem, title = document metadata, else the
first heading, else the stem; created / modified = document metadata, else the file's mtime.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.documents import formats
from shared.documents.formats import (BAD_FRONT_MATTER, CONVERSION_FAILED, EMPTY, UNREADABLE, UNSUPPORTED,
                                      Converted, Rejected)
from shared.documents.front_matter import list_value, split_front_matter, text_value, unix_time
from shared.errors import InvalidArgument
from shared.records import ArtifactMeta, DocumentIn

TEXT_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain",
              ".html": "text/html", ".htm": "text/html"}
SUPPORTED = (*TEXT_TYPES, *formats.CONVERTERS, ".jsonl")
PREFERRED_ENCODINGS = ("cp1252", "cp1251", "cp1250")
PREFERENCE_MARGIN = 0.06         # charset-normalizer "chaos" (mess ratio) within which a preferred one wins
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_HTML_TITLE = re.compile(r"<(title|h1)\b[^>]*>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class Loaded:
    documents: tuple[DocumentIn, ...]
    pages: int                      # PDF pages, slides, sheets; 0 for text


def is_supported(path: Path) -> bool:
    return path.suffix.lower() in SUPPORTED


def iter_files(root: Path) -> Iterator[Path]:
    """Every file under `root` (or `root` itself), sorted, skipping hidden files and folders and
    README.md files (a folder's description, not content)."""
    if root.is_file():
        yield root
        return
    if not root.exists():
        raise InvalidArgument("PATH", f"{root} does not exist")
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if p.is_file() and not any(part.startswith(".") for part in rel) and p.name.lower() != "readme.md":
            yield p


def iter_paths(root: Path) -> Iterator[Path]:
    """The files under `root` of a supported type."""
    return (p for p in iter_files(root) if is_supported(p))


def decode_text(data: bytes, path: Path) -> str:
    """UTF-8 (BOM dropped), else the encoding charset-normalizer detects; binary is refused."""
    if not data.strip():
        raise Rejected(str(path), EMPTY, "is empty")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    if b"\x00" in data[:8192]:
        raise Rejected(str(path), UNREADABLE, "is binary, not text")
    text = _detected(data)
    if text is None:
        raise Rejected(str(path), UNREADABLE, "is not text in any encoding that could be detected")
    controls = sum(1 for c in text[:8192] if ord(c) < 32 and c not in "\n\r\t\f")
    if controls > len(text[:8192]) // 100:
        raise Rejected(str(path), UNREADABLE, "is binary, not text")
    return text


def _detected(data: bytes) -> str | None:
    """`data` decoded in the encoding charset-normalizer finds least messy; among guesses that
    read (nearly) as well, the common Windows code pages win — on short single-byte text the
    detector cannot tell cp1252 from cp1257 or cp1251 from mac_cyrillic by itself."""
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        return None
    best = min(m.chaos for m in matches)
    close = [m for m in matches if m.chaos <= best + PREFERENCE_MARGIN]
    for encoding in PREFERRED_ENCODINGS:
        for m in close:
            if m.encoding == encoding:
                return str(m)
    return str(min(matches, key=lambda m: m.chaos))


def _artifact(meta: dict[str, Any], path: Path, *, title: str, created: int, modified: int,
              default_id: str, where: str) -> ArtifactMeta:
    rep = meta.get("reputation", 0) or 0
    try:
        reputation = float(rep)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where}: reputation", f"'{rep}' is not a number in [0, 1]") from None
    mtime = int(path.stat().st_mtime)
    meta_created = unix_time(meta.get("created"), f"{where}: created")
    meta_modified = unix_time(meta.get("modified"), f"{where}: modified")
    return ArtifactMeta(
        artifact_id=text_value(meta, "id") or default_id, title=text_value(meta, "title") or title or path.stem,
        source_type=text_value(meta, "source_type", "file"), source_id=text_value(meta, "source_id", path.parent.name),
        source_uri=text_value(meta, "source_uri", path.resolve().as_uri()),
        file_name=path.name, file_type=path.suffix.lstrip(".").lower(),
        created_unix=meta_created or created or mtime,
        modified_unix=meta_modified or modified or meta_created or created or mtime,
        owners=list_value(meta, "owners"), tags=list_value(meta, "tags"), reputation_prior=reputation,
        visibility_groups=list_value(meta, "groups"),
    )


def _first_heading(body: str, content_type: str) -> str:
    if content_type == "text/html":
        m = _HTML_TITLE.search(body)
        return " ".join(_TAG.sub(" ", m.group(2)).split()) if m else ""
    m = _HEADING.search(body)
    return m.group(1).strip() if m else ""


def _text_document(path: Path) -> DocumentIn:
    content_type = TEXT_TYPES[path.suffix.lower()]
    text = decode_text(path.read_bytes(), path)
    try:
        meta, body = split_front_matter(text.replace("\r\n", "\n"), str(path))
    except InvalidArgument as err:
        raise Rejected(err.field or str(path), BAD_FRONT_MATTER, str(err).partition(": ")[2]) from None
    if not body.strip():
        raise Rejected(str(path), EMPTY, "has no text after its front matter")
    artifact = _artifact(meta, path, title=_first_heading(body, content_type), created=0, modified=0,
                         default_id=path.stem, where=str(path))
    return DocumentIn(artifact=artifact, content=body, content_type=content_type)


def _converted_document(path: Path) -> tuple[DocumentIn, int]:
    if path.stat().st_size == 0:
        raise Rejected(str(path), EMPTY, "is empty")
    converted: Converted = formats.CONVERTERS[path.suffix.lower()](path)
    artifact = _artifact({}, path, title=converted.title or _first_heading(converted.text, "text/markdown"),
                         created=converted.created_unix, modified=converted.modified_unix,
                         default_id=path.stem, where=str(path))
    return DocumentIn(artifact=artifact, content=converted.text, content_type="text/markdown"), converted.pages


def _jsonl_documents(path: Path) -> tuple[DocumentIn, ...]:
    text = decode_text(path.read_bytes(), path)
    docs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise Rejected(f"{path}:{number}", CONVERSION_FAILED, f"is not JSON: {err.msg}") from None
        if not isinstance(record, dict):
            raise Rejected(f"{path}:{number}", CONVERSION_FAILED, "is not a JSON object")
        body = record.get("text", record.get("content"))
        if not isinstance(body, str) or not body.strip():
            raise Rejected(f"{path}:{number}", EMPTY, "has no 'text' (or 'content') string")
        content_type = str(record.get("content_type") or "text/markdown")
        artifact = _artifact(record, path, title=_first_heading(body, content_type), created=0, modified=0,
                             default_id=f"{path.stem}-{number}", where=f"{path}:{number}")
        docs.append(DocumentIn(artifact=artifact, content=body, content_type=content_type))
    if not docs:
        raise Rejected(str(path), EMPTY, "has no records")
    return tuple(docs)


def load_documents(path: Path) -> Loaded:
    """The documents of one file (several for JSONL); raises `Rejected` with the reason."""
    suffix = path.suffix.lower()
    try:
        if suffix in TEXT_TYPES:
            return Loaded((_text_document(path),), 0)
        if suffix in formats.CONVERTERS:
            doc, pages = _converted_document(path)
            return Loaded((doc,), pages)
        if suffix == ".jsonl":
            return Loaded(_jsonl_documents(path), 0)
    except Rejected:
        raise
    except InvalidArgument as err:              # a bad field value (date, reputation)
        raise Rejected(err.field or str(path), BAD_FRONT_MATTER, str(err).partition(": ")[2]) from None
    except OSError as err:
        raise Rejected(str(path), UNREADABLE, f"cannot be read: {err.strerror or err}") from None
    raise Rejected(str(path), UNSUPPORTED, f"'{suffix or path.name}' is not a supported type; "
                                           f"accepted: {', '.join(SUPPORTED)}")


def load_document(path: Path) -> DocumentIn:
    """The one document of a file (not JSONL); raises `Rejected` with the reason."""
    loaded = load_documents(path)
    if len(loaded.documents) != 1:
        raise InvalidArgument(str(path), f"holds {len(loaded.documents)} documents; use load_documents")
    return loaded.documents[0]
