"""The KnowledgeStore service: a backend-neutral front and two sibling backends.

    front      backend.py (StoreBackend, open_store), the adapters (grpc_api.py, mcp_api.py,
               convert.py, client.py), validation.py, preparation.py
               (validate, extract, chunk, analyse, embed), keywords.py, profiles.py,
               personas.py, analysis.py, chunking.py, extraction.py, richness.py, health.py
    embedded/  SQLite + FAISS + in-memory BM25 in a data directory (the default)
    qdrant/    a Qdrant cluster, or Qdrant's local mode

main.py composes them into the service process. docs/ARCHITECTURE.md says where things are.
"""
