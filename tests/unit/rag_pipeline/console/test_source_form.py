"""The console's source editor sends only the fields a form changed, typed as the sources file holds them."""
from __future__ import annotations

import pytest

from services.rag_pipeline.console.source_form import changes_of, values_of
from shared.errors import InvalidArgument

ENTRY = {"id": "legal", "kind": "rag", "url": "https://legal.example.com/mcp", "groups": ["legal", "research"],
         "compliance": "internal", "timeout_s": 3.0, "reputation": 0.7, "enabled": True, "name": "Legal"}


def test_an_unchanged_form_changes_nothing():
    assert changes_of(ENTRY, values_of(ENTRY)) == ({}, [])
    assert changes_of(ENTRY, {}) == ({}, [])                 # fields left out keep their value


def test_changed_fields_are_typed_and_emptied_ones_cleared():
    form = {**values_of(ENTRY), "groups": "legal , ops,", "reputation": "0.9", "name": "", "description": "new"}
    assert changes_of(ENTRY, form) == ({"groups": ["legal", "ops"], "reputation": 0.9, "description": "new"},
                                       ["name"])


def test_a_mistyped_number_names_its_field():
    with pytest.raises(InvalidArgument, match="timeout_s"):
        changes_of(ENTRY, {**values_of(ENTRY), "timeout_s": "soon"})
    with pytest.raises(InvalidArgument, match="reputation"):
        changes_of(ENTRY, {**values_of(ENTRY), "reputation": "inf"})
