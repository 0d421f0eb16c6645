"""Damage found is damage shown: while a serving tenant has rows failing their checksums (left
out of answers, storage/rowsums.py), every SearchAndRank of it says `degraded` with one
tenant-wide reason that names no row; another tenant's answers stay whole. A real store in
tmp_path, a row changed behind its back by a second SQLite connection while it serves."""
from __future__ import annotations

import sqlite3

from services.knowledge_store.front import DAMAGED
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import SearchRequest
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

QUERY = "pump seal leaks"


async def test_a_row_damaged_while_serving_makes_the_next_answers_degraded_without_naming_it(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path, scrub_interval_s=0)
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())
    try:
        for tenant in ("t", "u"):
            await knowledge.store.ingest(tenant, "", [
                doc(f"d{i}", f"Notes on pump {i}: the seal number {i} leaks under pressure.", title=f"Pump {i}")
                for i in range(4)])
        whole = await pipeline.search_and_rank(SearchRequest(query=QUERY, tenant_id="t", top_k_final=4))
        assert not whole.degraded and len(whole.results) == 4
        db = sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite", isolation_level=None)
        db.execute("UPDATE entries SET text = replace(text, 'seal', 'SEAL') WHERE entry_id = 'd1#0'")   # bit rot
        db.close()
        answers = [await pipeline.search_and_rank(SearchRequest(query=QUERY, tenant_id="t", top_k_final=4))
                   for _ in range(2)]
        last = answers[-1]
        assert last.degraded and DAMAGED in last.degraded_reasons
        assert "d1" not in " ".join(last.degraded_reasons)            # tenant-wide: no row is named
        assert "d1" not in {r.artifact.artifact_id for r in last.results}
        other = await pipeline.search_and_rank(SearchRequest(query=QUERY, tenant_id="u", top_k_final=4))
        assert not other.degraded and len(other.results) == 4
    finally:
        await pipeline.close()
