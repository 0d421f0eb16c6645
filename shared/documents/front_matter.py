"""Front matter: a YAML mapping between two `---` lines at the top of a text document.

    ---
    id: pallas-battery-guide-2026
    title: Pallas Battery Care Guide (2026)
    created: 2026-03-02
    owners: [hardware-team]
    ---

Parsed with PyYAML's safe loader. A block that is not valid YAML, is not a mapping, never ends
or holds an impossible date (`created: 2025-02-30`) is an error naming the file and the line;
`FrontMatter.lines` gives the line of each top-level key, so a bad field value (a date string,
a reputation) is named with its line too.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import yaml

from shared.errors import InvalidArgument


class FrontMatter(dict):
    """The front-matter mapping; `lines` maps each top-level key to its line in the file."""

    def __init__(self, values: dict[str, Any] | None = None, lines: dict[str, int] | None = None) -> None:
        super().__init__(values or {})
        self.lines: dict[str, int] = lines or {}

    def where(self, path: str, key: str) -> str:
        """`path:line` of `key` (just `path` when the key is not in the front matter)."""
        line = self.lines.get(key)
        return f"{path}:{line}" if line else path


class _Loader(yaml.SafeLoader):
    """The safe loader, with an impossible date (2025-02-30) a YAML error at its own line
    instead of a bare ValueError from the constructor."""


class _BadDate(yaml.constructor.ConstructorError):
    pass


def _timestamp(loader: _Loader, node: yaml.Node) -> Any:
    try:
        return yaml.constructor.SafeConstructor.construct_yaml_timestamp(loader, node)
    except (ValueError, OverflowError) as err:
        raise _BadDate(None, None, f"{node.value!r} is not a date: {err}", node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)


def _key_lines(loader: _Loader, node: yaml.Node | None) -> dict[str, int]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(k.value): k.start_mark.line + 2 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def _load(block: str, path: str) -> tuple[Any, dict[str, int]]:
    loader = _Loader(block)
    try:
        node = loader.get_single_node()
        lines = _key_lines(loader, node)
        try:
            return (loader.construct_document(node) if node is not None else None), lines
        except _BadDate as err:
            line = err.problem_mark.line + 2 if err.problem_mark is not None else 2
            key = next((k for k, n in lines.items() if n == line), "")
            raise InvalidArgument(f"{path}:{line}", f"{key + ': ' if key else ''}{err.problem}") from None
    finally:
        loader.dispose()


def split_front_matter(text: str, path: str) -> tuple[FrontMatter, str]:
    """(front-matter mapping, body) of `text`; (empty, text) when it has no front matter."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return FrontMatter(), text
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.strip() in ("---", "...")), None)
    if end is None:
        raise InvalidArgument(f"{path}:1", "front matter starts with '---' but never ends")
    block = "\n".join(lines[1:end])
    try:
        meta, key_lines = _load(block, path) if block.strip() else ({}, {})
    except yaml.YAMLError as err:
        # where the broken construct starts (an unclosed '['), else where the parser stopped
        mark = getattr(err, "context_mark", None) or getattr(err, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 2       # +1 for 0-based, +1 for the opening '---'
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InvalidArgument(f"{path}:{line}", f"front matter is not valid YAML: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as err:      # any other value the constructor refuses
        raise InvalidArgument(f"{path}:2", f"front matter is not valid YAML: {err}") from None
    if not isinstance(meta, dict):
        raise InvalidArgument(f"{path}:2", f"front matter must be a mapping of 'key: value' lines, "
                                           f"got {type(meta).__name__}")
    return FrontMatter(meta, key_lines), "\n".join(lines[end + 1:]).lstrip("\n")


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


def unix_time(value: Any, where: str, key: str = "") -> int:
    """Seconds since the epoch of a YAML date, datetime or ISO 8601 string (naive = UTC); 0 if empty.
    A bad value is an error at `where` (file:line) naming `key`."""
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
            raise InvalidArgument(where, f"{key + ': ' if key else ''}'{value}' is not a date "
                                         f"(use YYYY-MM-DD or ISO 8601)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    try:
        return int(parsed.timestamp())
    except (OverflowError, ValueError, OSError):
        raise InvalidArgument(where, f"{key + ': ' if key else ''}'{value}' is out of range") from None
