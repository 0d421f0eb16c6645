"""Files on disk → `DocumentIn`s for ingest, or a `Rejected` naming the file and its reason.

    .md .markdown .txt .html .htm   decoded (UTF-8, else the encoding charset-normalizer
                                    detects), optional YAML front matter (front_matter.py)
    .pdf .docx .pptx .xlsx          converted to Markdown (formats.py)
    .jsonl                          one document per line: a JSON object with `text` (or
                                    `content`) and the front-matter fields; `id` defaults to
                                    `<file stem>-<line>`

Missing fields get defaults from the file: id = file stem, title = document metadata, else the
first heading (text, HTML, DOCX — not a converter's own `# Page N` / `# Slide N` / sheet
headings), else the stem; created / modified = document metadata, else the file's mtime;
source_uri = the `source_uri` the caller gives (a folder's base URL + the file's path), never a
file:// URI.

Text is binary, and rejected, when it holds a NUL or more than MAX_CONTROL_SHARE control
characters (`decode_text`). Every file is read within its `Limits` (limits.py, bounded.py).
"""
from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.documents import formats
from shared.documents.bounded import check_archive, check_html_depth
from shared.documents.formats import Converted
from shared.documents.front_matter import FrontMatter, list_value, split_front_matter, text_value, unix_time
from shared.documents.limits import MB, Limits
from shared.documents.rejected import (BAD_FRONT_MATTER, CONVERSION_FAILED, EMPTY, OVER_LIMIT, UNREADABLE,
                                       UNSUPPORTED, Rejected)
from shared.errors import InvalidArgument
from shared.records import ArtifactMeta, DocumentIn

TEXT_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain",
              ".html": "text/html", ".htm": "text/html"}
