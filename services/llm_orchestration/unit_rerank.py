"""The extractive answer's units scored by the configured model re-ranker (issue 30).

Without a chat model the answer quotes the passages' best units (synthesis.py): today each is
scored by the embedding cosine and BM25 (`synthesis.unit_scores`), which misses paraphrased
questions. When the operator configured a model re-ranker, every unit is also scored against
the question by it — one batched call of `LlmOrchestrator.rerank` with (question, unit context)
pairs, the context being what the embedding scores (passage title, section heading, the unit; a
table row with its header), cut as the re-ranker cuts passages — and blended in:

    score = (1 − w) · today's score + w · minmax(re-ranker score over this answer's units)

`minmax` maps the lowest re-ranker score among the answer's units to 0 and the highest to 1
(all equal: 0 for every unit, so today's order stands). The re-ranker's scores are already in
[0, 1] (the cross-encoder's sigmoid of its logit, the API's relevance), but a cross-encoder's
sigmoid crowds most units of a paraphrase near 0 or 1; min-max keeps the spread of this answer.

Settings (shared/settings.py, `NUCLEUS_LLM_SYNTHESIS_*`): `synthesis_reranker` "auto" (the
cross-encoder if configured, else the rerank API if configured, else none) | "off" |
"cross-encoder" | "rerank-api" (it must be configured), and `synthesis_rerank_weight` w in
[0, 1] (default 0.5; 0 = the re-ranker is not called).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ranking.profile import CROSS_ENCODER, RERANK_API
from shared.errors import InvalidArgument

from .results import SynthesisMethodName

AUTO, OFF = "auto", "off"
SYNTHESIS_RERANKERS = (AUTO, OFF, CROSS_ENCODER, RERANK_API)
TODAY = "embedding+bm25"                 # the unit scorer without a model re-ranker
REASON_CHARS = 300


def check_settings(reranker: str, weight: float, *, cross_encoder: bool, rerank_api: bool) -> None:
    """InvalidArgument naming the setting unless the choice and the weight can work."""
    if reranker not in SYNTHESIS_RERANKERS:
        raise InvalidArgument("synthesis_reranker", f"{reranker!r} is not accepted; accepted: "
                              f"{', '.join(repr(r) for r in SYNTHESIS_RERANKERS)} (NUCLEUS_LLM_SYNTHESIS_RERANKER)")
    if reranker == CROSS_ENCODER and not cross_encoder:
        raise InvalidArgument("synthesis_reranker", "'cross-encoder' needs a configured cross-encoder "
                              "(NUCLEUS_LLM_CROSS_ENCODER_PATH); 'auto' or 'off' work without one")
    if reranker == RERANK_API and not rerank_api:
        raise InvalidArgument("synthesis_reranker", "'rerank-api' needs a configured rerank API "
                              "(NUCLEUS_LLM_RERANK_API_URL); 'auto' or 'off' work without one")
    if not (isinstance(weight, (int, float)) and math.isfinite(weight) and 0.0 <= weight <= 1.0):
        raise InvalidArgument("synthesis_rerank_weight", f"{weight!r} is out of range; a number in [0, 1] is "
                              "accepted (NUCLEUS_LLM_SYNTHESIS_RERANK_WEIGHT; 0 = no model re-ranking)")


def choose(reranker: str, weight: float, *, cross_encoder: bool, rerank_api: bool) -> str:
    """The re-ranker the extractive answer uses: "cross-encoder", "rerank-api" or "" (none)."""
    if reranker == OFF or weight == 0.0:
        return ""
    if reranker == AUTO:
        return CROSS_ENCODER if cross_encoder else (RERANK_API if rerank_api else "")
    return reranker


def min_max(scores: NDArray[np.floating]) -> NDArray[np.float64]:
    """Lowest → 0, highest → 1; all equal (or one unit) → 0 everywhere."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    if high - low <= 1e-12:
        return np.zeros_like(values)
    return (values - low) / (high - low)


def blend(today: NDArray[np.floating], model: NDArray[np.floating], weight: float) -> NDArray[np.float32]:
    """(1 − weight) · today + weight · min_max(model), per unit."""
    today64 = np.asarray(today, dtype=np.float64)
    if today64.shape != np.shape(model):
        raise ValueError(f"{np.shape(model)} re-ranker scores for {today64.shape} units")
    return ((1.0 - weight) * today64 + weight * min_max(model)).astype(np.float32)


@dataclass(frozen=True, slots=True)
class UnitScores:
    """How the answer's units were scored."""
    scores: NDArray[np.float32]          # what extract_answer ranks by
    today: NDArray[np.float32]           # embedding cosine + BM25 + prior (synthesis.unit_scores)
    model: NDArray[np.float32] | None    # the re-ranker's [0, 1] scores; None: not used or failed
    reranker: str                        # "cross-encoder" | "rerank-api" | "" (none used)
    model_name: str                      # the re-ranker's model ("" when none used)
    degraded_reason: str                 # "" unless the chosen re-ranker failed

    @property
    def scorer(self) -> str:
        """The unit scorer used, for spans and the method: "embedding+bm25" or "…+cross-encoder"."""
        return f"{TODAY}+{self.reranker}" if self.reranker else TODAY

    @classmethod
    def without_model(cls, today: NDArray[np.float32], degraded_reason: str = "") -> "UnitScores":
        return cls(today, today, None, "", "", degraded_reason)


def method_name(reranker: str) -> SynthesisMethodName:
    """The Synthesis `method`: "extractive", or "extractive+<re-ranker>" when one scored the units."""
    if reranker == CROSS_ENCODER:
        return "extractive+cross-encoder"
    if reranker == RERANK_API:
        return "extractive+rerank-api"
    return "extractive"


def failure_reason(reranker: str, err: BaseException) -> str:
    """The degraded reason for a failed re-ranker call (no unit text: only the error's kind and message)."""
    kind = getattr(err, "kind", "") or type(err).__name__
    detail = " ".join(str(err).split())[:REASON_CHARS]
    return (f"answer re-ranker unavailable ({reranker}: {kind}: {detail}); "
            f"units scored by embedding cosine and BM25 only")
