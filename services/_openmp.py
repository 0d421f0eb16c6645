"""Imported first by every service's main module, before torch or faiss load OpenMP.

OpenMP threads (torch in LlmOrchestration, FAISS in KnowledgeStore) busy-wait after each
parallel region by default, burning the cores another process on the same machine needs
right then (a query's embedding runs while the previous query's FAISS search spins). The
service processes therefore wait passively unless the operator chose otherwise. Code that
only imports the services' clients or cores (the CLI, benchmarks, tests) keeps the OpenMP
defaults a user's own process would have — which is what the in-process baseline of
`nucleus bench` must measure.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
