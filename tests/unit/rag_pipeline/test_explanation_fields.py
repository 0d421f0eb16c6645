"""The ranking Explanation's fields are written once (services/rag_pipeline/models.py); the gRPC
message and the MCP output carry exactly those fields, in that order."""
from dataclasses import MISSING, fields

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from services.rag_pipeline.mcp_api import ExplanationOut
from services.rag_pipeline.models import Explanation

NAMES = [f.name for f in fields(Explanation)]


def test_the_proto_message_has_the_dataclass_fields():
    assert [f.name for f in rag_pb.ScoreExplanation.DESCRIPTOR.fields] == NAMES


def test_the_mcp_output_has_the_dataclass_fields_and_defaults():
    assert list(ExplanationOut.model_fields) == NAMES
    for f in fields(Explanation):
        out = ExplanationOut.model_fields[f.name]
        assert out.is_required() == (f.default is MISSING), f.name
        if not out.is_required():
            assert out.default == f.default, f.name


def test_feature_contributions_reach_the_grpc_message_and_the_mcp_output_a_missing_value_unset():
    import json

    from services.rag_pipeline.convert import result_to_pb
    from services.rag_pipeline.mcp_api import search_response_out
    from services.rag_pipeline.models import FeatureContribution, RankedResult, SearchResponse
    from shared.records import ArtifactSummary, Entry

    listed = (FeatureContribution("fused", 0.75, -2.5), FeatureContribution("other features", None, 0.25))
    explanation = Explanation(weights=(1.0, 0.0, 0.0, 0.0), contributions=(0.5, 0.0, 0.0, 0.0), dense_cosine=0.1,
                              bm25=1.0, dense_rank=1, bm25_rank=1, dense_norm=1.0, bm25_norm=1.0, rerank_score=0.5,
                              fusion_method="convex", recency_applied=False, age_days=-1.0,
                              feature_contributions=listed, learned_base=7.5)
    result = RankedResult(entry=Entry("e", "t", "", "a", 0, "text", "h", "s", 0, 0.5),
                          artifact=ArtifactSummary("a"), snippet="s", overall=0.5, scores=(0.5, 0.5, 0.5, 0.5),
                          explanation=explanation)
    msg = result_to_pb(result).explanation
    assert [(c.name, c.contribution) for c in msg.feature_contributions] == [("fused", -2.5), ("other features", 0.25)]
    assert msg.feature_contributions[0].HasField("value") and not msg.feature_contributions[1].HasField("value")
    assert msg.learned_base == 7.5
    out = json.loads(search_response_out(SearchResponse(results=(result,))).model_dump_json())
    e = out["results"][0]["explanation"]
    assert e["feature_contributions"] == [{"name": "fused", "value": 0.75, "contribution": -2.5},
                                          {"name": "other features", "value": None, "contribution": 0.25}]
    assert e["learned_base"] == 7.5
