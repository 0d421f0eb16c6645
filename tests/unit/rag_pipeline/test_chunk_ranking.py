"""A search may rank chunks instead of documents (`SearchRequest.collapse=False`, what an answer's
synthesis asks for): several chunks of one document come back, where the default ranking (one
per document) shows only its best. Real KnowledgeStore core (SQLite + FAISS in tmp_path)."""
from __future__ import annotations

from collections import Counter

from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import SearchRequest
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

SECTIONS = ["Claims must be submitted within 30 days of the trip.", "Receipts are required for items over 25 USD.",
            "Business class only for flights longer than 10 hours."]


async def test_without_collapse_several_chunks_of_one_document_are_ranked(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    filler = " ".join(f"travel expense policy paragraph {i} about claims and receipts." for i in range(60))
    long_policy = "\n\n".join(f"## Section {n}\n\n{filler}\n\n{line}" for n, line in enumerate(SECTIONS))
    await knowledge.store.ingest("t", "", [doc("policy", long_policy, title="Travel policy"),
                                           doc("faq", "Expense claims FAQ: receipts and claims.", title="FAQ")])
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())
    try:
        query = "expense claims receipts travel policy"
        by_document = await pipeline.search_and_rank(SearchRequest(tenant_id="t", query=query, top_k_final=50))
        by_chunk = await pipeline.search_and_rank(SearchRequest(tenant_id="t", query=query, top_k_final=50,
                                                                collapse=False))
    finally:
        await knowledge.close()
    per_document = Counter(r.artifact.artifact_id for r in by_document.results)
    per_chunk = Counter(r.artifact.artifact_id for r in by_chunk.results)
    assert per_document == {"policy": 1, "faq": 1}
    assert per_chunk["policy"] >= 3 and per_chunk["faq"] == 1
    assert len({r.entry.id for r in by_chunk.results}) == len(by_chunk.results)       # no chunk twice
