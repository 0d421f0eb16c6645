"""KnowledgeStore MCP adapter: ingest/upsert, search by vector, search by keywords/filters,
delete and stats, for the caller's tenant (from the verified principal, never an argument),
each a call of the front (front.py), which holds the caller to its tenant and groups."""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import numpy as np
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field, create_model

from services.knowledge_store.backend import StoreBackend
from services.knowledge_store.front import StoreFront
from shared import records as m
from shared.auth.principals import RequestIdentity
from shared.identity import Principal
from shared.mcp_annotations import DELETE, OVERWRITE, READ
from shared.mcp_errors import guarded, invalid_params_middleware
from shared.mcp_schemas import FiltersIn, UnixTime


# The tool's document: ArtifactMeta's fields (shared/records.py owns them) as JSON types — a
# repeated field as a list, a unix time bounded, the reputation prior in [0, 1] — with the
# content after the artifact id.
_ARTIFACT_FIELD_TYPES: dict[str, Any] = {"str": str, "int": UnixTime, "tuple[str, ...]": list[str]}
_ARTIFACT_FIELD_OVERRIDES: dict[str, Any] = {"reputation_prior": Annotated[float, Field(ge=0, le=1)]}


def _artifact_field(f: dataclasses.Field) -> tuple[Any, Any]:
    kind = _ARTIFACT_FIELD_OVERRIDES.get(f.name) or _ARTIFACT_FIELD_TYPES[f.type]
    if f.default is dataclasses.MISSING:
        return kind, ...
    return (kind, Field(default_factory=list)) if kind == list[str] else (kind, f.default)


_artifact_in = {f.name: _artifact_field(f) for f in dataclasses.fields(m.ArtifactMeta)}
DocumentIn = create_model(
    "DocumentIn", artifact_id=_artifact_in.pop("artifact_id"), content=(str, ...),
    content_type=(Literal["text/plain", "text/markdown", "text/html"], "text/plain"), **_artifact_in)


class KnowledgeFiltersIn(FiltersIn):
    persona_id: str = ""


class IngestedOut(BaseModel):
    index: int
    artifact_id: str
    entries_written: int
    entries_replaced: int


class RejectedOut(BaseModel):
    index: int
    artifact_id: str
    field: str
    reason: str


class IngestOut(BaseModel):
    artifacts: int
    total_entries: int
    entries_replaced: int
    embed_seconds: float
    commit_seconds: float
    ingested: list[IngestedOut] = Field(default_factory=list)
    rejected: list[RejectedOut] = Field(default_factory=list)


class HitOut(BaseModel):
    entry_id: str
    artifact_id: str
    title: str
    headline: str
    text: str
    score: float
    rank: int
    source_type: str
    timestamp_unix: int
    richness: float


class HitsOut(BaseModel):
    hits: list[HitOut]
    query_terms: list[str] = Field(default_factory=list)


class DeleteOut(BaseModel):
    artifacts_deleted: int
    entries_deleted: int


class SourceOut(BaseModel):
    source_id: str
    source_type: str
    artifacts: int
    entries: int
    last_indexed_unix: int


class StatsOut(BaseModel):
    tenant_id: str
    artifacts: int
    entries: int
    vectors: int
    keyword_docs: int
    last_indexed_unix: int
    index_kind: str
    sources: list[SourceOut]
    hnsw_ef_search: int = 0          # HNSW: the efSearch chosen for the recall target (0: not HNSW / not measured)
    hnsw_recall: float = 0.0         # the recall@10 measured at it on the index's own vectors


def _filters(f: KnowledgeFiltersIn | None, local_groups: tuple[str, ...] | None) -> m.SearchFilters:
    """The tool's filters; `local_groups` (the local principal's) held to it where the front has
    no caller to hold to its own."""
    f = f or KnowledgeFiltersIn()
    return f.to_filters(persona_id=f.persona_id, groups=local_groups)


def _hits(hits: list[m.Hit], terms: list[str] | None = None) -> HitsOut:
    return HitsOut(hits=[HitOut(entry_id=h.entry.id, artifact_id=h.entry.artifact_id, title=h.artifact.title,
                                headline=h.entry.headline, text=h.entry.text, score=h.score, rank=h.rank,
                                source_type=h.artifact.source_type, timestamp_unix=h.entry.timestamp_unix,
                                richness=h.entry.richness) for h in hits], query_terms=terms or [])


