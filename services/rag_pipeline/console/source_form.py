"""The console's source editor: the fields a tenant admin may set (and the operator too), read from
and written through the federation's editor, so its rules decide (docs/FEDERATION.md "Editing
sources": https-only public URLs for a tenant admin, operator-held sources keep their URL, …).

    EDIT_FIELDS                       (field, kind) shown on the form
    values_of(entry)                  the form's values from a source's readable entry
    changes_of(entry, form)           (changes, cleared): only the fields that differ are sent
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from shared.errors import InvalidArgument

#: field -> kind ("text", "list": comma separated, "number")
EDIT_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "text"), ("description", "text"), ("url", "text"), ("groups", "list"), ("timeout_s", "number"),
    ("reputation", "number"), ("compliance", "text"), ("credential_header", "text"))
MAX_TEXT = 1_000


def values_of(entry: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for name, kind in EDIT_FIELDS:
        value = entry.get(name)
        out[name] = ", ".join(value) if kind == "list" and isinstance(value, list) else (
            "" if value is None else str(value))
    return out


def _converted(name: str, kind: str, text: str) -> Any:
    if kind == "list":
        return [part.strip() for part in text.split(",") if part.strip()]
    if kind == "number":
        try:
            value = float(text)
        except ValueError:
            raise InvalidArgument(name, "must be a number") from None
        if not math.isfinite(value):
            raise InvalidArgument(name, "must be a finite number")
        return value
    if len(text) > MAX_TEXT:
        raise InvalidArgument(name, f"at most {MAX_TEXT} characters")
    return text


def changes_of(entry: Mapping[str, Any], form: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The fields the form changed (as the sources file holds them) and those it emptied."""
    current = values_of(entry)
    changes: dict[str, Any] = {}
    cleared: list[str] = []
    for name, kind in EDIT_FIELDS:
        text = str(form.get(name, current[name])).strip()
        if text == current[name].strip():
            continue
        if not text and kind != "list":
            cleared.append(name)
        else:
            changes[name] = _converted(name, kind, text)
    return changes, cleared


__all__ = ["EDIT_FIELDS", "values_of", "changes_of"]
