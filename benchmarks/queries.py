"""Queries through RAGPipeline.SearchAndRank over gRPC: ranking methods, per-query records,
isolation checks and the concurrency (throughput) sweep.

Ranking methods (`methods_for`): `default` sends no ranking preferences, so the tenant's
default profile (else the built-in one) decides — what a user gets out of the box. Every
other method is a named profile the harness puts for each tenant (`bench-*`), with relevancy
weight 1 and the other factors 0 (BEIR has no dates, sources or feedback, so they would only
add noise) and recency off, so it measures retrieval and fusion alone:

    convex-a<α>   convex fusion of min-max normalised legs, dense weight α
    rrf           reciprocal rank fusion
    dense-only    convex with α = 1 (BM25-only candidates score 0)
    keyword-only  convex with α = 0

`default-folded` is `default` with duplicate folding asked for by the request's flag
(services/rag_pipeline/merge.py): nDCG with folding on beside `default`'s, off.

Results are chunks; `doc_ids` keeps each artifact id at its first (best) position.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from shared.errors import NucleusError
from shared.grpc_client import aio_channel, call

SERVICE = "RAGPipeline"
PROFILE_PREFIX = "bench-"


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    fusion: str = ""                 # "" = default profile (no preferences sent)
    dense_weight: float = 0.5
    description: str = ""
    fold: bool = False               # ask for duplicate folding (SearchAndRankRequest.fold_duplicates)

    @property
    def profile_name(self) -> str:
        return "" if not self.fusion else PROFILE_PREFIX + self.name

    def profile_pb(self, tenant: str) -> pb.RankingProfile:
        return pb.RankingProfile(
            tenant_id=tenant, name=self.profile_name, relevancy_weight=1.0, recency_weight=0.0,
            richness_weight=0.0, reputation_weight=0.0,
            fusion_method=pb.FUSION_METHOD_RRF if self.fusion == "rrf" else pb.FUSION_METHOD_CONVEX,
            dense_weight=self.dense_weight, recency_mode=pb.RECENCY_MODE_NEVER, recency_half_life_days=180.0,
            reputation_prior_strength=4.0, is_default=False)


def methods_for(dense_weights: Sequence[float]) -> list[Method]:
    methods = [Method("default", description="no preferences: the tenant's default profile (4R weights as shipped)"),
               Method("default-folded", fold=True, description="default, duplicates folded (the request's flag)")]
    for alpha in dict.fromkeys(dense_weights):   # a weight given twice is one method
        methods.append(Method(f"convex-a{alpha:g}", "convex", float(alpha),
                              f"convex fusion, dense weight {alpha:g}, relevancy only"))
    methods += [Method("rrf", "rrf", 0.5, "reciprocal rank fusion (k 60), relevancy only"),
                Method("dense-only", "convex", 1.0, "dense leg alone (convex, dense weight 1)"),
                Method("keyword-only", "convex", 0.0, "BM25 leg alone (convex, dense weight 0)")]
    return methods


@dataclass
class QueryRecord:
    tenant: str
    method: str
    query_id: str
    doc_ids: list[str] = field(default_factory=list)
    e2e_ms: float = 0.0
    stages_ms: dict[str, float] = field(default_factory=dict)
    error: str = ""
    degraded: bool = False
    relevancy: list[float] = field(default_factory=list)     # per doc id: the Relevancy factor of its best result
    probability: list[float] = field(default_factory=list)   # per doc id: that result's relevance probability


class RagClient:
    """One gRPC channel to RAGPipeline (one simulated client)."""

    def __init__(self, target: str, *, top_k_initial: int, top_k_final: int, timeout_s: float,
                 embed_timeout_s: float = 0.0) -> None:
        self._channel = aio_channel(target)
        self._stub = rag_grpc.RagPipelineStub(self._channel)
        self.top_k_initial = top_k_initial
        self.top_k_final = top_k_final
        self.timeout_s = timeout_s
        self.embed_timeout_s = embed_timeout_s

    async def close(self) -> None:
        await self._channel.close()

    async def ensure_profile(self, tenant: str, method: Method) -> None:
        """Put the method's profile unless the tenant already has it with the same settings."""
        if not method.profile_name:
            return
        wanted = method.profile_pb(tenant)
        try:
            current = await call(self._stub.GetRankingProfile, pb.GetRankingProfileRequest(
                tenant_id=tenant, name=method.profile_name), timeout=self.timeout_s, service=SERVICE)
            same = (current.fusion_method == wanted.fusion_method
                    and abs(current.dense_weight - wanted.dense_weight) < 1e-6
                    and (current.relevancy_weight, current.recency_weight, current.richness_weight,
                         current.reputation_weight) == (1.0, 0.0, 0.0, 0.0)
                    and current.recency_mode == wanted.recency_mode)
        except NucleusError:
            same = False
        if not same:
            await call(self._stub.PutRankingProfile, wanted, timeout=self.timeout_s, service=SERVICE)

    async def search(self, tenant: str, method: Method, query_id: str, text: str) -> QueryRecord:
        request = rag_pb.SearchAndRankRequest(
            tenant_id=tenant, user_query_text=text, top_k_initial_retrieve=self.top_k_initial,
            top_k_final_rank=self.top_k_final, embed_timeout_s=self.embed_timeout_s,
            ranking_prefs=pb.RankingPreferences(profile_name=method.profile_name),
            fold_duplicates=True if method.fold else None)
        record = QueryRecord(tenant=tenant, method=method.name, query_id=query_id)
        started = time.perf_counter()
        try:
            response = await call(self._stub.SearchAndRank, request, timeout=self.timeout_s, service=SERVICE)
        except NucleusError as err:
            record.e2e_ms = (time.perf_counter() - started) * 1000.0
            record.error = f"{err.kind}: {err}"
            return record
        record.e2e_ms = (time.perf_counter() - started) * 1000.0
        firsts = {}
        for r in response.results:
            firsts.setdefault(r.associated_artifact.artifact_id, r)
        record.doc_ids = list(firsts)
        record.relevancy = [r.individual_scores.relevancy for r in firsts.values()]
        record.probability = [r.relevance_probability for r in firsts.values()]
        record.stages_ms = {t.stage: t.ms for t in response.timings}
        record.degraded = response.degraded
        return record


