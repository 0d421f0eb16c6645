"""Test helpers for the KnowledgeStore core: a deterministic embedding function and builders.

`HashEmbedder` is a test embedding *function* (signed feature hashing of analysed terms into
`dim` buckets, L2-normalised), not a double of a service: texts sharing terms get similar
vectors, identical texts identical ones, and it costs microseconds.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from shared.analysis import analyse
from shared.records import ArtifactMeta, DocumentIn
from shared.settings import KnowledgeStoreSettings


class HashEmbedder:
    def __init__(self, dimension: int = 384) -> None:
        self.dimension = dimension
        self.calls = 0

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimension, np.float32)
        for term in analyse(text) or ["\x00empty"]:
            h = int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little")
            v[h % self.dimension] += 1.0 if (h >> 40) & 1 else -1.0
        norm = np.linalg.norm(v)
        if norm == 0:                      # colliding terms cancelled out
            v[0] = 1.0
            norm = 1.0
        return v / norm

    async def model_name(self) -> str:
        return f"feature-hashing-{self.dimension}"

    async def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)


def settings_for(path: Path, **overrides) -> KnowledgeStoreSettings:
    return KnowledgeStoreSettings(data_dir=path, **overrides)


def doc(artifact_id: str, content: str, content_type: str = "text/plain", **meta) -> DocumentIn:
    return DocumentIn(artifact=ArtifactMeta(artifact_id=artifact_id, **meta), content=content,
                      content_type=content_type)
