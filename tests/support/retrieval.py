"""The KnowledgeStore's retrieval, as the tests ask for it: one function per kind of answer over a
client's single `retrieve` call (services/knowledge_store/front.py), for tests that check one leg."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.records import CandidateColumns, Hit, RetrievalRequest, ScoreCompletion, SearchFilters


async def search_by_vector(client: Any, tenant_id: str, vectors: np.ndarray, top_k: int, filters: SearchFilters,
                           **call: Any) -> list[list[Hit]]:
    answer = await client.retrieve(RetrievalRequest(tenant_id, top_k=top_k, filters=filters, vectors=vectors,
                                                    hits=True), **call)
    return [list(h) for h in answer.dense_hits]


async def candidates_by_vector(client: Any, tenant_id: str, vectors: np.ndarray, top_k: int, filters: SearchFilters,
                               **call: Any) -> list[CandidateColumns]:
    answer = await client.retrieve(RetrievalRequest(tenant_id, top_k=top_k, filters=filters, vectors=vectors), **call)
    return list(answer.dense)


async def candidates_by_vector_with_completion(
        client: Any, tenant_id: str, vectors: np.ndarray, top_k: int, filters: SearchFilters, *, keywords: Any,
        extra_keywords: Sequence[str] = (), complete_rows: Any = (), feedback_expansion: str = "",
        **call: Any) -> tuple[list[CandidateColumns], ScoreCompletion]:
    answer = await client.retrieve(RetrievalRequest(
        tenant_id, _phrases(keywords, extra_keywords), top_k, filters, vectors=vectors, complete=True,
        complete_rows=complete_rows, feedback_expansion=feedback_expansion), **call)
    return list(answer.dense), answer.completion


async def candidates_by_filters(client: Any, tenant_id: str, keywords: Any, extra_keywords: Sequence[str], top_k: int,
                                filters: SearchFilters, *, feedback_expansion: str = "",
                                **call: Any) -> tuple[CandidateColumns, list[str]]:
    answer = await client.retrieve(RetrievalRequest(tenant_id, _phrases(keywords, extra_keywords), top_k, filters,
                                                    keyword=True, feedback_expansion=feedback_expansion), **call)
    return answer.keyword, list(answer.terms)


async def search_by_filters(client: Any, tenant_id: str, keywords: Any, extra_keywords: Sequence[str], top_k: int,
                            filters: SearchFilters, *, feedback_expansion: str = "",
                            **call: Any) -> tuple[list[Hit], list[str]]:
    answer = await client.retrieve(RetrievalRequest(tenant_id, _phrases(keywords, extra_keywords), top_k, filters,
                                                    keyword=True, hits=True, feedback_expansion=feedback_expansion),
                                   **call)
    return list(answer.keyword_hits), list(answer.terms)


async def candidates_by_both_legs(
        client: Any, tenant_id: str, vectors: np.ndarray, top_k: int, filters: SearchFilters, *, keywords: Any,
        extra_keywords: Sequence[str] = (), feedback_expansion: str = "", **call: Any,
) -> tuple[CandidateColumns, list[str], list[CandidateColumns], ScoreCompletion]:
    answer = await client.retrieve(RetrievalRequest(
        tenant_id, _phrases(keywords, extra_keywords), top_k, filters, vectors=vectors, keyword=True,
        complete=True, feedback_expansion=feedback_expansion), **call)
    return answer.keyword, list(answer.terms), list(answer.dense), answer.completion


def _phrases(keywords: Any, extra_keywords: Sequence[str]) -> Any:
    from shared.records import query_phrases
    return query_phrases(keywords, extra_keywords) if extra_keywords else keywords
