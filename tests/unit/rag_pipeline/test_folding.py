"""Duplicate folding (services/rag_pipeline/merge.py): the fold itself on hand-made results (hash,
cosine, tie-break, remote results, a tag post-filter), then through RagPipeline.search_and_rank
over a real KnowledgeStore (in-process ports): a request's flag, a profile's setting, off by default."""
from __future__ import annotations

import numpy as np
import pytest

from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from ranking.profile import RankingProfile
from services.rag_pipeline.convert import request_from_pb, result_to_pb
from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.merge import FOLD_COSINE, fold, folded_into, visible_copies
from services.rag_pipeline.models import RankedResult, SearchRequest
from services.rag_pipeline.pages import Pages, _slim
from shared.records import ArtifactSummary, Entry
from shared.settings import RagPipelineSettings
from shared.text_hash import text_hash
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc


def result(aid: str, overall: float, text: str, *, source: str = "local", tags: tuple[str, ...] = ()) -> RankedResult:
    return RankedResult(entry=Entry(f"{aid}#0", "t", "", aid, 0, text, "", "", 0, 0.5, text_hash=text_hash(text)),
                        artifact=ArtifactSummary(aid, tags=tags), snippet=text, overall=overall,
                        scores=(overall, 0.0, 0.0, 0.0), explanation=None, source_id=source)


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, np.float32)
    return v / np.linalg.norm(v)


def test_copies_fold_by_hash_or_by_cosine_into_the_best_ranked_and_ties_go_to_the_smaller_id():
    results = (result("pdf", 0.9, "Reset the controller."), result("other", 0.85, "Turbines spin."),
               result("html", 0.8, "RESET the controller!"), result("near", 0.7, "Reset the controller now."),
               result("far", 0.6, "Reset a controller later."), result("remote", 0.5, "Reset the controller.",
                                                                          source="peer"))
    a = unit(1, 0, 0)
    vectors = {"pdf#0": a, "other#0": unit(0, 1, 0), "html#0": a, "near#0": unit(1, 0.1, 0),
               "far#0": unit(1, 0.5, 0)}
    assert float(np.dot(a, vectors["near#0"])) >= FOLD_COSINE > float(np.dot(a, vectors["far#0"]))
    out, folded = fold(results, vectors, k=10)
    assert [r.artifact.artifact_id for r in out] == ["pdf", "other", "far", "remote"]   # a remote copy: its source's
    assert [d.artifact.artifact_id for d in out[0].duplicates] == ["html", "near"]
    assert folded == {"html": "pdf", "near": "pdf"} == folded_into(out)
    assert fold(results, vectors, k=2)[0][1].artifact.artifact_id == "other"
    tied = (result("b", 0.5, "Same text."), result("a", 0.5, "same   text"))
    out, folded = fold(tied, {}, k=10)
    assert [r.artifact.artifact_id for r in out] == ["a"] and folded == {"b": "a"}


def test_a_tag_post_filter_promotes_the_first_copy_it_keeps_and_drops_a_group_it_keeps_none_of():
    out, _ = fold((result("x", 0.9, "One text.", tags=("draft",)), result("y", 0.8, "One text.", tags=("ok",)),
                   result("z", 0.7, "One text.", tags=("ok",)), result("w", 0.6, "Another.", tags=("draft",))),
                  {}, k=10)
    kept = visible_copies(out, lambda tags: "ok" in tags)
    assert [(r.artifact.artifact_id, [d.artifact.artifact_id for d in r.duplicates]) for r in kept] == [("y", ["z"])]


BATTERY = ("When the battery controller hangs, hold the reset button for ten seconds until the status light "
           "blinks green. The controller then reloads its firmware.")
CORPUS = {"battery.pdf": BATTERY, "battery.html": BATTERY.upper().replace(".", " ."),
          "turbine": "Inspect the turbine blades for cracks and check the gearbox oil level.",
          "garden": "Water the tomato beds early in the morning and mulch them."}


