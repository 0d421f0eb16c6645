"""`nucleus search` prints the top result's feature contributions when a learned model scored it."""
from cli.search import learned_line
from nucleus.v1 import rag_pipeline_pb2 as rag_pb


def test_the_learned_line_names_each_contribution_and_marks_a_missing_value():
    e = rag_pb.ScoreExplanation(learned_base=7.5, feature_contributions=[
        rag_pb.FeatureContribution(name="fused", value=0.75, contribution=-2.5),
        rag_pb.FeatureContribution(name="other features", contribution=0.25)])
    assert learned_line(e) == ("[bold]learned model[/bold] on the top result: base 7.500; "
                               "fused 0.75 -2.500, other features - +0.250")
    assert learned_line(rag_pb.ScoreExplanation()) == ""
