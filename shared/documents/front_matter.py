"""Front matter: a YAML mapping between two `---` lines at the top of a text document.

    ---
    id: pallas-battery-guide-2026
    title: Pallas Battery Care Guide (2026)
    created: 2026-03-02
    owners: [hardware-team]
    ---

Parsed with PyYAML's safe loader. A block that is not valid YAML, is not a mapping or never
ends is an error naming the file and the line.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import yaml

from shared.errors import InvalidArgument


def split_front_matter(text: str, path: str) -> tuple[dict[str, Any], str]:
    """(front-matter mapping, body) of `text`; ({}, text) when it has no front matter."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() in ("---", "...")), None)
    if end is None:
        raise InvalidArgument(f"{path}:1", "front matter starts with '---' but never ends")
    block = "\n".join(lines[1:end])
    try:
        meta = yaml.safe_load(block) if block.strip() else {}
    except yaml.YAMLError as err:
        # where the broken construct starts (an unclosed '['), else where the parser stopped
        mark = getattr(err, "context_mark", None) or getattr(err, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 2       # +1 for 0-based, +1 for the opening '---'
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InvalidArgument(f"{path}:{line}", f"front matter is not valid YAML: {problem}") from None
    if not isinstance(meta, dict):
        raise InvalidArgument(f"{path}:2", f"front matter must be a mapping of 'key: value' lines, "
                                           f"got {type(meta).__name__}")
    return meta, "\n".join(lines[end + 1:]).lstrip("\n")


def text_value(meta: dict[str, Any], key: str, default: str = "") -> str:
    value = meta.get(key)
    if value is None:
        return default
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def list_value(meta: dict[str, Any], key: str) -> tuple[str, ...]:
    value = meta.get(key)
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
    return tuple(x.strip() for x in str(value).split(",") if x.strip())


def unix_time(value: Any, where: str) -> int:
    """Seconds since the epoch of a YAML date, datetime or ISO 8601 string (naive = UTC); 0 if empty."""
    if value is None or value == "":
        return 0
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            parsed = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgument(where, f"'{value}' is not a date (use YYYY-MM-DD or ISO 8601)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return int(parsed.timestamp())
