"""Remote hits re-scored on the local scale: a remote copy of a local entry gets exactly the
local entry's cosine and BM25 (the tenant's own statistics), whatever the remote's score; a
hit seen before is not embedded again."""
from __future__ import annotations

import math

import numpy as np
import pytest

from services.knowledge_store.embedded.keyword_index import KeywordIndex
from services.rag_pipeline.federation.hits import RemoteHit
from services.rag_pipeline.federation.rescore import Rescorer, VectorCache, content_key
from shared.errors import InvalidArgument, Unavailable
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc
from tests.support.retrieval import candidates_by_vector_with_completion

TENANT = "acme"
CORPUS = {
    "battery": ("Battery controller reset", "When the battery controller hangs, hold the reset button for ten "
                "seconds until the status light blinks green."),
    "turbine": ("Turbine inspection", "Inspect the turbine blades for cracks and check the gearbox oil level."),
    "garden": ("Garden irrigation", "Water the tomato beds early in the morning and mulch them."),
}
QUERY = "reset the battery controller"


def test_score_documents_scores_an_unheld_document_exactly_as_the_same_entry_held():
    rows = [(1, "batteri control reset", "batteri control hang hold reset button"),
            (2, "turbin inspect", "inspect turbin blade crack gearbox oil"),
            (3, "garden", "water tomato bed morn mulch")]
    index = KeywordIndex.build(rows, (2.0, 1.0))
    terms = ["reset", "batteri", "control", "oil"]
    held = index.score_rows(terms, np.array([1, 2, 3], np.int64))
    unheld = index.score_documents(terms, [(t, b) for _, t, b in rows])
    np.testing.assert_allclose(unheld, held, rtol=1e-6)
    assert unheld[0] > unheld[1] > 0 and unheld[2] == 0.0
    assert index.score_documents(["unknownterm"], [("x", "other")]).tolist() == [0.0]


def test_score_documents_scores_a_term_no_entry_holds_with_the_statistics_of_the_documents_holding_it():
    from services.knowledge_store.keywords import B, K1
    rows = [(1, "batteri control reset", "batteri control hang hold reset button"),
            (2, "turbin inspect", "inspect turbin blade crack gearbox oil"),
            (3, "garden", "water tomato bed morn mulch")]
    index = KeywordIndex.build(rows, (2.0, 1.0))
    docs = [("", "ivermectin filariasi treat"), ("", "ivermectin dose oil"), ("", "statin lower cholesterol level")]
    got = index.score_documents(["ivermectin", "oil"], docs)
    # "ivermectin": no local entry holds it; 2 of the 3 documents scored together do (their
    # average length 10 / 3); "oil": the index's own idf and average length
    batch_avgdl, local_avgdl = 10 / 3, sum(len(t.split()) + len(b.split()) for _, t, b in rows) / len(rows)
    unseen_idf = math.log1p((3 - 2 + 0.5) / (2 + 0.5))
    oil_idf = math.log1p((3 - 1 + 0.5) / (1 + 0.5))

    def part(idf, length, avgdl):
        return idf * (K1 + 1.0) / (1.0 + K1 * (1.0 - B + B * length / avgdl))

    np.testing.assert_allclose(got, [part(unseen_idf, 3, batch_avgdl),
                                     part(unseen_idf, 3, batch_avgdl) + part(oil_idf, 3, local_avgdl), 0.0],
                               rtol=1e-6)
    # a term every document scored together holds is not rare among them; one of them holding it is
    common = index.score_documents(["ivermectin"], [("", "ivermectin a b"), ("", "ivermectin c d")])
    rare = index.score_documents(["ivermectin"], [("", "ivermectin a b"), ("", "other c d")])
    assert 0.0 < common[0] < rare[0]
    # terms the index holds keep its statistics: a copy of a held entry scores exactly as held,
    # whatever is scored with it
    held = index.score_rows(["ivermectin", "oil"], np.array([2], np.int64))
    copy = index.score_documents(["ivermectin", "oil"], [(rows[1][1], rows[1][2]), docs[0]])
    np.testing.assert_allclose(copy[0], held[0], rtol=1e-6)


@pytest.fixture
async def ports(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [doc(a, body, title=title) for a, (title, body) in CORPUS.items()])
    yield knowledge, InProcessLanguageModel()
    await knowledge.close()


async def local_signals(knowledge, llm, phrases):
    """The local legs' completed cosine and BM25 of every entry, by artifact id."""
    vectors = await llm.embed(phrases)
    columns, completion = await candidates_by_vector_with_completion(
        knowledge, TENANT, vectors, 10, knowledge_filters(), keywords=phrases[0], extra_keywords=phrases[1:])
    by_row = {int(r): (float(d), float(b)) for r, d, b in zip(completion.row_ids, completion.dense, completion.bm25)}
    return vectors, {a: by_row[int(r)] for a, r in zip(columns[0].artifact_ids, columns[0].row_ids)}


def knowledge_filters():
    from shared.records import SearchFilters
    return SearchFilters()


def remote_copy(artifact: str, score: float, source: str = "far") -> RemoteHit:
    title, body = CORPUS[artifact]
    return RemoteHit(source_id=source, id=f"doc-{artifact}", text=body, title=title, score=score)


