"""What the console's pages show, computed from the RAGPipeline core (no HTTP here).

Every call goes through `RagPipeline.search` (or the profile calls) with the session's verified
Principal: the tenant is the principal's, never one from a form (an operator's credential names
no tenant, so an operator picks one; `RagPipeline.tenant_for` decides).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from statistics import fmean
from typing import Any, Callable

from services.rag_pipeline.console.evaluation import JudgedQuery, distinct, movements, ndcg_at, rbo, recall_at
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import FACTORS, Preferences, RankedResult, SearchRequest, SearchResponse
from services.rag_pipeline.why_not import why_not
from ranking.profile import RankingProfile
from shared.errors import PermissionDenied
from shared.identity import OPERATOR, Principal
from shared.ingest_runs import read_runs

EVAL_K = 10
EVAL_CONCURRENCY = 4
MAX_TOP_K = 50


def _result_view(rank: int, r: RankedResult) -> dict[str, Any]:
    e = r.explanation
    factors = []
    for i, name in enumerate(FACTORS):
        factors.append({"name": name.capitalize(), "value": r.scores[i],
                        "weight": e.weights[i] if e else None, "contribution": e.contributions[i] if e else None})
    return {
        "rank": rank, "entry_id": r.entry.id, "artifact_id": r.artifact.artifact_id,
        "title": r.artifact.title or r.artifact.artifact_id, "source_uri": r.artifact.source_uri,
        "source_id": r.source_id, "snippet": r.snippet, "overall": r.overall, "probability": r.probability,
        "snippet_parts": snippet_parts(r.snippet, r.highlights), "factors": factors, "explanation": e,
        "duplicates": [{"artifact_id": d.artifact.artifact_id, "source_id": d.artifact.source_id or d.source_id}
                       for d in r.duplicates],
    }


def snippet_parts(snippet: str, highlights: tuple[tuple[int, int], ...]) -> list[tuple[str, bool]]:
    """The snippet cut at its highlights: (text, marked) in order; the template marks each
    highlighted part with <mark> and escapes every part."""
    parts, at = [], 0
    for start, end in highlights:
        if start >= at:
            parts += [(snippet[at:start], False), (snippet[start:end], True)]
            at = end
    parts.append((snippet[at:], False))
    return [(text, marked) for text, marked in parts if text]


async def search(pipeline: RagPipeline, principal: Principal, *, query: str, top_k: int, profile: str,
                 tenant: str = "") -> dict[str, Any]:
    """One explained search: the results and the response's timings, profile and flags."""
    request = SearchRequest(tenant_id=tenant, query=query, top_k_final=top_k,
                            prefs=Preferences(profile_name=profile, explain=True))
    response = await pipeline.search(request, principal)
    return response_view(response)


async def why_not_panel(pipeline: RagPipeline, principal: Principal, *, query: str, top_k: int, profile: str,
                        ids: str, tenant: str = "") -> dict[str, Any]:
    """The why-not panel: `ids` (separated by spaces or commas) explained against the same search."""
    request = SearchRequest(tenant_id=tenant, query=query, top_k_final=top_k,
                            prefs=Preferences(profile_name=profile, explain=True))
    answer = await why_not(pipeline, None, request, principal, ids.replace(",", " ").split())
    return answer.model_dump()


def response_view(response: SearchResponse) -> dict[str, Any]:
    return {
        "results": [_result_view(i + 1, r) for i, r in enumerate(response.results)],
        "timings": [(stage, ms) for stage, ms in response.timings if stage != "total"],
        "total_ms": dict(response.timings).get("total", sum(ms for _, ms in response.timings)),
        "profile": f"{response.profile_name or 'builtin'} v{response.profile_version}",
        "degraded": response.degraded, "degraded_reasons": list(response.degraded_reasons),
        "candidates": response.candidates_considered, "phrases": list(response.query_phrases),
        "nothing_visible": response.nothing_visible,
    }


async def compare(pipeline: RagPipeline, principal: Principal, *, query: str, top_k: int, profile_a: str,
                  profile_b: str, tenant: str = "") -> dict[str, Any]:
    """The same query under two profiles: both lists, B's markers against A, A's dropped rows, RBO."""
    a, b = await asyncio.gather(*(search(pipeline, principal, query=query, top_k=top_k, profile=p, tenant=tenant)
                                  for p in (profile_a, profile_b)))
    ids_a = [r["entry_id"] for r in a["results"]]
    ids_b = [r["entry_id"] for r in b["results"]]
    for row, (marker, delta) in zip(b["results"], movements(ids_a, ids_b)):
        row["marker"], row["delta"] = marker, delta
    kept = set(ids_b)
    for row in a["results"]:
        row["marker"] = "same" if row["entry_id"] in kept else "dropped"
    return {"a": a, "b": b, "rbo": rbo(ids_a, ids_b, 0.9)}


