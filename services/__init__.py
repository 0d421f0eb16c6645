"""The three Nucleus RAG services.

OpenMP threads (torch in LlmOrchestration, FAISS in KnowledgeStore) busy-wait after each
parallel region by default, burning the cores another process on the same machine needs
right then (a query's embedding runs while the previous query's FAISS search spins). Passive
waiting is set here, before any service imports torch or faiss, unless the operator chose.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
