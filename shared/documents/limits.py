"""Bounds on what one file may cost to convert, so a hostile file (a zip bomb, a PDF bomb, a
billion-laughs XML, deeply nested HTML) is a per-file error with its reason, never a stalled
or exhausted ingest.

    archive entry (DOCX/PPTX/XLSX)  decompressed size per entry and in all, entries, ratio
    XML inside an archive           no DOCTYPE (so no entities, internal or external), depth
    PDF                             objects, pages, decompressed size per stream
    HTML                            element nesting depth
    XLSX                            data rows per sheet (not refused: the rows after the limit are
                                    left out, and the document says so in `truncated`)
    any file                        size on disk; in the conversion worker (worker.py) address
                                    space (RLIMIT_AS) and wall time

Every limit is a setting, `NUCLEUS_INGEST_<NAME>` (e.g. `NUCLEUS_INGEST_TIMEOUT_S=120`), with
the defaults below; docs/INGEST.md lists them.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from shared.errors import InvalidArgument

MB = 1024 * 1024
INGEST_PREFIX = "NUCLEUS_INGEST_"     # + a field's name, upper case


@dataclass(frozen=True, slots=True)
class Limits:
    max_file_mb: int = 512            # a file on disk
    max_entry_mb: int = 256           # one archive entry, decompressed
    max_archive_mb: int = 1024        # all entries of one archive, decompressed
    max_ratio: int = 200              # decompressed / compressed, for an entry over 1 MB
    max_entries: int = 20_000         # entries in one archive
    max_xml_depth: int = 256          # element nesting in an archive's XML (libxml2's own default)
    max_html_depth: int = 512         # element nesting in an HTML file
    max_pdf_objects: int = 1_000_000  # objects in one PDF's cross-reference tables
    max_pdf_stream_mb: int = 64       # one PDF stream, decompressed
    max_pages: int = 20_000           # pages, slides or sheets
    max_sheet_rows: int = 100_000     # data rows per sheet (below its header); the rest is left out
    timeout_s: float = 60.0           # wall time per file (conversion worker)
    memory_mb: int = 1024             # address space of the conversion worker

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Limits":
        """The defaults, overridden by `NUCLEUS_INGEST_<NAME>` variables."""
        env = os.environ if environ is None else environ
        values: dict[str, float | int] = {}
        for f in fields(cls):
            name = f"{INGEST_PREFIX}{f.name.upper()}"
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                continue
            kind = float if f.name == "timeout_s" else int
            try:
                value = kind(raw)
            except ValueError:
                raise InvalidArgument(name, f"{raw!r} is not a number") from None
            if value <= 0:
                raise InvalidArgument(name, f"must be positive, got {raw}")
            values[f.name] = value
        return replace(cls(), **values)

    def env(self) -> dict[str, str]:
        """These limits as `NUCLEUS_INGEST_*` variables (for a worker process)."""
        return {f"{INGEST_PREFIX}{f.name.upper()}": str(getattr(self, f.name)) for f in fields(self)}


def seconds(value: float) -> str:
    return f"{value:g} s"


__all__ = ["INGEST_PREFIX", "MB", "Limits", "seconds"]
