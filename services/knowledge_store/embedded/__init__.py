"""The embedded backend: SQLite + FAISS + in-memory BM25 in a data directory (core.KnowledgeStore).

One process owns the directory. Everything here is this backend's own; what it shares with the
qdrant backend (validation, document preparation, keyword rules, profile rules) lives in the
front, `services/knowledge_store/`.
"""
