"""Integers of a SearchAndRank request and of profile reads are range-checked by the core, for
gRPC callers too (whose requests pass no MCP schema): InvalidArgument naming the field."""
from __future__ import annotations

import pytest

from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import SearchRequest
from shared.errors import MAX_UNIX_TIME
from shared.errors import InvalidArgument
from shared.records import SearchFilters
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel


@pytest.fixture
async def pipeline(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    yield RagPipeline(RagPipelineSettings(), knowledge, InProcessLanguageModel())
    await knowledge.close()


@pytest.mark.parametrize("filters,field", [
    (SearchFilters(date_from_unix=2**63), "filters.date_from_unix"),
    (SearchFilters(date_from_unix=-1), "filters.date_from_unix"),
    (SearchFilters(date_to_unix=MAX_UNIX_TIME + 1), "filters.date_to_unix"),
    (SearchFilters(date_from_unix=200, date_to_unix=100), "filters.date_to_unix"),
])
async def test_search_dates_out_of_range_name_the_field_before_any_backend_call(pipeline, filters, field):
    with pytest.raises(InvalidArgument) as err:
        await pipeline.search_and_rank(SearchRequest(tenant_id="acme", query="q", filters=filters))
    assert err.value.field == field
    assert pipeline._ks.calls == []


@pytest.mark.parametrize("version", [2**31, 2**63, -1])
async def test_profile_versions_out_of_range_name_the_field(pipeline, version):
    with pytest.raises(InvalidArgument) as err:
        await pipeline.get_profile("acme", "", "x", version)
    assert err.value.field == "version"
    assert pipeline._ks.calls == []
