"""The KnowledgeStore's storage backends behind one interface: `StoreBackend`, the facade the
gRPC and MCP adapters (grpc_api.py, mcp_api.py), the health watch (main.py) and the operator
CLI call.

    embedded   embedded.core.KnowledgeStore: SQLite + FAISS + in-memory BM25 in a data
               directory (the default; one process owns the directory)
    qdrant     qdrant.QdrantKnowledgeStore: a Qdrant cluster (or Qdrant's local mode in a
               folder); nothing in the process, so several replicas serve the same tenants

The two are siblings: neither imports the other (an import contract in pyproject.toml says
so). What both need is the front's, beside this module: validation.py, document preparation
(preparation.py: validate, extract, chunk, analyse, embed), the keyword query and BM25
constants (keywords.py), the profile rules (profiles.py), the persona record (personas.py);
they differ in storage and search only. `open_store` picks one from the settings
(NUCLEUS_KS_BACKEND): the one place of the front that names a backend. A call one backend
cannot serve raises `Unimplemented` naming the backend (UNIMPLEMENTED on gRPC): index kinds
and the backups of tenants' database files are the embedded backend's (docs/SCALE.md, "Not
applicable on Qdrant"). Topics (topics.py) are both backends' over each one's reads.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from ranking.profile import RankingProfile
from services.knowledge_store.health import StoreHealth
from services.knowledge_store.models import Embedder, StoredFields, StoreStatus, TenantCheck
from shared.records import (
    CandidateColumns,
    DocumentIn,
    FeedbackAck,
    Hit,
    IngestReport,
    Keywords,
    ScoreCompletion,
    SearchFilters,
    SearchLogRecord,
    SourceVotes,
    TenantStats,
)
from shared.settings import KnowledgeStoreSettings

BACKENDS = ("embedded", "qdrant")


@runtime_checkable
class StoreBackend(Protocol):
    """What the adapters call; every method is tenant-scoped (see embedded.core.KnowledgeStore
    for each method's contract: both backends keep it)."""

    @property
    def health(self) -> StoreHealth: ...

    @property
    def dimension(self) -> int:
        """The dimension of the store's vectors (its embedder's)."""
        ...

    def list_tenants(self) -> list[str]: ...

    def data_id(self, tenant_id: str) -> str:
        """Which copy of the tenant's data the store serves: new when a restore or an import
        replaces it, kept by writes ("" = no such identity: never replaced in place)."""
        ...

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None, *,
                     commit_valid: bool = False, key: str = "") -> IngestReport: ...

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]: ...

    # The retrieval primitives the front (front.py `retrieve`) composes. `filters` are the
    # call's, already scoped to the caller; `term_weights` (analysed term -> weight): search these
    # weighted terms instead of the phrases' own (an expanded query, keywords.py).
    async def keyword(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                      filters: SearchFilters, *, hits: bool = False, term_weights: Mapping[str, float] | None = None,
                      ) -> tuple[list[Hit] | CandidateColumns, list[str]]:
        """BM25 over the phrases' analysed terms (no keywords: a metadata listing, newest first):
        full hits or columns, and the analysed terms searched."""
        ...

    async def dense(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
                    hits: bool = False) -> list[list[Hit]] | list[CandidateColumns]:
        """The nearest entries by cosine per query vector: full hits or columns."""
        ...

    async def complete(
            self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
            keywords: Keywords, extra_keywords: Sequence[str] = (), complete_rows: Sequence[int] = (),
            term_weights: Mapping[str, float] | None = None,
    ) -> tuple[list[CandidateColumns], ScoreCompletion]:
        """`dense` as columns, and both signals for its candidates and `complete_rows`."""
        ...

    async def score_texts(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                          texts: Sequence[tuple[str, str]]): ...

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str]) -> list[Hit]: ...

    async def entry_vectors(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored unit vectors of these entries by entry id (unknown ids are left out)."""
        ...

    async def entry_terms(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The analysed (title terms, body terms) of these entries as their keyword leg scores
        them, by entry id (unknown ids are left out)."""
        ...

    async def field_statistics(self, tenant_id: str, terms: Sequence[str]
                               ) -> tuple[int, list[int], tuple[float, float, float]]:
        """(live entries N, document frequency of each of `terms` over live entries, mean analysed
        (title, body, doc) length over live entries): GetFieldSignals' statistics (field_signals.py)."""
        ...

    async def title_vectors(self, tenant_id: str, artifact_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored unit title vectors of these artifacts by artifact id (left out: none stored,
        an empty title or stored before titles were embedded and not yet backfilled)."""
        ...

    async def lacking_title_vectors(self, tenant_id: str, limit: int) -> list[tuple[str, str]]:
        """(artifact id, title) of up to `limit` artifacts with a non-empty title and no title
        vector: the backfill's work (title_vectors.py)."""
        ...

    async def put_title_vectors(self, tenant_id: str, rows: Sequence[tuple[str, str, np.ndarray]]) -> int:
        """Store (artifact id, title, unit vector) where the artifact still has that title and no
        title vector; returns how many were stored."""
        ...

    async def stored_fields(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, StoredFields]:
        """What GetFieldSignals reads of these entries (artifact, chunk index, visibility groups,
        analysed terms, title vector), by entry id (unknown ids are left out)."""
        ...

    async def stats(self, tenant_id: str) -> TenantStats: ...

    async def verify_integrity(self, tenant_id: str) -> dict[str, int]: ...

    async def configure_index(self, tenant_id: str, kind: str, *, hnsw_m: int = 32, hnsw_ef_search: int = 64,
                              ivf_nlist: int = 0, ivf_nprobe: int = 8) -> tuple[str, int]: ...

    async def check_tenant(self, tenant_id: str, *, repair: bool = True) -> TenantCheck: ...

    async def settle_repairs(self, timeout_s: float = 30.0) -> None: ...

    def status(self) -> StoreStatus: ...

    async def put_profile(self, profile: RankingProfile) -> RankingProfile: ...

    async def get_profile(self, tenant_id: str, persona_id: str, name: str,
                          version: int = 0) -> RankingProfile | None: ...

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]: ...

    async def put_ranking_model(self, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]: ...

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes | None: ...

    async def record_feedback(self, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                              helpful: bool, user_id: str, *, comment: str = "",
                              search_id: str = "") -> FeedbackAck: ...

    async def record_search(self, record: SearchLogRecord) -> None: ...

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> SourceVotes: ...

    async def source_votes(self, tenant_id: str) -> list[SourceVotes]: ...

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, **params) -> dict: ...

    async def put_persona(self, persona): ...

    async def get_persona(self, tenant_id: str, persona_id: str): ...

    async def list_personas(self, tenant_id: str) -> list: ...

    # The tenant archive (archive.py): the artifacts in id order, prepared entries written with
    # their stored vectors, and where an import is written (swapped in on commit; qdrant: a new
    # generation of the tenant, switched in on commit).
    async def archive_listing(self, tenant_id: str, after: str, limit: int) -> list[tuple[str, list[str]]]: ...

    async def put_archived(self, tenant_id: str, items: Sequence[tuple]) -> None: ...

    async def import_stage(self, tenant_id: str, replace: bool): ...

    # Its user data as archive records of one kind (archive_file.USER_KINDS), in canonical
    # order, and checked records of a kind written back.
    async def user_data(self, tenant_id: str, kind: str) -> list[dict]: ...

    async def put_user_data(self, tenant_id: str, kind: str, records: Sequence[dict]) -> None: ...

    # The tenant's embedding model fingerprint (fingerprints.py): "" when none is recorded.
    async def tenant_fingerprint(self, tenant_id: str) -> str: ...

    async def set_tenant_fingerprint(self, tenant_id: str, fingerprint: str) -> None: ...

    # The store's own directory (an archive streamed in is written there while it is imported)
    # and its embedder (whose model an archive names).
    data_dir: Path
    embedder: Embedder

    def close(self) -> None: ...


def open_store(settings: KnowledgeStoreSettings, embedder: Embedder) -> StoreBackend:
    """The backend `settings.backend` names, over `embedder`."""
    if settings.backend == "qdrant":
        from services.knowledge_store.qdrant import QdrantKnowledgeStore
        return QdrantKnowledgeStore(settings, embedder)
    from services.knowledge_store.embedded.core import KnowledgeStore
    return KnowledgeStore(settings, embedder)
