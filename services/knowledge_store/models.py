"""The KnowledgeStore core's own types: the embedder it is given and its index kinds.

The records it stores and serves (artifacts, entries, hits, filters, ...) live in
`shared/records.py`; ranking profiles in `ranking/profile.py`.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

INDEX_KINDS = ("flat", "hnsw", "ivf")


class Embedder(Protocol):
    """Turns texts into vectors. Production: a client of LlmOrchestration.GenerateEmbeddings."""

    async def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...
