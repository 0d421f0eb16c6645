"""The profile editor's form: every field of `RankingProfile`, read from the dataclass.

    editable_fields()              the fields a person edits (not the tenant, version or update time),
                                   each with its kind (number, whole, text, choice, flag) and choices
    parse_profile(tenant, form)    (profile, errors by field): every field's type checked at once;
                                   the store then validates the whole profile (put_ranking_profile),
                                   and `field_of` puts its error on the field it names
    diff(older, newer)             the fields that changed between two versions

Fields are listed from the dataclass, so a field added to `RankingProfile` appears in the editor
and the history without a change here (a choice list comes from the ranking vocabulary).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from ranking.inputs import FUSIONS, RECENCY_MODES
from ranking.profile import FEEDBACK_EXPANSIONS, MODEL_FIELDS, RankingProfile
from shared.errors import NucleusError

#: Fields the store sets (or the session decides), never the form.
NOT_EDITED = ("tenant_id", "version", "updated_unix", *MODEL_FIELDS)
#: Fields whose values are one of a list (the rest are free text, numbers or flags).
CHOICES: dict[str, tuple[str, ...]] = {"fusion_method": FUSIONS, "recency_mode": RECENCY_MODES,
                                       "feedback_expansion": FEEDBACK_EXPANSIONS}
MAX_TEXT = 128


@dataclass(frozen=True, slots=True)
class FormField:
    name: str
    kind: str                       # "number" | "whole" | "text" | "choice" | "flag"
    default: Any
    choices: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def editable_fields() -> list[FormField]:
    out = []
    for f in fields(RankingProfile):
        if f.name in NOT_EDITED:
            continue
        kind = {"float": "number", "int": "whole", "bool": "flag"}.get(str(f.type), "text")
        if f.name in CHOICES:
            kind = "choice"
        out.append(FormField(f.name, kind, f.default, CHOICES.get(f.name, ())))
    return out


def _value(field: FormField, raw: str | None) -> Any:
    text = (raw or "").strip()
    if field.kind == "flag":
        return raw is not None and text.lower() not in ("", "0", "false", "off")
    if field.kind == "number":
        try:
            value = float(text)
        except ValueError:
            raise ValueError("must be a number") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
    if field.kind == "whole":
        try:
            return int(text)
        except ValueError:
            raise ValueError("must be a whole number") from None
    if field.kind == "choice" and text not in field.choices:
        raise ValueError(f"must be one of {', '.join(field.choices)}")
    if len(text) > MAX_TEXT:
        raise ValueError(f"at most {MAX_TEXT} characters")
    return text


def parse_profile(tenant: str, form: Mapping[str, Any]) -> tuple[RankingProfile | None, dict[str, str]]:
    """The profile a form describes, or None and the problem of each field that is not of its type."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in editable_fields():
        raw = form.get(field.name)
        try:
            values[field.name] = _value(field, None if raw is None else str(raw))
        except ValueError as err:
            errors[field.name] = str(err)
    for name in MODEL_FIELDS:          # a model is named only by `nucleus tune`; an edit keeps it
        if str(form.get(name) or "").strip() not in ("", "0"):
            errors[name] = "is set only by `nucleus tune`, never by the profile editor"
    if errors:
        return None, errors
    return RankingProfile(tenant_id=tenant, **values), {}


def field_of(err: NucleusError) -> str:
    """The profile field a store error names ("" when it names none of them)."""
    names = {f.name for f in editable_fields()}
    named = err.field or str(err).partition(": ")[0]
    named = named.rsplit(".", 1)[-1]
    return named if named in names else ""


def shown(value: Any) -> Any:
    """A stored value as a person reads it: weights travel as float32, so 0.7 comes back as
    0.699999988…; six significant digits give 0.7 again (and hide no real change)."""
    return float(f"{value:.6g}") if isinstance(value, float) else value


def form_values(profile: RankingProfile | None) -> dict[str, Any]:
    """The form's values: the profile's, else every field's default."""
    return {f.name: shown(getattr(profile, f.name) if profile is not None else f.default) for f in editable_fields()}


def diff(older: RankingProfile | None, newer: RankingProfile) -> list[tuple[str, Any, Any]]:
    """(field, old value, new value) of every edited field that differs (all of them against None)."""
    rows = []
    for field in editable_fields():
        new = shown(getattr(newer, field.name))
        old = shown(getattr(older, field.name)) if older is not None else None
        if older is None or old != new:
            rows.append((field.name, old, new))
    return rows


__all__ = ["FormField", "editable_fields", "parse_profile", "field_of", "form_values", "diff", "shown", "NOT_EDITED"]
