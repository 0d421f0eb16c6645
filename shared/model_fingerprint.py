"""An embedding model identified by its own output: the unit vectors of PROBE_TEXTS (a few fixed
texts) and a digest of them rounded to two decimals. Federation compares stacks by it
(services/rag_pipeline/federation/peer_vectors.py); the KnowledgeStore records it per tenant
(services/knowledge_store/fingerprints.py) and a tenant archive carries it."""
from __future__ import annotations

import hashlib

import numpy as np

PROBE_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Reset the battery controller before replacing the module.",
    "Quarterly revenue grew 12 percent, driven by subscriptions in Europe.",
    "def add(a, b):\n    return a + b",
)


def probe_digest(vectors: np.ndarray) -> tuple[np.ndarray, str]:
    """(the probe vectors as unit float32 rows, their digest) of the model that embedded PROBE_TEXTS
    as `vectors`."""
    v = np.asarray(vectors, np.float32)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    rounded = np.round(v * 100).astype(np.int8)
    return v, hashlib.sha256(f"{v.shape[1]}:".encode() + rounded.tobytes()).hexdigest()[:32]
