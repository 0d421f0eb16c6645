"""The embedded backend's KnowledgeStore: durable, tenant-scoped hybrid retrieval (SQLite +
FAISS + BM25) in a data directory; one of the two backends behind backend.StoreBackend.

The class is composed by concern (as qdrant/store.py is); each module holds its methods on a
mixin over the state this module builds (the tenants, the settings, the embedder):

    this module      construction, health, status, data_id, close
      ├── per tenant: TenantDB            (SQLite, the system of record: storage/)
      │               VectorIndex         (FAISS: vector_index.py)
      │               KeywordIndex        (in-memory BM25 of SQLite's FTS5 rows: keyword_index.py)
      │               both saved next to SQLite and loaded on open when their stamp matches,
      │               else caught up or rebuilt (persistence.py); opened lazily, evicted under
      │               the memory budget and closed by tenants.py, locked by locking.py
      ├── writes:   one SQLite transaction, then FAISS + keyword index under the tenant's
      │             exclusive lock (writes.py)
      ├── Searcher: vector (FAISS with an id selector from the SQL filters), keyword (in-memory
      │             BM25 with a mask from the same SQL filters; the query read by ../keywords.py),
      │             listing, get by id; the row ids a filter allows are cached per tenant until
      │             the next write (allowed_cache.py); small reads run on the event loop (search.py)
      ├── Ingest:   the front's document preparation (../preparation.py: validate all →
      │             extract/chunk/analyse → embed) → ONE write; delete; title vectors (ingest.py)
      ├── RankingInputs: profiles, ranking models, feedback (ranking_inputs.py; the profile
      │             rules are ../profiles.py)
      ├── FeedbackLog: the search log and source votes (feedback_log.py; the rules are ../search_log.py)
      ├── Personas: personas.py (the record is ../personas.py)
      ├── TopicReads: topics.py (the reads; the clustering is the front's, ../topics.py)
      ├── Maintenance: tenants, stats, integrity check, index configuration, /metrics totals
      │             (maintenance.py)
      ├── Archives: the tenant archive's listing, writes, import stage, user data (archive.py)
      ├── Backups:  online snapshots and restores of tenants (backup.py)
      ├── Scrubbing: row checksums checked on read (storage/rowsums.py) and by a background scrub
      │             at a bounded read rate (scrub.py)
      ├── Consistency: the full consistency check and the repair of derived rows, also in the
      │             background for a tenant found inconsistent on open (consistency.py)
      └── health: storage faults (disk full, read-only, corrupted tenant) and repairs, per
          tenant (../health.py, storage/faults.py)

Isolation is structural: a tenant's data lives only in `<data_dir>/tenants/<tenant>/` and in
its own FAISS object; every call resolves exactly one tenant first.

Consistency: records = keyword rows (FTS5, the durable keyword store) = vectors always
(`verify_integrity`): SQLite commits first, the in-memory indexes follow under the tenant's
exclusive lock, and after a crash both are caught up from what SQLite committed (tenants.py, writes.py).
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

from services.knowledge_store.embedded import archive
from services.knowledge_store.embedded.archive import Archives
from services.knowledge_store.embedded.backup import Backups
from services.knowledge_store.embedded.consistency import Consistency
from services.knowledge_store.embedded.feedback_log import FeedbackLog, SearchLogWriter
from services.knowledge_store.embedded.ingest import Ingest
from services.knowledge_store.embedded.maintenance import Maintenance
from services.knowledge_store.embedded.personas import Personas
from services.knowledge_store.embedded.ranking_inputs import RankingInputs
from services.knowledge_store.embedded.scrub import Scrub, Scrubbing
from services.knowledge_store.embedded.search import Searcher
from services.knowledge_store.embedded.tenants import Tenants
from services.knowledge_store.embedded.topics import EmbeddedTopicSource, TopicReads
from services.knowledge_store.health import StoreHealth
from services.knowledge_store.keywords import DEFAULT_BM25_WEIGHTS
from services.knowledge_store.models import Embedder, StoreStatus
from services.knowledge_store.topics import Topics
from shared.settings import KnowledgeStoreSettings

DATA_ID_TTL_S = 1.0     # `data_id` is read again after this long (an import swaps in within it)


class KnowledgeStore(Searcher, Ingest, RankingInputs, FeedbackLog, Personas, TopicReads, Maintenance, Archives,
                     Backups, Scrubbing, Consistency):
    """The storage engine. See the module docstring; every method is tenant-scoped."""

    def __init__(self, settings: KnowledgeStoreSettings, embedder: Embedder, *,
                 bm25_weights: tuple[float, float] = DEFAULT_BM25_WEIGHTS) -> None:
        self._tenants = Tenants(settings, bm25_weights)
        self._data_ids: dict[str, tuple[float, str]] = {}     # tenant -> (until, data id): `data_id`
        self._search_log = SearchLogWriter(self._tenants)
        self.dimension = settings.dimension         # of every tenant's vectors
        self.data_dir = Path(settings.data_dir)     # the store's own directory
        self.embedder = embedder
        Searcher.__init__(self, settings, self._tenants)
        self._repairs = set()                       # background repairs running (consistency.py)
        self._tenants.on_inconsistent = self._schedule_repair
        self._topics = Topics(EmbeddedTopicSource(self._tenants), settings.dimension)
        self._scrub = Scrub(self._tenants)
        self._scrub.start()
        if not settings.read_only and self.data_dir.is_dir():
            archive.sweep(self.data_dir)                     # a killed import's leftovers

    @property
    def health(self) -> StoreHealth:
        """The store's condition: problems by tenant, repairs (../health.py)."""
        return self._tenants.health

    def data_id(self, tenant_id: str) -> str:
        """The tenant directory's identity (device, inode): a restore or an import swaps another
        directory into its place (backup.py `swap`), writes keep it; "" while there is none. Read
        at most every DATA_ID_TTL_S (a restore or an import forgets it at once)."""
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

    def _forget_data_id(self, tenant_id: str) -> None:
        self._data_ids.pop(tenant_id, None)

    def status(self) -> StoreStatus:
        """A snapshot of `health`: "ok" or "degraded", each problem naming tenant and path."""
        tenants = tuple(self._tenants.open_tenants())
        status = self._tenants.health.status(len(tenants), tenants=tenants,
                                             memory_budget_bytes=self._tenants.settings.memory_budget_mb * 2**20)
        return replace(status, scrub=self._scrub.status_line())

    def close(self) -> None:
        """Close every tenant's files. Later calls raise Unavailable."""
        self._scrub.close()
        self._cancel_repairs()
        self._tenants.close()
