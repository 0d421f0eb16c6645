"""Reading documents from disk for ingest: .md/.markdown, .txt, .html/.htm files, each
optionally starting with a front-matter block of `key: value` lines between `---` lines:

    ---
    id: pallas-battery-guide-2026
    title: Pallas Battery Care Guide (2026)
    source_type: official-docs
    source_id: product-docs
    created: 2026-03-02
    modified: 2026-09-14
    owners: [hardware-team]
    tags: [pallas, battery]
    reputation: 0.9
    groups: []
    ---

Missing fields get defaults from the file (id = path stem, title = first heading or stem,
modified = file mtime). Errors name the file and line.
"""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Iterator

from shared.records import ArtifactMeta, DocumentIn
from shared.errors import InvalidArgument

CONTENT_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain",
                 ".html": "text/html", ".htm": "text/html"}
_LIST = re.compile(r"^\[(.*)\]$")


def _parse_date(value: str, where: str) -> int:
    value = value.strip().strip("'\"")
    if not value:
        return 0
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            return int(dt.datetime.fromisoformat(value).replace(tzinfo=dt.timezone.utc).timestamp())
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.timezone.utc)
        return int(parsed.timestamp())
    except ValueError:
        raise InvalidArgument(where, f"'{value}' is not a date (use YYYY-MM-DD or ISO 8601)") from None


def _parse_value(raw: str) -> str | list[str]:
    raw = raw.strip()
    m = _LIST.match(raw)
    if m:
        return [x.strip().strip("'\"") for x in m.group(1).split(",") if x.strip()]
    return raw.strip("'\"")


def split_front_matter(text: str, path: str) -> tuple[dict[str, str | list[str]], str]:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    meta: dict[str, str | list[str]] = {}
    for i, line in enumerate(lines[1:], start=2):
        if line.strip() == "---":
            return meta, "\n".join(lines[i:]).lstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise InvalidArgument(f"{path}:{i}", f"front matter line is not 'key: value': {line!r}")
        meta[key.strip()] = _parse_value(value)
    raise InvalidArgument(f"{path}:1", "front matter starts with '---' but never ends")


def load_document(path: Path) -> DocumentIn:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(str(path), "is not valid UTF-8 text") from None
    meta, body = split_front_matter(text, str(path))

    def s(key: str, default: str = "") -> str:
        v = meta.get(key, default)
        return ",".join(v) if isinstance(v, list) else str(v)

    def lst(key: str) -> tuple[str, ...]:
        v = meta.get(key, [])
        return tuple(v) if isinstance(v, list) else tuple(x.strip() for x in str(v).split(",") if x.strip())

    title = s("title")
    if not title:
        heading = re.search(r"^#\s+(.+)$", body, re.MULTILINE)
        title = heading.group(1).strip() if heading else path.stem
    rep = s("reputation", "0") or "0"
    try:
        reputation = float(rep)
    except ValueError:
        raise InvalidArgument(f"{path}: reputation", f"'{rep}' is not a number in [0, 1]") from None
    mtime = int(path.stat().st_mtime)
    artifact = ArtifactMeta(
        artifact_id=s("id") or path.stem, title=title, source_type=s("source_type", "file"),
        source_id=s("source_id", path.parent.name), source_uri=s("source_uri", path.resolve().as_uri()),
        file_name=path.name, file_type=path.suffix.lstrip(".").lower(),
        created_unix=_parse_date(s("created"), f"{path}: created") or mtime,
        modified_unix=_parse_date(s("modified"), f"{path}: modified") or _parse_date(s("created"), f"{path}: created") or mtime,
        owners=lst("owners"), tags=lst("tags"), reputation_prior=reputation, visibility_groups=lst("groups"),
    )
    return DocumentIn(artifact=artifact, content=body, content_type=CONTENT_TYPES[path.suffix.lower()])


def iter_paths(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    if not root.exists():
        raise InvalidArgument("PATH", f"{root} does not exist")
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix.lower() in CONTENT_TYPES and p.name.lower() != "readme.md":
            yield p
