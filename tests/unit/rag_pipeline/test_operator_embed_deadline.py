"""An operator's longer embed deadline (SearchAndRank `embed_timeout_s`, asked by `nucleus bench
--embed-timeout` and `nucleus tune`): honoured for operator calls up to the request deadline,
refused for anybody else and beyond the bound, naming the field. A language model slower than
the serving deadline, in process."""
from __future__ import annotations

import asyncio

import pytest

from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import SearchRequest
from shared.errors import InvalidArgument, PermissionDenied
from shared.identity import OPERATOR, Principal
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc


class SlowModel(InProcessLanguageModel):
    async def embed(self, texts, *, purpose="query", timeout_s=None):
        async def slow():
            await asyncio.sleep(0.3)
            return await self.embedder.embed(list(texts))
        return await self._within(slow(), timeout_s)          # a miss: DeadlineExceeded, as the client's


async def test_only_an_operator_may_wait_longer_for_the_embedding_and_never_past_the_deadline(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path, scrub_interval_s=0)
    pipeline = RagPipeline(RagPipelineSettings(embed_timeout_s=0.1, deadline_s=2.0), knowledge=knowledge,
                           llm=SlowModel())
    operator = Principal(tenant_id="", user_id="", auth_method=OPERATOR, roles=(OPERATOR,))
    user = Principal(tenant_id="t", user_id="ann", auth_method="api_key")
    try:
        await knowledge.store.ingest("t", "", [doc("d", "The pump seal leaks under pressure.", title="Pump")])
        served = await pipeline.search(SearchRequest(query="pump seal", tenant_id="t"), operator)
        assert served.degraded and any("embedding" in r for r in served.degraded_reasons), served.degraded_reasons
        waited = await pipeline.search(SearchRequest(query="pump seal", tenant_id="t", embed_timeout_s=1.0), operator)
        assert not waited.degraded and [r.artifact.artifact_id for r in waited.results] == ["d"]
        with pytest.raises(PermissionDenied, match="embed_timeout_s"):
            await pipeline.search(SearchRequest(query="pump seal", tenant_id="t", embed_timeout_s=1.0), user)
        with pytest.raises(InvalidArgument, match="embed_timeout_s"):
            await pipeline.search(SearchRequest(query="pump seal", tenant_id="t", embed_timeout_s=5.0), operator)
    finally:
        await pipeline.close()
