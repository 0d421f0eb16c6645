"""protobuf <-> RAGPipeline core types."""
from __future__ import annotations

from typing import get_type_hints

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from services.knowledge_store import convert as ks_convert
from services.rag_pipeline.merge import duplicate_values
from services.rag_pipeline.models import (
    Explanation, FeatureContribution, FourR, Preferences, RankedResult, SearchRequest, SearchResponse,
    explanation_values,
)

# The explanation's per-factor fields (FourRScores messages on the wire) and its lists of feature contributions.
_FOUR_R_FIELDS = frozenset(name for name, hint in get_type_hints(Explanation).items() if hint == FourR)
_CONTRIBUTION_FIELDS = frozenset(name for name, hint in get_type_hints(Explanation).items()
                                 if hint == tuple[FeatureContribution, ...])


def _explanation_field(name: str, value):
    if name in _FOUR_R_FIELDS:
        return _four(value)
    if name in _CONTRIBUTION_FIELDS:
        return [rag_pb.FeatureContribution(name=c.name, value=c.value, contribution=c.contribution) for c in value]
    return value


def prefs_from_pb(p: pb.RankingPreferences) -> Preferences:
    weights = None
    if p.has_weights:
        weights = (p.relevancy_weight, p.recency_weight, p.richness_weight, p.reputation_weight)
    return Preferences(
        weights=weights, profile_name=p.profile_name, fusion=ks_convert.fusion_from_pb(p.fusion_method),
        recency_mode=ks_convert.recency_from_pb(p.recency_mode), half_life_days=p.recency_half_life_days,
        rerank=p.rerank, explain=p.explain,
    )


def request_from_pb(r: rag_pb.SearchAndRankRequest) -> SearchRequest:
    return SearchRequest(
        tenant_id=r.tenant_id, persona_id=r.persona_id, query=r.user_query_text,
        query_vector=tuple(r.user_query_vector) if len(r.user_query_vector) else None,
        top_k_initial=r.top_k_initial_retrieve, top_k_final=r.top_k_final_rank,
        prefs=prefs_from_pb(r.ranking_prefs), filters=ks_convert.filters_from_pb(r.filters),
        expand=r.expand_query_with_llm, extra_phrases=tuple(r.extra_query_phrases), sources=tuple(r.sources),
        embed_timeout_s=r.embed_timeout_s,
        fold_duplicates=r.fold_duplicates if r.HasField("fold_duplicates") else None,
    )


def _four(values: tuple[float, float, float, float]) -> pb.FourRScores:
    return pb.FourRScores(relevancy=values[0], recency=values[1], richness=values[2], reputation=values[3])


def result_to_pb(r: RankedResult) -> rag_pb.RankedKnowledgeResult:
    msg = rag_pb.RankedKnowledgeResult(
        persona_knowledge_entry_id=r.entry.id, associated_artifact=ks_convert.summary_to_pb(r.artifact),
        snippet=r.snippet, overall_rank_score=r.overall, individual_scores=_four(r.scores),
        headline=r.entry.headline, text=r.entry.text, timestamp_unix=r.entry.timestamp_unix,
        relevance_probability=r.probability, source_id=r.source_id,
        highlights=[rag_pb.TextRange(start=a, end=b) for a, b in r.highlights],
        duplicates=[rag_pb.FoldedDuplicate(**duplicate_values(d)) for d in r.duplicates],
    )
    e = r.explanation
    if e is not None:
        msg.explanation.CopyFrom(rag_pb.ScoreExplanation(**{
            name: _explanation_field(name, v) for name, v in explanation_values(e).items()}))
    return msg


def response_to_pb(r: SearchResponse) -> rag_pb.SearchAndRankResponse:
    return rag_pb.SearchAndRankResponse(
        results=[result_to_pb(x) for x in r.results], debug_information=r.debug, degraded=r.degraded,
        degraded_reasons=list(r.degraded_reasons), profile_name=r.profile_name,
        profile_version=r.profile_version, query_phrases=list(r.query_phrases),
        candidates_considered=r.candidates_considered,
        timings=[rag_pb.StageTiming(stage=s, ms=ms) for s, ms in r.timings],
        temporal_intent=r.temporal_intent,
        sources=[rag_pb.SourceReport(source_id=x.source_id, status=x.status, latency_ms=x.latency_ms,
                                     result_count=x.result_count, error_message=x.error, error_code=x.code,
                                     filtered=x.filtered, note=x.note) for x in r.sources],
        search_id=r.search_id,
    )
