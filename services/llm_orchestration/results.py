"""What the LlmOrchestration core returns: frozen dataclasses in plain Python / numpy types.

The gRPC and MCP adapters encode these; nothing here knows about protobuf.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

ExpansionMethodName = Literal["llm", "keywords", "unavailable"]
RerankMethodName = Literal["llm", "embedding-cosine", "cross-encoder", "rerank-api"]
# "extractive+cross-encoder" / "extractive+rerank-api": the extractive answer's units were also scored
# by that model re-ranker (unit_rerank.py); plain "extractive" when none is used or it failed.
SynthesisMethodName = Literal["llm", "extractive", "extractive+cross-encoder", "extractive+rerank-api"]


@dataclass(frozen=True, slots=True)
class EmbeddingResult:
    vectors: NDArray[np.float32]   # (count, dimension), rows L2-normalised, read-only
    model: str                     # e.g. "all-MiniLM-L6-v2"
    provider: str                  # "local" | "openai"
    dimension: int
    cache_hits: int                # texts served from the LRU cache, not encoded again


@dataclass(frozen=True, slots=True)
class Expansion:
    phrases: tuple[str, ...]       # phrases[0] is the original query, unchanged
    method: ExpansionMethodName
    note: str                      # which technique ran, or why nothing was added
    model: str                     # chat model for "llm", else ""


@dataclass(frozen=True, slots=True)
class RerankResult:
    scores: tuple[float, ...]      # in [0, 1], same order as the candidates
    model: str                     # chat model ("llm"), embedding model ("embedding-cosine"),
                                   # cross-encoder folder/name, or the rerank API's model
    method: RerankMethodName


class Citation(NamedTuple):
    passage_id: str
    title: str


@dataclass(frozen=True, slots=True)
class Synthesis:
    answer: str
    citations: tuple[Citation, ...]   # passages the answer cites, in order of first citation
    truncated: bool
    truncation_reason: str            # "" unless truncated; several reasons joined by "; "
    model: str
    method: SynthesisMethodName
    degraded: bool = False            # a configured step failed and the answer was made without it
    degraded_reasons: tuple[str, ...] = ()   # why, e.g. "answer re-ranker unavailable (rerank-api: …)"
