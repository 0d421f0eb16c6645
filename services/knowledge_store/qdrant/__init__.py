"""The KnowledgeStore on a Qdrant cluster (the `qdrant` backend, backend.py), by concern:

    store.py       the facade (QdrantKnowledgeStore): stats, profiles, personas, feedback
    base.py        the plumbing: connection, collections, shards, scrolls, records
    writes.py      ingest and delete: the commit point, recovery of killed writes
    statistics.py  the tenant's keyword statistics (df, N, total length)
    search.py      vector, keyword, listing and by-id searches
    layout.py      the data model (collections, point ids, payload indexes)
    filters.py     SearchFilters as a Qdrant filter
    bm25.py        the tenant-scoped BM25 as a sparse dot product
    connection.py  the client with timeouts, retries and errors

It imports nothing of the embedded backend: what both share is the front's (backend.py)."""
from services.knowledge_store.qdrant.store import QdrantKnowledgeStore

__all__ = ["QdrantKnowledgeStore"]
