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
