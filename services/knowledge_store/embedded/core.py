"""The embedded backend's KnowledgeStore: durable, tenant-scoped hybrid retrieval (SQLite +
FAISS + BM25) in a data directory; one of the two backends behind backend.StoreBackend.

    KnowledgeStore                       this module: the public API, a facade over
      ├── per tenant: TenantDB            (SQLite, the system of record: storage/)
      │               VectorIndex         (FAISS: vector_index.py)
      │               KeywordIndex        (in-memory BM25 of SQLite's FTS5 rows: keyword_index.py)
      │               both saved next to SQLite and loaded on open when their stamp matches,
      │               else caught up or rebuilt (persistence.py); opened lazily, evicted under
      │               the memory budget and closed by tenants.py, locked by locking.py
      ├── writes:   one SQLite transaction, then FAISS + keyword index under the tenant's
      │             exclusive lock (writes.py)
      ├── ingest:   the front's document preparation (../preparation.py: validate all →
      │             extract/chunk/analyse → embed) → ONE write; delete (ingest.py)
      ├── searches: vector (FAISS with an id selector from the SQL filters), keyword (in-memory
      │             BM25 with a mask from the same SQL filters; the query read by ../keywords.py),
      │             listing, get by id; the row ids a filter allows are cached per tenant until
      │             the next write (allowed_cache.py); small reads run on the event loop (search.py)
      ├── profiles and feedback (ranking_inputs.py; the profile rules are ../profiles.py)
      ├── the search log and source votes (feedback_log.py; the rules are ../search_log.py)
      ├── personas (personas.py; the record is ../personas.py)
      ├── topics (topics.py: the reads; the clustering is the front's, ../topics.py)
      ├── stats, integrity check, index configuration (maintenance.py)
      ├── row checksums checked on read (storage/rowsums.py) and by a background scrub at a
      │   bounded read rate (scrub.py); online snapshots and restores of tenants (backup.py)
      ├── the full consistency check and the repair of derived rows, also in the background
      │   for a tenant found inconsistent on open (consistency.py)
      └── health: storage faults (disk full, read-only, corrupted tenant) and repairs, per
          tenant (../health.py, storage/faults.py)

Isolation is structural: a tenant's data lives only in `<data_dir>/tenants/<tenant>/` and in
its own FAISS object; every call resolves exactly one tenant first.

Consistency: records = keyword rows (FTS5, the durable keyword store) = vectors always
(`verify_integrity`): SQLite commits first, the in-memory indexes follow under the tenant's
exclusive lock, and after a crash both are caught up from what SQLite committed (tenants.py, writes.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

import asyncio
import os
import time
from pathlib import Path

import numpy as np

from ranking.profile import RankingProfile
from services.knowledge_store.embedded import (
    archive,
    backup,
    catalog,
    feedback_log,
    maintenance,
    personas,
    ranking_inputs,
)
from services.knowledge_store.embedded.consistency import Consistency
from services.knowledge_store.embedded.ingest import Ingester
from services.knowledge_store.embedded.scrub import PassReport, Scrub
from services.knowledge_store.embedded.search import Searcher
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.topics import EmbeddedTopicSource
from services.knowledge_store.health import StoreHealth
from services.knowledge_store.keywords import DEFAULT_BM25_WEIGHTS
from services.knowledge_store import validation
from services.knowledge_store.models import Embedder, StoreStatus, TenantCheck
from services.knowledge_store.personas import Persona
from services.knowledge_store.topics import Topics
from services.knowledge_store.topics import answer as topic_answer
from shared.records import (
    DocumentIn,
    FeedbackAck,
    IngestReport,
    SearchFilters,
    SearchLogRecord,
    SourceVotes,
    TenantStats,
)
from shared.errors import FailedPrecondition, NotFound
from shared.settings import KnowledgeStoreSettings

DATA_ID_TTL_S = 1.0     # `data_id` is read again after this long (an import swaps in within it)


class KnowledgeStore(Searcher):
    """The storage engine. See the module docstring; every method is tenant-scoped."""

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder, *,
                 bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS) -> None:
        self._tenants = Tenants(settings, bm25_weights)
        self._data_ids: dict[str, tuple[float, str]] = {}     # tenant -> (until, data id): `data_id`
        self._search_log = feedback_log.SearchLogWriter(self._tenants)
        self.dimension = settings.dimension         # of every tenant's vectors
        self.data_dir = Path(settings.data_dir)     # the store's own directory
        self.embedder = embedder
        self._ingester = Ingester(settings, embedder, bm25_weights, self._tenants)
        Searcher.__init__(self, settings, self._tenants)
        self._consistency = Consistency(self._tenants, self._ingester)
        self._tenants.on_inconsistent = self._consistency.schedule
        self._topics = Topics(EmbeddedTopicSource(self._tenants), settings.dimension)
        self._scrub = Scrub(self._tenants)
        self._scrub.start()
        if not settings.read_only and self.data_dir.is_dir():
            archive.sweep(self.data_dir)                     # a killed import's leftovers

    # -- tenants -----------------------------------------------------------------------------

    def list_tenants(self) -> list[str]:
        return self._tenants.ids()

    # -- ingest and delete -------------------------------------------------------------------

    async def ingest(self, tenant_id: str, persona_id: str, documents: Sequence[DocumentIn],
                     progress: Callable[[int, int], None] | None = None, *,
                     commit_valid: bool = False, key: str = "") -> IngestReport:
        """Chunk, embed and commit `documents` (upsert by artifact id), each atomically; the
        batch is all-or-nothing unless `commit_valid` (then invalid ones are reported by index).
        `key`: the request's idempotency key; a key already committed is answered its report."""
        return await self._ingester.ingest(tenant_id, persona_id, documents, progress,
                                           commit_valid=commit_valid, key=key)

    async def delete(self, tenant_id: str, artifact_ids: Sequence[str]) -> tuple[int, int]:
        """Delete artifacts from records, keyword index and vectors. Returns (artifacts, entries)."""
        return await self._ingester.delete(tenant_id, artifact_ids)

    # -- searches: the Searcher's own methods (dense, complete, keyword, score_texts, get_entries,
    #    entry_vectors, entry_terms, field_statistics, stored_fields, title_vectors; search.py)

    async def lacking_title_vectors(self, tenant_id: str, limit: int) -> list[tuple[str, str]]:
        """(artifact id, title) of up to `limit` titled artifacts without a title vector."""
        return await self._ingester.lacking_title_vectors(tenant_id, limit)

    async def put_title_vectors(self, tenant_id: str, rows: Sequence[tuple[str, str, np.ndarray]]) -> int:
        """Store backfilled (artifact id, title, vector) where the title is still that one."""
        return await self._ingester.put_title_vectors(tenant_id, rows)

    # -- topics ------------------------------------------------------------------------------

    async def topics(self, tenant_id: str, filters: SearchFilters, kind: str, **params) -> dict:
        """Topics of the tenant as the caller sees them (`filters` carry their visibility):
        kind "topics" | "evolution" | "members" | "map", a JSON-ready dict, or
        {"status": "computing", "progress"} while the tenant's clusters are computed (topics.py)."""
        return await topic_answer(self._topics, tenant_id, filters, kind, **params)

    # -- stats and index configuration ------------------------------------------------------

    async def stats(self, tenant_id: str) -> TenantStats:
        return await maintenance.stats(self._tenants, tenant_id)

    async def verify_integrity(self, tenant_id: str) -> dict[str, int]:
        """{"records", "vectors", "keyword_docs"}: entries in SQLite, vectors in FAISS, FTS5 rows."""
        return await maintenance.verify_integrity(self._tenants, tenant_id)

    async def configure_index(self, tenant_id: str, kind: str, *, hnsw_m: int = 32, hnsw_ef_search: int = 64,
                              ivf_nlist: int = 0, ivf_nprobe: int = 8) -> tuple[str, int]:
        """Choose the tenant's index kind (persisted) and rebuild it from SQLite.

        Returns (kind now serving searches, vectors). IVF serves as flat until the tenant has
        enough vectors to train it (see vector_index.py).
        """
        return await maintenance.configure_index(self._tenants, tenant_id, kind, hnsw_m=hnsw_m,
                                                 hnsw_ef_search=hnsw_ef_search, ivf_nlist=ivf_nlist,
                                                 ivf_nprobe=ivf_nprobe)

    # -- consistency and health --------------------------------------------------------------

    async def check_tenant(self, tenant_id: str, *, repair: bool = True) -> TenantCheck:
        """The full consistency check of a tenant; with `repair`, missing vectors and keyword
        rows are rebuilt from the stored text and orphans removed (consistency.py)."""
        return await self._consistency.check(tenant_id, repair=repair)

    async def settle_repairs(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for the background repairs running now."""
        await self._consistency.settle(timeout_s)

    @property
    def health(self) -> StoreHealth:
        """The store's condition: problems by tenant, repairs (../health.py)."""
        return self._tenants.health

    def data_id(self, tenant_id: str) -> str:
        """The tenant directory's identity (device, inode): a restore or an import swaps another
        directory into its place (backup.py `swap`), writes keep it; "" while there is none. Read
        at most every DATA_ID_TTL_S (a restore forgets it at once)."""
        now = time.monotonic()
        cached = self._data_ids.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            st = os.stat(self._tenants.database_path(tenant_id).parent)
            found = f"{st.st_dev:x}.{st.st_ino:x}"
        except (OSError, ValueError):
            found = ""
        self._data_ids[tenant_id] = (now + DATA_ID_TTL_S, found)
        return found

    @property
    def counters(self) -> dict[str, int]:
        """Tenant lifecycle events since the process started (opened_loaded / _replayed / _rebuilt,
        saved, evicted), for the KnowledgeStore's /metrics."""
        return dict(self._tenants.counters)

    def index_totals(self) -> dict[str, tuple[int, int]]:
        """Index kind -> (open tenants, live vectors), for the KnowledgeStore's /metrics."""
        totals: dict[str, tuple[int, int]] = {}
        for kind, vectors in self._tenants.open_indexes():
            tenants, live = totals.get(kind, (0, 0))
            totals[kind] = (tenants + 1, live + vectors)
        return totals

    def status(self) -> StoreStatus:
        """A snapshot of `health`: "ok" or "degraded", each problem naming tenant and path."""
        tenants = tuple(self._tenants.open_tenants())
        status = self._tenants.health.status(len(tenants), tenants=tenants,
                                             memory_budget_bytes=self._tenants.settings.memory_budget_mb * 2**20)
        return replace(status, scrub=self._scrub.status_line())

    async def scrub(self) -> PassReport:
        """Run one scrub pass now (scrub.py) and return what it found."""
        return await asyncio.to_thread(self._scrub.run_pass)

    # -- backup and restore ------------------------------------------------------------------

    async def backup(self, tenant_ids: Sequence[str], directory: Path,
                     final_directory: Path | None = None) -> list[backup.TenantSnapshot]:
        """Online snapshots of `tenant_ids` (every tenant when empty) into `directory` (backup.py);
        ingest goes on meanwhile. The snapshot is remembered as `final_directory` (where the
        operator's CLI renames it once its manifest is written) so problems can name it."""
        ids = list(tenant_ids) or self._tenants.ids()
        for tenant_id in ids:
            validation.tenant_id(tenant_id)
        directory = Path(directory)
        if not directory.is_dir():
            raise NotFound(f"backup directory {directory} does not exist")

        def run() -> list[backup.TenantSnapshot]:
            return [backup.snapshot(self._tenants.database_path(t), t, directory) for t in ids]

        snapshots = await asyncio.to_thread(run)
        catalog.record(Path(self._tenants.settings.data_dir), Path(final_directory or directory), ids,
                       int(min((s.point_unix for s in snapshots), default=time.time())))
        return snapshots

    async def restore_tenant(self, tenant_id: str, source: Path, sha256: str) -> tuple[backup.TenantSnapshot, float]:
        """Replace the tenant's database by the snapshot file `source` (its SHA-256 from the
        manifest): staged and verified first, then swapped while only this tenant answers
        UNAVAILABLE. Returns (what is now served, seconds the tenant was unavailable)."""
        validation.tenant_id(tenant_id)
        if self._tenants.settings.read_only:
            raise FailedPrecondition("the KnowledgeStore is configured read-only: a restore is refused")
        root = Path(self._tenants.settings.data_dir) / "tenants"
        staging, restored = await asyncio.to_thread(backup.prepare, root, tenant_id, Path(source), sha256)

        def swap() -> float:
            started = time.perf_counter()
            with self._tenants.unavailable_for(tenant_id, f"from {source}"):
                backup.swap(root, tenant_id, staging)
                self._data_ids.pop(tenant_id, None)
            return time.perf_counter() - started

        return restored, await asyncio.to_thread(swap)

    # -- the tenant archive (../archive.py) -------------------------------------------------

    async def archive_listing(self, tenant_id: str, after: str, limit: int) -> list[tuple[str, list[str]]]:
        """(artifact id, its entry ids) of up to `limit` artifacts after `after`, in id order."""
        validation.tenant_id(tenant_id)
        return await archive.listing(self._tenants, tenant_id, after, limit)

    async def put_archived(self, tenant_id: str, items: Sequence[archive.Archived]) -> None:
        """Archived artifacts written with their stored vectors and feedback counters (one write)."""
        validation.tenant_id(tenant_id)
        await archive.put(self._tenants, tenant_id, items)

    async def import_stage(self, tenant_id: str, replace: bool) -> archive.ImportStage:
        """A store of its own to import the tenant into, swapped in on commit."""
        validation.tenant_id(tenant_id)
        return archive.stage(self._tenants, tenant_id, replace, lambda s: KnowledgeStore(s, self._ingester),
                             swapped=lambda: self._data_ids.pop(tenant_id, None))

    async def user_data(self, tenant_id: str, kind: str) -> list[dict]:
        """The tenant's user data of one kind as archive records (../archive.py)."""
        validation.tenant_id(tenant_id)
        return await archive.user_data(self._tenants, tenant_id, kind)

    async def put_user_data(self, tenant_id: str, kind: str, records: Sequence[dict]) -> None:
        validation.tenant_id(tenant_id)
        await archive.put_user_data(self._tenants, tenant_id, kind, records)

    async def tenant_fingerprint(self, tenant_id: str) -> str:
        """The tenant's recorded embedding model fingerprint ("" none recorded; ../fingerprints.py)."""
        validation.tenant_id(tenant_id)
        return await archive.fingerprint(self._tenants, tenant_id)

    async def set_tenant_fingerprint(self, tenant_id: str, fingerprint: str) -> None:
        validation.tenant_id(tenant_id)
        await archive.set_fingerprint(self._tenants, tenant_id, fingerprint)

    # -- ranking profiles --------------------------------------------------------------------

    async def put_profile(self, profile: RankingProfile) -> RankingProfile:
        """Store `profile` as the next version of (tenant, persona, name); returns it as stored."""
        return await ranking_inputs.put_profile(self._tenants, profile)

    async def get_profile(self, tenant_id: str, persona_id: str, name: str, version: int = 0) -> RankingProfile | None:
        """A profile (latest version unless `version`); `name` "" = the persona's default, else
        the tenant's. A persona without its own profile of that name falls back to the tenant's."""
        return await ranking_inputs.get_profile(self._tenants, tenant_id, persona_id, name, version)

    async def list_profiles(self, tenant_id: str, persona_id: str = "") -> list[RankingProfile]:
        """Latest version of every profile of the tenant (of one persona when given)."""
        return await ranking_inputs.list_profiles(self._tenants, tenant_id, persona_id)

    async def put_ranking_model(self, tenant_id: str, raw: bytes,
                                profile: RankingProfile | None = None) -> tuple[str, RankingProfile | None]:
        """Store a checked ranking model once by its sha256; given `profile`, also its next
        version naming the model (services/knowledge_store/ranking_models.py)."""
        return await ranking_inputs.put_ranking_model(self._tenants, tenant_id, raw, profile)

    async def get_ranking_model(self, tenant_id: str, sha256: str) -> bytes | None:
        """A stored model's bytes by its sha256, None when the tenant has no such model."""
        return await ranking_inputs.get_ranking_model(self._tenants, tenant_id, sha256)

    # -- personas ----------------------------------------------------------------------------

    async def put_persona(self, persona: Persona) -> Persona:
        """Store a persona agent's settings (replacing earlier ones); returns them as stored."""
        return await personas.put_persona(self._tenants, persona)

    async def get_persona(self, tenant_id: str, persona_id: str) -> Persona:
        """A persona's settings; NotFound when it has none."""
        return await personas.get_persona(self._tenants, tenant_id, persona_id)

    async def list_personas(self, tenant_id: str) -> list[Persona]:
        return await personas.list_personas(self._tenants, tenant_id)

    # -- feedback ----------------------------------------------------------------------------

    async def record_feedback(self, tenant_id: str, target: Literal["entry", "artifact"], target_id: str,
                              helpful: bool, user_id: str, *, comment: str = "",
                              search_id: str = "") -> FeedbackAck:
        """Persist a helpful/unhelpful vote on an entry or artifact; counted on the artifact.
        A user has one vote per artifact (the latest counts). `search_id`: checked against the
        search log (../search_log.py)."""
        return await ranking_inputs.record_feedback(self._tenants, tenant_id, target, target_id, helpful, user_id,
                                                    comment=comment, search_id=search_id)

    async def record_search(self, record: SearchLogRecord) -> None:
        """Log what a search returned, to whom (bounded; ../search_log.py)."""
        await self._search_log.record(record)

    async def record_source_feedback(self, tenant_id: str, source_id: str, target_id: str, helpful: bool,
                                     user_id: str, *, search_id: str = "") -> SourceVotes:
        """A user's one current vote on a federated source (a second replaces the first)."""
        return await feedback_log.record_source_feedback(self._tenants, tenant_id, source_id, target_id, helpful,
                                                         user_id, search_id)

    async def source_votes(self, tenant_id: str) -> list[SourceVotes]:
        return await feedback_log.source_votes(self._tenants, tenant_id)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every tenant's files. Later calls raise Unavailable."""
        self._scrub.close()
        self._consistency.close()
        self._tenants.close()
