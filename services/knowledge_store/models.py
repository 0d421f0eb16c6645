"""The KnowledgeStore core's own types: the embedder it is given, its index kinds, and what it
tells operators about its condition (`StoreStatus`, health.py) and a tenant's consistency
(`TenantCheck`, embedded/consistency.py).

The records it stores and serves (artifacts, entries, hits, filters, ...) live in
`shared/records.py`; ranking profiles in `ranking/profile.py`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

INDEX_KINDS = ("flat", "hnsw", "ivf", "auto")


class Embedder(Protocol):
    """Turns texts into vectors. Production: a client of LlmOrchestration.GenerateEmbeddings."""

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...

    async def model_name(self) -> str:
        """The embedding model's name (a tenant archive records it; another model's is refused)."""
        ...


@dataclass(frozen=True, slots=True)
class StoredFields:
    """What GetFieldSignals reads of one entry (field_signals.py), in one store read: its
    artifact and chunk index, the artifact's visibility groups (the caller's check), the analysed
    (title, body) terms its keyword rows hold, and the artifact's title vector (None: none)."""
    artifact_id: str
    chunk_index: int
    visibility_groups: tuple[str, ...]
    title_terms: str
    body_terms: str
    title_vector: np.ndarray | None


@dataclass(frozen=True, slots=True)
class Problem:
    """A storage problem of one tenant (kinds: see health.py)."""
    tenant_id: str
    kind: str
    message: str               # what is wrong and what to do, naming the path
    since_unix: int


@dataclass(frozen=True, slots=True)
class StoreStatus:
    state: str                 # "ok" | "degraded"
    data_dir: str
    read_only: bool            # configured read-only (NUCLEUS_KS_READ_ONLY)
    free_bytes: int            # of the data directory's file system; -1 unknown
    total_bytes: int
    problems: tuple[Problem, ...]
    repaired_rows: int         # since the process started
    open_tenants: int
    open_tenant_bytes: int = 0                 # estimated memory of the open tenants
    memory_budget_bytes: int = 0               # 0 = no budget
    tenants: tuple[tuple[str, int], ...] = ()  # (tenant, estimated bytes), most recently used first
    scrub: str = ""                            # the background scrub's last pass ("" = none, embedded)

    def for_tenant(self, tenant_id: str) -> "StoreStatus":
        """The condition as one tenant's admin may read it: its own problems and memory only, the
        state they make, the data directory's space and the read-only switch (shared by every
        tenant), nothing of another tenant (no data directory path, repair count or scrub)."""
        problems = tuple(p for p in self.problems if p.tenant_id == tenant_id)
        mine = tuple((t, b) for t, b in self.tenants if t == tenant_id)
        return StoreStatus(state="degraded" if problems or self.read_only else "ok", data_dir="",
                           read_only=self.read_only, free_bytes=self.free_bytes, total_bytes=self.total_bytes,
                           problems=problems, repaired_rows=0, open_tenants=len(mine),
                           open_tenant_bytes=sum(b for _, b in mine), memory_budget_bytes=self.memory_budget_bytes,
                           tenants=mine)


@dataclass(frozen=True, slots=True)
class TenantCheck:
    """What the full check of one tenant found (and, with repair, what it fixed)."""
    tenant_id: str
    entries: int
    vectors: int                     # rows in entry_vectors
    keyword_rows: int                # rows in entries_fts
    vectors_indexed: int             # in the in-memory vector index
    keyword_rows_indexed: int        # in the in-memory keyword index
    missing_vectors: int
    malformed_vectors: int
    missing_keyword_rows: int
    orphan_vectors: int
    orphan_keyword_rows: int
    entries_without_artifact: int
    integrity_errors: tuple[str, ...] = ()
    repaired_vectors: int = 0
    repaired_keyword_rows: int = 0
    removed_orphans: int = 0
    deferred: str = ""               # why some repair waits ("" = nothing waits)
    corrupt_rows: int = 0            # entries and artifacts failing their checksums (not repairable:
                                     # re-ingest the documents or restore a backup)
    unverified_rows: int = 0         # rows written before checksums existed, not yet given one
    # qdrant (qdrant/consistency.py): entries a record counts whose points are gone (the only copy
    # of their text: re-ingest or re-import), vectors differing from their hash, keyword statistics
    # disagreeing with the points
    missing_entries: int = 0
    changed_vectors: int = 0
    keyword_stats_off: int = 0

    @property
    def consistent(self) -> bool:
        return (not self.integrity_errors and self.corrupt_rows == 0
                and self.missing_entries == self.changed_vectors == self.keyword_stats_off == 0
                and self.missing_vectors == self.malformed_vectors == 0
                and self.missing_keyword_rows == self.orphan_vectors == self.orphan_keyword_rows == 0
                and self.entries == self.vectors_indexed == self.keyword_rows_indexed)

    def summary(self) -> str:
        return (f"{self.entries} entries, {self.vectors} vectors ({self.vectors_indexed} indexed), "
                f"{self.keyword_rows} keyword rows ({self.keyword_rows_indexed} indexed); missing: "
                f"{self.missing_vectors} vectors, {self.missing_keyword_rows} keyword rows; malformed vectors: "
                f"{self.malformed_vectors}; orphans: {self.orphan_vectors} vectors, {self.orphan_keyword_rows} "
                f"keyword rows" + (f"; {self.corrupt_rows} rows fail their checksums" if self.corrupt_rows else "")
                + (f"; {self.missing_entries} entries gone" if self.missing_entries else "")
                + (f"; {self.changed_vectors} vectors changed" if self.changed_vectors else "")
                + (f"; {self.keyword_stats_off} keyword statistics off" if self.keyword_stats_off else "")
                + (f"; integrity: {'; '.join(self.integrity_errors)}" if self.integrity_errors else ""))