@pytest.fixture
async def pipeline(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest("acme", "", [doc(aid, body, title="Battery" if "battery" in aid else aid)
                                              for aid, body in CORPUS.items()])
    yield RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())
    await knowledge.close()


async def ids(pipeline: RagPipeline, **fields) -> list[tuple[str, list[str]]]:
    response = await pipeline.search_and_rank(SearchRequest("acme", "reset the battery controller", top_k_final=3,
                                                            **fields))
    return [(r.artifact.artifact_id, [d.artifact.artifact_id for d in r.duplicates]) for r in response.results]


async def test_folding_is_off_by_default_and_on_by_the_request_or_the_profile(pipeline):
    off = await ids(pipeline)
    assert {a for a, _ in off[:2]} == {"battery.html", "battery.pdf"} and len(off) == 3
    on = await ids(pipeline, fold_duplicates=True)
    debug = (await pipeline.search_and_rank(SearchRequest("acme", "reset the battery controller", top_k_final=3,
                                                          fold_duplicates=True))).debug
    assert "folded=1" in debug and "unavailable" not in debug          # its one store call answered
    assert on[0] in (("battery.html", ["battery.pdf"]), ("battery.pdf", ["battery.html"]))
    assert len(on) == 3 and {a for a, _ in on[1:]} == {"turbine", "garden"}      # the freed place refilled
    await pipeline.put_profile(RankingProfile(tenant_id="acme", name="folds", is_default=True, fold_duplicates=True))
    stored = await pipeline.get_profile("acme", "", "folds")
    assert stored.fold_duplicates is True
    pipeline._profiles.clear()
    assert await ids(pipeline) == on
    assert await ids(pipeline, fold_duplicates=False) == off


async def test_a_later_page_lists_only_copies_still_there_and_promotes_one_when_the_representative_is_gone(
        pipeline):
    response = await pipeline.search_and_rank(SearchRequest("acme", "reset the battery controller", top_k_final=3,
                                                            fold_duplicates=True))
    group = _slim(response.results[0])               # as a held ranking keeps it
    rep, [copy] = group.artifact.artifact_id, [d.artifact.artifact_id for d in group.duplicates]
    pages = Pages(pipeline)
    [same] = await pages._still_visible([group], "battery", "acme", None)
    assert (same.artifact.artifact_id, [d.artifact.artifact_id for d in same.duplicates]) == (rep, [copy])
    assert group.entry.text == "" and same.entry.text == CORPUS[rep]          # read again for the page
    await pipeline.knowledge.store.delete("acme", [rep])
    [promoted] = await pages._still_visible([group], "battery", "acme", None)
    assert (promoted.artifact.artifact_id, promoted.duplicates) == (copy, ())
    await pipeline.knowledge.store.delete("acme", [copy])
    assert await pages._still_visible([group], "battery", "acme", None) == [None]


def test_the_flag_and_the_duplicates_cross_grpc():
    assert request_from_pb(rag_pb.SearchAndRankRequest(tenant_id="t", user_query_text="q")).fold_duplicates is None
    for flag in (True, False):
        request = rag_pb.SearchAndRankRequest(tenant_id="t", user_query_text="q", fold_duplicates=flag)
        assert request_from_pb(request).fold_duplicates is flag
    out, _ = fold((result("pdf", 0.9, "One text."), result("html", 0.8, "ONE text")), {}, k=10)
    [msg] = [result_to_pb(r) for r in out]
    assert [(d.artifact_id, d.entry_id) for d in msg.duplicates] == [("html", "html#0")]


async def test_why_not_names_the_result_a_document_was_folded_into(pipeline):
    from services.rag_pipeline.capture import Captured
    from services.rag_pipeline.why_not import folded_into as why_folded

    response = await pipeline.search_and_rank(SearchRequest("acme", "reset the battery controller", top_k_final=3,
                                                            fold_duplicates=True))
    rep, copy = response.results[0].artifact.artifact_id, response.results[0].duplicates[0].artifact.artifact_id
    captured = Captured(results=response.results)
    assert (why_folded(captured, copy), why_folded(captured, rep), why_folded(captured, "turbine")) == (rep, "", "")
