"""A ranking profile may name only a re-ranker this stack has configured.

The KnowledgeStore checks a profile's fields, the re-ranker against the vocabulary
(`ranking.profile.RERANKERS`), but only LlmOrchestration knows which model re-rankers the
operator set up (a cross-encoder directory, a rerank API endpoint). So the RAGPipeline, which
every profile write from a user passes through (MCP, gRPC, the console), asks it
(GetModelInfo's `rerankers`) before the store: a profile naming one that is not configured is
refused, naming the field and what is accepted. A profile that was valid when stored and whose
model the operator removed since degrades at search time ("rerank unavailable", core.py).
"""
from __future__ import annotations

from ranking.profile import RankingProfile
from services.rag_pipeline.ports import LanguageModel
from shared.errors import InvalidArgument


async def check_configured(llm: LanguageModel, profile: RankingProfile, *, timeout_s: float | None = None) -> None:
    """InvalidArgument("reranker", …) unless `profile.reranker` is "" or configured on this stack;
    LlmOrchestration's errors (Unavailable, …) pass through: nothing is stored unchecked."""
    if not profile.reranker:
        return
    configured = await llm.rerankers(timeout_s=timeout_s)
    if profile.reranker not in configured:
        raise InvalidArgument("reranker", f"{profile.reranker!r} is not configured on this stack; accepted: '' "
                                          f"(no model re-ranking), {', '.join(repr(r) for r in configured)}")
