"""The fetch stage of SearchAndRank: the full entry and artifact of each chosen result.

The retrieval legs send ranking signals only; after ranking, one `GetEntries` call loads the
entries to return. An entry can vanish between the candidate search and that call (its
artifact deleted, or upserted into fewer chunks). Such a result is never returned: it is
dropped, the remaining candidates are ranked again and the freed places refilled from them
(at most MAX_REFILLS rounds; what still vanishes after that is dropped without a refill, and
the response says so). When the store cannot answer at all, the results keep their ids and
ranking signals with empty text (`placeholder_hit`), and the response is flagged degraded
with the reason.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np
from opentelemetry import trace

from ranking import Candidates, RankingConfig, rank
from services.rag_pipeline.merge import Merged, placeholder_hit
from services.rag_pipeline.ports import KnowledgeSource
from shared.errors import NucleusError

tracer = trace.get_tracer(__name__)

MAX_REFILLS = 3


async def load_hits(ks: KnowledgeSource, tenant_id: str, chosen: list[Merged], reasons: list[str],
                    vanished: set[str], *, timeout_s: float) -> None:
    """Load `hit` of the chosen candidates that have none (one GetEntries call). Entries the
    store no longer holds are added to `vanished` (their `hit` stays None); if the store
    cannot answer, every missing one gets a placeholder and `reasons` says why."""
    missing = [m for m in chosen if m.hit is None and m.entry_id not in vanished]
    if not missing:
        return
    try:
        fetched = {h.entry.id: h for h in await ks.get_entries(tenant_id, [m.entry_id for m in missing],
                                                               timeout_s=timeout_s)}
    except NucleusError as err:
        reasons.append(f"entry texts unavailable, ids and scores returned: {err}")
        for m in missing:
            m.hit = placeholder_hit(m, tenant_id)
        return
    for m in missing:
        hit = fetched.get(m.entry_id)
        if hit is None:
            vanished.add(m.entry_id)
        else:
            m.hit = hit


async def load_results(ks: KnowledgeSource, tenant_id: str, merged: list[Merged], candidates: Candidates,
                       ranked: Any, config: RankingConfig, k: int, reasons: list[str], vanished: set[str], *,
                       timeout_s: float) -> tuple[list[Merged], Candidates, Any]:
    """(candidates kept, their columns, their ranking) with every ranked row's hit loaded and
    no row pointing at a vanished entry (module docstring). `ranked` is None when nothing is left.
    The stage is the span `rag.fetch`."""
    with tracer.start_as_current_span("rag.fetch") as span:
        span.set_attribute("nucleus.results", k)
        return await _load_results(ks, tenant_id, merged, candidates, ranked, config, k, reasons, vanished,
                                   timeout_s=timeout_s)


async def _load_results(ks: KnowledgeSource, tenant_id: str, merged: list[Merged], candidates: Candidates,
                        ranked: Any, config: RankingConfig, k: int, reasons: list[str], vanished: set[str], *,
                        timeout_s: float) -> tuple[list[Merged], Candidates, Any]:
    for _ in range(MAX_REFILLS + 1):
        chosen = [merged[int(r)] for r in ranked.rows]
        await load_hits(ks, tenant_id, chosen, reasons, vanished, timeout_s=timeout_s)
        if all(m.hit is not None for m in chosen):
            return merged, candidates, ranked
        merged, candidates, ranked = _without(merged, candidates, config, k,
                                              keep=lambda m: m.entry_id not in vanished)
        if ranked is None:
            return merged, candidates, None
    reasons.append(f"entries kept vanishing while the results were fetched ({len(vanished)} dropped); "
                   "fewer results returned")
    return _without(merged, candidates, config, k, keep=lambda m: m.hit is not None)


def _without(merged: list[Merged], candidates: Candidates, config: RankingConfig, k: int,
             keep: Any) -> tuple[list[Merged], Candidates, Any]:
    """The candidates `keep` accepts, ranked again among themselves."""
    rows = [i for i, m in enumerate(merged) if keep(m)]
    index = np.asarray(rows, dtype=np.intp)
    kept = replace(candidates, **{f.name: getattr(candidates, f.name)[index] for f in fields(candidates)})
    remaining = [merged[i] for i in rows]
    return remaining, kept, (rank(kept, config, k) if remaining else None)
