"""The KnowledgeStore on a Qdrant cluster (the `qdrant` backend, backend.py): store.py is the
facade, layout.py the data model, filters.py the filter translation, bm25.py the tenant-scoped
BM25 as a sparse dot product, connection.py the client with timeouts, retries and errors."""
from services.knowledge_store.qdrant.store import QdrantKnowledgeStore

__all__ = ["QdrantKnowledgeStore"]
