"""Remote hits as ranking candidates beside the local ones (the federated part of SearchAndRank).

    stage = FederatedSearch(federation, rescorer, plan, query)      # starts the fan-out at once
    ...local retrieval runs meanwhile...
    rows, reasons = await stage.candidates(tenant, phrases, vectors)   # re-scored, de-duplicated

Each remote hit that survives de-duplication (dedupe.py) becomes one `Merged` candidate with
its text already loaded and the same raw signals a local entry has, on the local scale
(rescore.py): dense cosine, BM25 with the local tenant's statistics; and the other 4R inputs
from what the remote returned — recency from its date (0 = unknown, neutral), richness from
its text (as the store computes it), reputation from the source's prior (sources file; with the
remote's own reputation of the document when it reports one, `prior`) smoothed by the votes
the tenant's users gave the source (`votes`: one per user per source, services/rag_pipeline/
feedback.py) as a local artifact's prior is smoothed by its votes. The
local candidates are not touched, so the fusion (TMM: each leg divided by its best score
over all candidates) and the 4R blend see one set of comparable numbers. The remote's own
score is kept for the explanation only.
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Awaitable, Sequence

import numpy as np

from services.rag_pipeline.federation.dedupe import LocalKeys, dedupe_remote
from services.rag_pipeline.federation.fanout import Federation, Plan, RemoteQuery
from services.rag_pipeline.federation.hits import ERROR, LOCAL, OK, RemoteHit, SourceReport
from services.rag_pipeline.federation.rescore import Rescored, Rescorer
from services.rag_pipeline.merge import Merged
from services.rag_pipeline.models import RankedResult
from shared.records import ArtifactSummary, Entry, Hit, QueryPhrases, SourceVotes

HEADLINE_WORDS = 12


@dataclass(slots=True)
class FederatedTimings:
    fanout_ms: float = 0.0            # from the start of the query until every remote answered or was cut
    slowest_source_ms: float = 0.0
    rescore_ms: float = 0.0
    embedded: int = 0                 # remote texts sent to the model (the others came from the cache)
    carried: int = 0                  # remote hits scored with the vector their remote sent (peer_vectors.py)
    analysed: int = 0                 # of those, BM25 from the analysed terms the remote sent (no text read)


@dataclass(slots=True)
class FederatedSearch:
    """The federated part of one query: the fan-out task and what came of it."""
    federation: Federation
    rescorer: Rescorer
    plan: Plan
    query: RemoteQuery
    budget_s: float
    reports: list[SourceReport] = field(default_factory=list)
    timings: FederatedTimings = field(default_factory=FederatedTimings)
    dropped_duplicates: int = 0
    votes: Awaitable[dict[str, SourceVotes]] | None = None    # the tenant's votes per source
    _task: asyncio.Task | None = None
    _votes: asyncio.Future | None = None
    _t0: float = 0.0

    def start(self) -> FederatedSearch:
        self._t0 = time.perf_counter()
        self._task = asyncio.create_task(self.federation.gather(self.plan, self.query, self.budget_s))
        if self.votes is not None:
            self._votes = asyncio.ensure_future(self.votes)
        return self

    def cancel(self) -> None:
        for task in (self._task, self._votes):
            if task is not None and not task.done():
                task.cancel()

    async def candidates(self, tenant_id: str, phrases: QueryPhrases, query_vectors: np.ndarray | None,
                         tenant_for_hits: str, *, timeout_s: float) -> tuple[list[Merged], list[str]]:
        """The remote candidates (re-scored, de-duplicated) and the reasons the answer is degraded."""
        assert self._task is not None, "start() first"
        hits, reports = await self._task
        self.timings.fanout_ms = (time.perf_counter() - self._t0) * 1000.0
        self.timings.slowest_source_ms = max((r.latency_ms for r in reports), default=0.0)
        self.reports = reports
        reasons = [f"source {r.source_id} {r.status}: {r.error}" for r in reports if r.failed]
        if not hits:
            return [], reasons
        rescored = await self.rescorer.rescore(tenant_id, phrases, query_vectors, hits, timeout_s=timeout_s)
        self.timings.rescore_ms = rescored.total_ms
        self.timings.embedded = rescored.embedded
        self.timings.carried = rescored.carried
        self.timings.analysed = rescored.analysed
        reasons += rescored.reasons
        reputation = {s.id: s.reputation for s in self.plan.remotes}
        kept, self.dropped_duplicates = dedupe_remote(hits, rescored.vectors, reputation,
                                                      [s.id for s in self.plan.remotes])
        votes = await self._votes if self._votes is not None else {}
        return [remote_candidate(hits[i], rescored, i, prior(hits[i], reputation.get(hits[i].source_id, 0.5)),
                                 tenant_for_hits, votes.get(hits[i].source_id)) for i in kept], reasons

    def notes(self) -> list[str]:
        """The answer's notes about the federated part: remote texts embedded here, remote hits
        scored with their remote's vectors (and of those, from its analysed terms), remote duplicates
        dropped."""
        notes = [f"remote_embedded={self.timings.embedded}", f"remote_vectors={self.timings.carried}",
                 f"remote_terms={self.timings.analysed}"]
        return notes + ([f"remote_duplicates={self.dropped_duplicates}"] if self.dropped_duplicates else [])

    @staticmethod
    def local_report(ok: bool, latency_ms: float, count: int, error: str = "") -> SourceReport:
        return SourceReport(LOCAL, OK if ok else ERROR, latency_ms, count, error)


def prior(h: RemoteHit, source_reputation: float) -> float:
    """A remote document's reputation prior: the source's prior (sources file); when the remote
    reports its own reputation of the document (a Nucleus remote's 4R reputation), that one,
    moved by how far the source's prior is from neutral (0.5)."""
    if h.reputation is None:
        return source_reputation
    return min(1.0, max(0.01, h.reputation + (source_reputation - 0.5)))


def remote_candidate(h: RemoteHit, rescored: Rescored, i: int, reputation: float, tenant_id: str,
                     votes: SourceVotes | None = None) -> Merged:
    """One remote hit as a ranking candidate, its hit loaded, its source's votes as its own
    (module docstring)."""
    helpful, unhelpful = (votes.helpful, votes.unhelpful) if votes is not None else (0, 0)
    richness = float(rescored.richness[i]) if not math.isnan(float(rescored.richness[i])) else 0.0
    headline = h.title.strip() or " ".join(h.text.split()[:HEADLINE_WORDS])
    entry = Entry(id=h.entry_id, tenant_id=tenant_id, persona_id="", artifact_id=h.document_id, chunk_index=0,
                  text=h.text, headline=headline, content_summary="", timestamp_unix=h.timestamp_unix,
                  richness=richness)
    artifact = ArtifactSummary(artifact_id=h.document_id, title=h.title, source_type="remote", source_id=h.source_id,
                               source_uri=h.url if h.url.startswith(("http://", "https://")) else "",
                               modified_unix=h.timestamp_unix, reputation_prior=reputation,
                               feedback_helpful=helpful, feedback_unhelpful=unhelpful)
    return Merged(entry_id=h.entry_id, artifact_id=h.document_id,
                  signals=(h.timestamp_unix, richness, reputation, helpful, unhelpful),
                  prior_note="" if h.reputation is None else f" (the remote's own {h.reputation:.2f}, moved by the "
                                                             "source's prior)",
                  dense=float(rescored.dense[i]), bm25=float(rescored.bm25[i]),
                  hit=Hit(entry=entry, artifact=artifact, score=h.score if h.score is not None else 0.0, rank=h.rank),
                  origin=h.source_id, remote_score=h.score if h.score is not None else math.nan,
                  carried=bool(h.vector), resource=h.resource_id)


def without_local_repeats(results: Sequence[RankedResult], k: int) -> tuple[tuple[RankedResult, ...], int]:
    """The first `k` results, a remote result repeating a local one (same URL or text) dropped."""
    local = LocalKeys((r.entry.text, r.artifact.source_uri) for r in results if r.source_id == LOCAL)
    out, dropped = [], 0
    for r in results:
        if r.source_id != LOCAL and local.repeats(r.entry.text, r.artifact.source_uri):
            dropped += 1
            continue
        out.append(r)
    return tuple(out[:k]), dropped