async def run_sequential(client: RagClient, tenant: str, method: Method, queries: Sequence[tuple[str, str]],
                         progress: Callable[[], None] | None = None) -> list[QueryRecord]:
    records = []
    for qid, text in queries:
        records.append(await client.search(tenant, method, qid, text))
        if progress is not None:
            progress()
    return records


@dataclass
class ThroughputResult:
    clients: int
    queries_per_client: int
    completed: int
    errors: int
    error_kinds: dict[str, int]
    wall_s: float
    qps: float
    latencies_ms: list[float]
    # per server stage (SearchAndRank's timings: embed, retrieve, ..., total), the completed
    # queries' times under this load: where a query waited inside the server
    stages_ms: dict[str, list[float]] = field(default_factory=dict)


async def run_concurrent(target: str, work: Sequence[tuple[str, str, str]], clients: int, per_client: int, *,
                         top_k_initial: int, top_k_final: int, timeout_s: float, embed_timeout_s: float = 0.0,
                         method: Method = Method("default")) -> ThroughputResult:
    """`clients` channels, each sending `per_client` queries back to back (tenant, qid, text taken
    round-robin from `work`). Bounded: every call has `timeout_s`, the whole sweep
    `per_client * timeout_s + 30` seconds."""
    latencies: list[float] = []
    stages: dict[str, list[float]] = {}
    kinds: dict[str, int] = {}
    completed = 0

    async def one(index: int) -> None:
        nonlocal completed
        client = RagClient(target, top_k_initial=top_k_initial, top_k_final=top_k_final, timeout_s=timeout_s,
                           embed_timeout_s=embed_timeout_s)
        try:
            for j in range(per_client):
                tenant, qid, text = work[(index * per_client + j) % len(work)]
                record = await client.search(tenant, method, qid, text)
                if record.error:
                    kind = record.error.split(":", 1)[0]
                    kinds[kind] = kinds.get(kind, 0) + 1
                else:
                    completed += 1
                    latencies.append(record.e2e_ms)
                    for stage, ms in record.stages_ms.items():
                        stages.setdefault(stage, []).append(ms)
        finally:
            await client.close()

    started = time.perf_counter()
    try:
        async with asyncio.timeout(per_client * timeout_s + 30.0):
            await asyncio.gather(*(one(i) for i in range(clients)))
    except TimeoutError:
        unfinished = clients * per_client - completed - sum(kinds.values())
        kinds["sweep_timeout"] = kinds.get("sweep_timeout", 0) + unfinished
    wall = time.perf_counter() - started
    return ThroughputResult(clients=clients, queries_per_client=per_client, completed=completed,
                            errors=sum(kinds.values()), error_kinds=kinds, wall_s=wall,
                            qps=completed / wall if wall > 0 else 0.0, latencies_ms=latencies, stages_ms=stages)


@dataclass
class IsolationCheck:
    responses_checked: int = 0
    results_checked: int = 0
    foreign_results: int = 0          # artifact id the tenant was never given
    violations: int = 0               # ... and one only another tenant of this run was given
    examples: list[str] = field(default_factory=list)

    def check(self, record: QueryRecord, own: set[str], others_only: set[str]) -> None:
        if record.error:
            return
        self.responses_checked += 1
        for doc in record.doc_ids:
            self.results_checked += 1
            if doc not in own:
                self.foreign_results += 1
                if doc in others_only:
                    self.violations += 1
                    if len(self.examples) < 10:
                        self.examples.append(f"tenant {record.tenant} query {record.query_id} returned {doc}")

    def to_json(self) -> dict:
        return dict(self.__dict__)
