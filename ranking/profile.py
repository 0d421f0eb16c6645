"""A ranking profile: the stored, named tuning of the 4R ranking for a tenant or a persona.

The KnowledgeStore keeps profiles (versioned); the RAGPipeline resolves one per query (request
> persona > tenant default > `BUILTIN_PROFILE`) and turns it into a `RankingConfig`. Its
defaults are the ranking vocabulary's (`ranking/inputs.py`), so there is one place to change them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ranking.inputs import (
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_HALF_LIFE_DAYS,
    DEFAULT_PRIOR_STRENGTH,
    DEFAULT_RECENCY_MODE,
    DEFAULT_WEIGHTS,
)
from shared.errors import InvalidArgument

DEFAULT_RERANK_TOP_N = 20
MAX_RERANK_TOP_N = 50
DEFAULT_RERANK_WEIGHT = 0.5

#: The re-rank method names (LlmOrchestration's Rerank `method`, a profile's `reranker`): the
#: default method is "llm" with a chat model, else "embedding-cosine"; the two model re-rankers
#: exist only where the operator configured them (LlmOrchestration's `rerankers` lists what is).
CROSS_ENCODER = "cross-encoder"
RERANK_API = "rerank-api"
RERANKERS = ("llm", "embedding-cosine", CROSS_ENCODER, RERANK_API)
#: A profile's keyword feedback expansion values ("" = off; ranking/feedback.py).
FEEDBACK_EXPANSIONS = ("", "rm3")
#: The profile fields only `nucleus tune` sets (PutRankingModel), never put_ranking_profile.
MODEL_FIELDS = ("model_sha256", "feature_version")


@dataclass(frozen=True, slots=True)
class RankingProfile:
    tenant_id: str
    persona_id: str = ""
    name: str = "default"
    version: int = 0
    relevancy_weight: float = DEFAULT_WEIGHTS[0]
    recency_weight: float = DEFAULT_WEIGHTS[1]
    richness_weight: float = DEFAULT_WEIGHTS[2]
    reputation_weight: float = DEFAULT_WEIGHTS[3]
    fusion_method: str = DEFAULT_FUSION
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    recency_mode: str = DEFAULT_RECENCY_MODE
    recency_half_life_days: float = DEFAULT_HALF_LIFE_DAYS
    reputation_prior_strength: float = DEFAULT_PRIOR_STRENGTH
    # Model re-ranking (off by default): "" = none unless a request asks (then the default
    # method), else a re-ranker LlmOrchestration offers ("cross-encoder", "rerank-api", …);
    # how many of the first ranking's best are re-scored (≤ MAX_RERANK_TOP_N), and the weight
    # of the re-ranker's score in Relevancy (relevancy = (1 − w)·fused + w·rerank).
    reranker: str = ""
    rerank_top_n: int = DEFAULT_RERANK_TOP_N
    rerank_weight: float = DEFAULT_RERANK_WEIGHT
    # The learned ranking (docs/RANKING.md "Learned ranking"): the sha256 of a stored ranking
    # model and the feature version it was trained on — set only by `nucleus tune` through
    # PutRankingModel, never by put_ranking_profile; a new version of the profile keeps them.
    # Keyword feedback expansion of the keyword leg: "" = off, or FEEDBACK_EXPANSIONS.
    model_sha256: str = ""
    feature_version: int = 0
    feedback_expansion: str = ""
    # Duplicate folding (docs/RANKING.md "Duplicates folded"): off unless a profile or a request turns it on.
    fold_duplicates: bool = False
    updated_unix: int = 0
    is_default: bool = False


def refuse_model_fields(p: RankingProfile) -> None:
    """put_ranking_profile (MCP, gRPC, the console) never names a model: InvalidArgument naming the
    field. Only `nucleus tune` sets one (KnowledgeStore PutRankingModel)."""
    for name in MODEL_FIELDS:
        if getattr(p, name):
            raise InvalidArgument(name, "is set only by `nucleus tune` (PutRankingModel), never by "
                                        "put_ranking_profile; a new version of a tuned profile keeps its model")


#: The profile used when neither the request, the persona nor the tenant sets one.
BUILTIN_PROFILE = RankingProfile(tenant_id="", name="builtin-default", version=0)