async def evaluate(pipeline: RagPipeline, principal: Principal, queries: list[JudgedQuery], *, profile_a: str,
                   profile_b: str, tenant: str = "", progress: Callable[[int], None] | None = None
                   ) -> dict[str, Any]:
    """nDCG@10 and recall@10 of each query under both profiles (over distinct artifacts), the rows
    sorted by the nDCG change (largest first), and the summary; `progress(n)` after each query."""
    gate = asyncio.Semaphore(EVAL_CONCURRENCY)
    searched = [0]

    async def ranked(query: str, profile: str) -> list[str]:
        async with gate:
            request = SearchRequest(tenant_id=tenant, query=query, top_k_final=MAX_TOP_K,
                                    prefs=Preferences(profile_name=profile))
            response = await pipeline.search(request, principal)
        searched[0] += 1
        if progress is not None:
            progress(searched[0] // 2)
        return distinct([r.artifact.artifact_id for r in response.results])

    lists = await asyncio.gather(*(ranked(q.query, p) for q in queries for p in (profile_a, profile_b)))
    rows = []
    for i, q in enumerate(queries):
        la, lb = lists[2 * i], lists[2 * i + 1]
        na, nb = ndcg_at(la, q.grades, EVAL_K), ndcg_at(lb, q.grades, EVAL_K)
        ra, rb = recall_at(la, q.grades, EVAL_K), recall_at(lb, q.grades, EVAL_K)
        rows.append({"query": q.query, "ndcg_a": na, "ndcg_b": nb, "ndcg_delta": nb - na, "recall_a": ra,
                     "recall_b": rb, "recall_delta": rb - ra, "rbo": rbo(la[:EVAL_K], lb[:EVAL_K], 0.9)})
    rows.sort(key=lambda r: (-abs(r["ndcg_delta"]), -abs(r["recall_delta"]), r["query"]))
    summary = {
        "queries": len(rows),
        "mean_ndcg_a": fmean(r["ndcg_a"] for r in rows), "mean_ndcg_b": fmean(r["ndcg_b"] for r in rows),
        "mean_recall_a": fmean(r["recall_a"] for r in rows), "mean_recall_b": fmean(r["recall_b"] for r in rows),
        "wins": sum(r["ndcg_delta"] > 1e-9 for r in rows), "losses": sum(r["ndcg_delta"] < -1e-9 for r in rows),
    }
    summary["ties"] = summary["queries"] - summary["wins"] - summary["losses"]
    return {"rows": rows, "summary": summary}


async def profiles(pipeline: RagPipeline, tenant: str) -> list[RankingProfile]:
    return sorted(await pipeline.list_profiles(tenant), key=lambda p: (p.persona_id, p.name))


async def put_profile(pipeline: RagPipeline, principal: Principal, *, tenant: str, name: str,
                      weights: tuple[float, float, float, float], fusion: str) -> RankingProfile:
    """A new version of a named (not default) profile of the principal's tenant, stored by the core."""
    profile = RankingProfile(tenant_id=tenant, name=name, relevancy_weight=weights[0], recency_weight=weights[1],
                             richness_weight=weights[2], reputation_weight=weights[3])
    if fusion:
        profile = replace(profile, fusion_method=fusion)
    return await pipeline.put_profile(profile, principal)


async def tenant(pipeline: RagPipeline, principal: Principal, tenant_id: str,
                 data_dir: Path | None = None) -> dict[str, Any]:
    """The tenant's stats (GetTenantStats through the core, asked for the principal) and the store's
    condition as the store gives it to the principal (an admin: its tenant's view; the operator: the
    whole of it, every tenant's problems; a refusal: the page says where to read it), and whether the
    tenant is open or evicted."""
    stats = await pipeline.tenant_stats(tenant_id, principal)
    condition, refused = None, ""
    try:
        status = await pipeline.store_status(principal)
    except PermissionDenied:
        refused = "the store gives its storage condition to the operator and tenant admins only: run `nucleus status`"
    else:
        problems = [p for p in status.problems if p.tenant_id == stats.tenant_id or principal.has_role(OPERATOR)]
        memory = dict(status.tenants)
        condition = {"state": status.state, "read_only": status.read_only, "free_bytes": status.free_bytes,
                     "data_dir": status.data_dir, "scrub": status.scrub,       # "" in a tenant admin's view
                     "total_bytes": status.total_bytes, "problems": problems, "open_tenants": status.open_tenants,
                     "repaired_rows": status.repaired_rows, "open": stats.tenant_id in memory,
                     "memory_bytes": memory.get(stats.tenant_id, 0), "budget_bytes": status.memory_budget_bytes}
    sources = sorted(stats.sources, key=lambda s: (-s.entries, s.source_id))
    runs = await asyncio.to_thread(read_runs, data_dir, stats.tenant_id)        # the verified tenant's only
    return {"stats": stats, "sources": sources, "condition": condition, "refused": refused,
            "last_indexed": when(stats.last_indexed_unix), "runs": runs}


def when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix)) if unix > 0 else "never"


__all__ = ["search", "compare", "evaluate", "profiles", "put_profile", "tenant", "MAX_TOP_K", "EVAL_K"]