def build_mcp(store: StoreBackend, *, allow_local_identity: bool, token_verifier: Any = None,
              auth: Any = None) -> MCPServer:
    """The KnowledgeStore MCP server. With `token_verifier` + `auth` (authentication on) only
    holders of a stack credential naming a tenant get through (HTTP 401 otherwise), and the
    tools act in that tenant; without, the local principal's tenant (development, stdio)."""
    mcp = MCPServer("nucleus-knowledge-store", instructions=(
        "Durable tenant-scoped knowledge: ingest/upsert documents, search by vector or keywords, delete, stats."),
        token_verifier=token_verifier, auth=auth)
    identity = RequestIdentity(None, allow_local=allow_local_identity)
    front = StoreFront(store)

    def who() -> tuple[Principal | None, str, tuple[str, ...] | None]:
        """(the caller for the front, its tenant, the groups a search is held to here): the local
        principal of a stack without authentication is None to the front, as a gRPC call
        without a verified identity is, and its own groups filter its searches."""
        p = identity.principal()
        local = p.auth_method == "local"
        return (None if local else p), p.tenant_id, (p.groups if local else None)

    @mcp.tool(annotations=OVERWRITE, name="ingest_documents", description=(
        "Chunk, embed and commit documents into the caller's tenant, each atomically; an existing artifact id is "
        "replaced. The batch is all-or-nothing unless commit_valid is true: then invalid documents are listed in "
        "`rejected` by index and the valid ones are committed."))
    async def ingest_documents(documents: list[DocumentIn], persona_id: str = "", commit_valid: bool = False,
                               ctx: Context | None = None) -> IngestOut:
        async def run() -> IngestOut:
            docs = [m.DocumentIn(artifact=m.ArtifactMeta(**m.artifact_values(d)), content=d.content,
                                 content_type=d.content_type) for d in documents]
            p, tenant, _ = who()
            async for r in front.ingest_stream(p, tenant, persona_id, docs, commit_valid=commit_valid):
                if isinstance(r, m.IngestProgress) and ctx is not None and ctx._request_context is not None:
                    # a notification when the client's request carries a progress token (the SDK checks)
                    await ctx.report_progress(r.entries_embedded, r.entries_expected, "entries embedded")
            return IngestOut(artifacts=len(r.results), total_entries=r.total_entries,
                             entries_replaced=sum(x.entries_replaced for x in r.results),
                             embed_seconds=r.embed_seconds, commit_seconds=r.commit_seconds,
                             ingested=[IngestedOut(index=x.index, artifact_id=x.artifact_id,
                                                   entries_written=x.entries_written,
                                                   entries_replaced=x.entries_replaced) for x in r.results],
                             rejected=[RejectedOut(index=x.index, artifact_id=x.artifact_id, field=x.field,
                                                   reason=x.reason) for x in r.rejected])
        return await guarded(run)

    @mcp.tool(name="search_by_vector", annotations=READ,
              description="Top-k entries by cosine similarity to a query vector.")
    async def search_by_vector(query_vector: list[float], top_k: Annotated[int, Field(ge=1, le=1000)] = 10,
                               filters: KnowledgeFiltersIn | None = None) -> HitsOut:
        async def run() -> HitsOut:
            p, tenant, groups = who()
            answer = await front.retrieve(p, m.RetrievalRequest(
                tenant, top_k=top_k, filters=_filters(filters, groups),
                vectors=np.asarray([query_vector], np.float32), hits=True))
            return _hits(list(answer.dense_hits[0]))
        return await guarded(run)

    @mcp.tool(annotations=READ, name="search_by_keywords", description=(
        "BM25 keyword search plus metadata filters (date range, source types, tags, owners, artifact ids)."))
    async def search_by_keywords(keywords: str, top_k: Annotated[int, Field(ge=1, le=1000)] = 10,
                                 filters: KnowledgeFiltersIn | None = None) -> HitsOut:
        async def run() -> HitsOut:
            p, tenant, groups = who()
            answer = await front.retrieve(p, m.RetrievalRequest(tenant, keywords, top_k, _filters(filters, groups),
                                                                keyword=True, hits=True))
            return _hits(list(answer.keyword_hits), list(answer.terms))
        return await guarded(run)

    @mcp.tool(name="delete_artifacts", annotations=DELETE,
              description="Delete artifacts (and all their entries) from every index.")
    async def delete_artifacts(artifact_ids: list[str]) -> DeleteOut:
        async def run() -> DeleteOut:
            p, tenant, _ = who()
            a, e = await front.delete(p, tenant, artifact_ids)
            return DeleteOut(artifacts_deleted=a, entries_deleted=e)
        return await guarded(run)

    @mcp.tool(name="tenant_stats", annotations=READ,
              description="Artifacts, entries, sources and last indexed time of the tenant.")
    async def tenant_stats() -> StatsOut:
        async def run() -> StatsOut:
            p, tenant, _ = who()
            s = await front.stats(p, tenant)
            return StatsOut(tenant_id=s.tenant_id, artifacts=s.artifacts, entries=s.entries, vectors=s.vectors,
                            keyword_docs=s.keyword_docs, last_indexed_unix=s.last_indexed_unix,
                            index_kind=s.index_kind, hnsw_ef_search=s.hnsw_ef_search, hnsw_recall=s.hnsw_recall,
                            sources=[SourceOut(source_id=x.source_id, source_type=x.source_type, artifacts=x.artifacts,
                                               entries=x.entries, last_indexed_unix=x.last_indexed_unix)
                                     for x in s.sources])
        return await guarded(run)

    mcp.middleware.append(invalid_params_middleware({}))     # malformed tools/call params: -32602
    return mcp
