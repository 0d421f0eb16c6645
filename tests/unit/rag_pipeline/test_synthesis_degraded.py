"""rag_get_synthesized_results says when its answer was made without a configured step (the
answer re-ranker failed), after whatever the search itself reported."""
from __future__ import annotations

from services.llm_orchestration.results import Synthesis
from services.rag_pipeline.tools.schemas import MetaOut
from services.rag_pipeline.tools.convert import add_degraded


def test_a_degraded_synthesis_marks_the_answer_after_the_searchs_reasons():
    meta = MetaOut()
    meta.degraded, meta.degraded_reasons = True, ["source hr: unavailable"]
    add_degraded(meta, Synthesis("a", (), False, "", "m", "extractive", degraded=True,
                                 degraded_reasons=("answer re-ranker unavailable (rerank-api: 500)",)))
    assert meta.degraded is True
    assert meta.degraded_reasons == ["source hr: unavailable", "answer re-ranker unavailable (rerank-api: 500)"]


def test_a_whole_synthesis_changes_nothing():
    meta = MetaOut()
    add_degraded(meta, Synthesis("a", (), False, "", "m", "extractive+cross-encoder"))
    assert not meta.degraded and not meta.degraded_reasons
