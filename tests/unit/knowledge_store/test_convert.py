"""The KnowledgeStore's protobuf conversions carry every field of a record across the wire."""
from __future__ import annotations

from nucleus.v1 import knowledge_store_pb2 as ks_pb
from services.knowledge_store import convert
from shared.records import ArtifactMeta, DocumentIn


def test_a_document_keeps_what_its_conversion_left_out_across_the_wire():
    doc = DocumentIn(ArtifactMeta(artifact_id="ledger", title="Ledger", tags=("parts",)), "| r1c1 |",
                     "text/markdown", truncated="1000 rows of sheet 'Ledger' left out")
    wire = convert.document_to_pb(doc).SerializeToString()
    assert convert.document_from_pb(ks_pb.Document.FromString(wire)) == doc
