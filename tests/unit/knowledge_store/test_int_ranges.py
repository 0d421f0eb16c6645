"""Every integer a KnowledgeStore call takes is range-checked before it reaches SQLite: an
InvalidArgument naming the field, never an OverflowError from the driver."""
from __future__ import annotations

import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from shared.errors import MAX_UNIX_TIME
from shared.errors import InvalidArgument
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


@pytest.fixture
async def store(tmp_path):
    s = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await s.ingest("t", "", [doc("a", "some text about volcanoes")])
    yield s
    s.close()


@pytest.mark.parametrize("name,value", [("date_from_unix", 2**63), ("date_to_unix", 2**64),
                                        ("date_from_unix", MAX_UNIX_TIME + 1), ("date_to_unix", -1)])
async def test_filter_dates_beyond_the_range_name_the_field(store, name, value):
    with pytest.raises(InvalidArgument) as err:
        await store.keyword("t", "volcanoes", [], 5, SearchFilters(**{name: value}), hits=True)
    assert err.value.field == f"filters.{name}"


@pytest.mark.parametrize("name", ["created_unix", "modified_unix"])
async def test_artifact_times_beyond_the_range_name_the_field(store, name):
    with pytest.raises(InvalidArgument) as err:
        await store.ingest("t", "", [doc("b", "text", **{name: 2**63})])
    assert err.value.field.endswith(f".{name}")


@pytest.mark.parametrize("entry_id", ["a#99999999999", "a#" + "9" * 40, "a#²", "a#-1"])
async def test_entry_ids_with_a_chunk_index_out_of_range_are_invalid(store, entry_id):
    with pytest.raises(InvalidArgument) as err:
        await store.get_entries("t", [entry_id])
    assert err.value.field == "entry_ids[0]"
    with pytest.raises(InvalidArgument) as err:
        await store.record_feedback("t", "entry", entry_id, True, "u1")
    assert err.value.field == "target_id"


@pytest.mark.parametrize("version", [2**31, 2**63, -1])
async def test_profile_versions_out_of_range_name_the_field(store, version):
    with pytest.raises(InvalidArgument) as err:
        await store.get_profile("t", "", "x", version)
    assert err.value.field == "version"