async def test_a_remote_copy_of_a_local_entry_gets_the_local_entrys_own_signals(ports):
    knowledge, llm = ports
    phrases = [QUERY, "battery reset button"]
    vectors, local = await local_signals(knowledge, llm, phrases)
    hits = [remote_copy("battery", 1.0e6), remote_copy("garden", -0.01), remote_copy("turbine", 42.0)]
    rescored = await Rescorer(knowledge, llm).rescore(TENANT, phrases, vectors, hits, timeout_s=5.0)
    assert rescored.reasons == []
    for i, artifact in enumerate(["battery", "garden", "turbine"]):
        dense, bm25 = local[artifact]
        assert rescored.dense[i] == pytest.approx(dense, abs=1e-5), artifact
        assert rescored.bm25[i] == pytest.approx(bm25, rel=1e-5), artifact
    assert rescored.bm25[0] > rescored.bm25[2] >= 0.0      # the remote's own scale played no part
    assert 0.0 < rescored.richness[0] <= 1.0


async def test_a_hit_seen_before_is_not_embedded_again(ports):
    knowledge, llm = ports
    rescorer = Rescorer(knowledge, llm)
    vectors = await llm.embed([QUERY])
    hits = [remote_copy("battery", 3.0), remote_copy("turbine", 2.0)]
    first = await rescorer.rescore(TENANT, [QUERY], vectors, hits, timeout_s=5.0)
    calls = llm.calls.count("embed")
    again = await rescorer.rescore(TENANT, [QUERY], vectors, [hits[1], hits[0], remote_copy("garden", 1.0)],
                                   timeout_s=5.0)
    assert first.embedded == 2 and again.embedded == 1                # only the new one
    assert llm.calls.count("embed") == calls + 1
    assert again.dense[0] == first.dense[1] and again.dense[1] == first.dense[0]
    repeat = await rescorer.rescore(TENANT, [QUERY], vectors, hits, timeout_s=5.0)
    assert repeat.embedded == 0 and llm.calls.count("embed") == calls + 1


async def test_a_failing_model_or_store_leaves_that_signal_absent_with_the_reason(ports):
    knowledge, llm = ports
    vectors = await llm.embed([QUERY])
    llm.fail("embed", Unavailable("LlmOrchestration unavailable"))
    rescored = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], vectors, [remote_copy("battery", 1.0)],
                                                      timeout_s=5.0)
    assert math.isnan(rescored.dense[0]) and rescored.bm25[0] > 0
    assert rescored.reasons and "not embedded" in rescored.reasons[0]
    llm.heal("embed")
    knowledge.fail("score_keywords", Unavailable("KnowledgeStore unavailable"))
    rescored = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], vectors, [remote_copy("battery", 1.0)],
                                                      timeout_s=5.0)
    assert math.isnan(rescored.bm25[0]) and rescored.dense[0] > 0
    assert "not keyword-scored" in rescored.reasons[0]


async def test_score_keywords_names_the_field_it_refuses(ports):
    knowledge, _ = ports
    with pytest.raises(InvalidArgument, match=r"texts\[0\]\.text"):
        await knowledge.store.score_texts(TENANT, QUERY, [], [("t", "x" * 200_000)])


def test_vector_cache_is_a_bounded_lru():
    cache = VectorCache(capacity=2)
    a, b, c = (content_key("", t) for t in "abc")
    cache.put(a, np.ones(2)); cache.put(b, np.zeros(2))
    assert cache.get(a) is not None          # a is now the most recent
    cache.put(c, np.ones(2))
    assert cache.get(b) is None and cache.get(a) is not None and cache.get(c) is not None and len(cache) == 2


async def test_a_long_remote_text_is_scored_as_the_store_would_chunk_it_by_its_best_chunk(tmp_path):
    sentences = [f"Section {i} covers the {word} procedure of the fleet in detail and nothing else."
                 for i, word in enumerate(["turbine", "gearbox", "inverter", "battery controller reset", "cabling",
                                           "firmware", "sensor", "bearing"] * 12)]
    body = " ".join(sentences)
    knowledge = InProcessKnowledge.in_directory(tmp_path / "long")
    try:
        await knowledge.store.ingest(TENANT, "", [doc("manual", body, title="Fleet manual"),
                                                  doc("other", "Unrelated kitchen rota.", title="Kitchen")])
        llm = InProcessLanguageModel()
        phrases = [QUERY]
        vectors = await llm.embed(phrases)
        columns, completion = await candidates_by_vector_with_completion(
            knowledge, TENANT, vectors, 50, knowledge_filters(), keywords=QUERY)
        chunks = [r for a, r in zip(columns[0].artifact_ids, columns[0].row_ids) if a == "manual"]
        assert len(chunks) > 1                                          # the store chunked it
        at = {int(r): i for i, r in enumerate(completion.row_ids)}
        best_dense = max(float(completion.dense[at[int(r)]]) for r in chunks)
        best_bm25 = max(float(completion.bm25[at[int(r)]]) for r in chunks)
        hit = RemoteHit("far", "manual", body, title="Fleet manual")
        rescored = await Rescorer(knowledge, llm).rescore(TENANT, phrases, vectors, [hit], timeout_s=5.0)
        assert rescored.dense[0] == pytest.approx(best_dense, abs=1e-5)
        assert rescored.bm25[0] == pytest.approx(best_bm25, rel=1e-5)
        assert rescored.embedded == len(chunks)
    finally:
        await knowledge.close()