SUPPORTED = (*TEXT_TYPES, *formats.CONVERTERS, ".jsonl")
PREFERRED_ENCODINGS = ("cp1252", "cp1251", "cp1250")
PREFERENCE_MARGIN = 0.06         # charset-normalizer "chaos" (mess ratio) within which a preferred one wins
_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_HTML_TITLE = re.compile(r"<(title|h1)\b[^>]{0,4096}>(.{0,4096}?)</\1>", re.IGNORECASE | re.DOTALL)  # bounded tries
_TAG = re.compile(r"<[^>]+>")
ARCHIVES = {".docx": "DOCX", ".pptx": "PPTX", ".xlsx": "XLSX"}
TITLE_FROM_HEADING = {".docx"}       # the other converters' headings are their own (Page N, Slide N, sheets)
# Byte-order marks, longest first (UTF-32 LE starts with the UTF-16 LE mark).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
MAX_CONTROL_SHARE = 0.005            # control characters (see _CONTROL) per character of text: 1 in 200
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0b, *range(0x0e, 0x20)])  # C0 but tab, LF, CR, FF; ESC outside ANSI
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


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
    """The text of `data`: by its byte-order mark (UTF-8/16/32) when it has one, else UTF-8,
    else the encoding charset-normalizer detects. Binary is refused: a NUL anywhere, or control
    characters (C0 but tab, newline, carriage return, form feed, and ANSI escape sequences) in
    more than MAX_CONTROL_SHARE of the text."""
    if not data.strip():
        raise Rejected(str(path), EMPTY, "is empty")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom):].decode(encoding)
            except UnicodeDecodeError:
                raise Rejected(str(path), UNREADABLE, f"starts with a {encoding} byte-order mark "
                                                      f"but is not {encoding} text") from None
            break
    else:
        if b"\x00" in data:
            raise Rejected(str(path), UNREADABLE, "is binary, not text (it holds a NUL byte)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            detected = _detected(data)
            if detected is None:
                raise Rejected(str(path), UNREADABLE, "is not text in any encoding that could be detected") from None
            text = detected
    check_not_binary(text, path)
    return text


def check_not_binary(text: str, path: Path | str) -> None:
    """Refuse decoded text that is binary (see `decode_text`)."""
    if "\x00" in text:
        raise Rejected(str(path), UNREADABLE, "is binary, not text (it holds a NUL character)")
    plain = (_ANSI.sub("", text) if "\x1b" in text else text).encode("utf-8", "surrogatepass")
    controls = len(plain) - len(plain.translate(None, _CONTROL_BYTES))   # UTF-8 has them only as themselves
    if controls and controls > MAX_CONTROL_SHARE * len(text):
        raise Rejected(str(path), UNREADABLE, f"is binary, not text ({controls} control characters in "
                                              f"{len(text)}, more than {MAX_CONTROL_SHARE:.1%})")


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


def _where(meta: dict[str, Any], where: str, key: str) -> str:
    """`where` with the line of `key` when the front matter knows it."""
    return meta.where(where, key) if isinstance(meta, FrontMatter) else where


def _artifact(meta: dict[str, Any], path: Path, *, title: str, created: int, modified: int,
              default_id: str, where: str, source_uri: str = "") -> ArtifactMeta:
    rep = meta.get("reputation", 0) or 0
    try:
        reputation = float(rep)
        if isinstance(rep, bool) or not 0.0 <= reputation <= 1.0:
            raise ValueError(rep)
    except (TypeError, ValueError):
        raise InvalidArgument(_where(meta, where, "reputation"),
                              f"reputation: '{rep}' is not a number in [0, 1]") from None
    mtime = int(path.stat().st_mtime)
    meta_created = unix_time(meta.get("created"), _where(meta, where, "created"), "created")
    meta_modified = unix_time(meta.get("modified"), _where(meta, where, "modified"), "modified")
    return ArtifactMeta(
        artifact_id=text_value(meta, "id") or default_id, title=text_value(meta, "title") or title or path.stem,
        source_type=text_value(meta, "source_type", "file"), source_id=text_value(meta, "source_id", path.parent.name),
        source_uri=text_value(meta, "source_uri", source_uri),
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
    pos = 0 if body.startswith("#") else (body.find("\n#") + 1 or -1)   # only where a line starts with '#'
    while pos >= 0:
        m = _HEADING.match(body, pos)
        if m:
            return m.group(1).strip()
        after = body.find("\n#", pos + 1)
        pos = after + 1 if after >= 0 else -1
    return ""


def _read(path: Path, limits: Limits) -> bytes:
    if path.stat().st_size > limits.max_file_mb * MB:
        raise Rejected(str(path), OVER_LIMIT, f"is larger than {limits.max_file_mb} MB")
    return path.read_bytes()


def _text_document(path: Path, limits: Limits, source_uri: str) -> DocumentIn:
    content_type = TEXT_TYPES[path.suffix.lower()]
    text = decode_text(_read(path, limits), path)
    try:
        meta, body = split_front_matter(text.replace("\r\n", "\n"), str(path))
    except InvalidArgument as err:
        raise _bad_front_matter(err, path) from None
    if not body.strip():
        raise Rejected(str(path), EMPTY, "has no text after its front matter")
    if content_type == "text/html":
        check_html_depth(body, path, limits)
    artifact = _artifact(meta, path, title=_first_heading(body, content_type), created=0, modified=0,
                         default_id=path.stem, where=str(path), source_uri=source_uri)
    return DocumentIn(artifact=artifact, content=body, content_type=content_type)


def _bad_front_matter(err: InvalidArgument, path: Path) -> Rejected:
    where = err.field or str(path)
    return Rejected(where, BAD_FRONT_MATTER, err.message.removeprefix(f"{where}: "))


def _converted_document(path: Path, limits: Limits, source_uri: str) -> tuple[DocumentIn, int]:
    size = path.stat().st_size
    if size == 0:
        raise Rejected(str(path), EMPTY, "is empty")
    if size > limits.max_file_mb * MB:
        raise Rejected(str(path), OVER_LIMIT, f"is larger than {limits.max_file_mb} MB")
    suffix = path.suffix.lower()
    if suffix in ARCHIVES:
        check_archive(path, limits, ARCHIVES[suffix])
    converted: Converted = formats.CONVERTERS[suffix](path, limits)
    heading = _first_heading(converted.text, "text/markdown") if suffix in TITLE_FROM_HEADING else ""
    artifact = _artifact({}, path, title=converted.title or heading,
                         created=converted.created_unix, modified=converted.modified_unix,
                         default_id=path.stem, where=str(path), source_uri=source_uri)
    return DocumentIn(artifact=artifact, content=converted.text, content_type="text/markdown",
                      truncated=converted.truncated), converted.pages


def _jsonl_documents(path: Path, limits: Limits, source_uri: str) -> tuple[DocumentIn, ...]:
    text = decode_text(_read(path, limits), path)
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
                             default_id=f"{path.stem}-{number}", where=f"{path}:{number}",
                             source_uri=source_uri)
        docs.append(DocumentIn(artifact=artifact, content=body, content_type=content_type))
    if not docs:
        raise Rejected(str(path), EMPTY, "has no records")
    return tuple(docs)


def load_documents(path: Path, *, source_uri: str = "", limits: Limits | None = None) -> Loaded:
    """The documents of one file (several for JSONL); raises `Rejected` with the reason.
    `source_uri` is where a reader can open the file (front matter `source_uri` wins)."""
    suffix = path.suffix.lower()
    limits = limits or Limits()
    try:
        if suffix in TEXT_TYPES:
            return Loaded((_text_document(path, limits, source_uri),), 0)
        if suffix in formats.CONVERTERS:
            doc, pages = _converted_document(path, limits, source_uri)
            return Loaded((doc,), pages)
        if suffix == ".jsonl":
            return Loaded(_jsonl_documents(path, limits, source_uri), 0)
    except Rejected:
        raise
    except InvalidArgument as err:              # a bad field value (date, reputation)
        raise _bad_front_matter(err, path) from None
    except RecursionError:
        raise Rejected(str(path), OVER_LIMIT, "nests too deeply to be read") from None
    except OSError as err:
        raise Rejected(str(path), UNREADABLE, f"cannot be read: {err.strerror or err}") from None
    raise Rejected(str(path), UNSUPPORTED, f"'{suffix or path.name}' is not a supported type; "
                                           f"accepted: {', '.join(SUPPORTED)}")


def load_document(path: Path, *, source_uri: str = "", limits: Limits | None = None) -> DocumentIn:
    """The one document of a file (not JSONL); raises `Rejected` with the reason."""
    loaded = load_documents(path, source_uri=source_uri, limits=limits)
    if len(loaded.documents) != 1:
        raise InvalidArgument(str(path), f"holds {len(loaded.documents)} documents; use load_documents")
    return loaded.documents[0]
