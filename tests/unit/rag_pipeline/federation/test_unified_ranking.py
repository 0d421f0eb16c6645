"""SearchAndRank over the local store and remote sources: remote hits ranked by the local
scale whatever scale the remote scores on, explanations naming their source, per-source
reports, partial answers when a source fails, and the local path unchanged without remotes."""
from __future__ import annotations

from dataclasses import replace


import pytest

from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.federation.fanout import Federation, RemoteQuery
from services.rag_pipeline.federation.hits import ERROR, OK, RemoteHit
from services.rag_pipeline.federation.sources import Source, SourcesConfig
from services.rag_pipeline.models import Preferences, SearchRequest
from shared.errors import InvalidArgument, NotFound
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

TENANT = "acme"
QUERY = "how do I reset the battery controller"
LOCAL = {
    "turbine": ("Turbine inspection checklist", "Inspect the turbine blades for cracks, check the gearbox oil "
                "level and record the vibration readings of every bearing."),
    "sales": ("Quarterly sales report", "Revenue grew in the northern region while marketing costs stayed flat."),
    "garden": ("Garden irrigation schedule", "Water the tomato beds early in the morning and mulch them."),
    "battery_faq": ("Battery FAQ", "The battery controller status light blinks amber while charging."),
}
REMOTE = {
    "battery": ("Battery controller reset", "When the battery controller hangs, hold the reset button for ten "
                "seconds until the status light blinks green. The controller then reloads its firmware."),
    "kitchen": ("Kitchen cleaning rota", "Wipe the counters and empty the dishwasher every evening."),
}
EVERYTHING = {**LOCAL, **REMOTE}
FAR = Source(id="far", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}), timeout_s=2.0, reputation=0.5,
             tenants=frozenset({TENANT}))
DOWN = Source(id="down", url="http://127.0.0.1:9/mcp", groups=frozenset({"eng"}), timeout_s=2.0,
              tenants=frozenset({TENANT}))


def remote_answer(scale):
    """A remote holding REMOTE that scores on its own scale: `scale(rank)` (it ranks the
    irrelevant document first, to show its order and scores are not used)."""
    async def search(source: Source, query: RemoteQuery, deadline_s: float) -> list[RemoteHit]:
        if source.id == "down":
            raise ConnectionResetError("peer closed the connection mid-query")
        order = ["kitchen", "battery"]
        return [RemoteHit(source.id, f"seg-{a}", REMOTE[a][1], title=REMOTE[a][0], score=scale(i + 1), rank=i + 1)
                for i, a in enumerate(order)]
    return search


async def store_with(tmp_path, name, corpus):
    knowledge = InProcessKnowledge.in_directory(tmp_path / name)
    await knowledge.store.ingest(TENANT, "", [doc(a, body, title=t) for a, (t, body) in corpus.items()])
    return knowledge


@pytest.fixture
async def local(tmp_path):
    knowledge = await store_with(tmp_path, "local", LOCAL)
    yield knowledge
    await knowledge.close()


def pipeline(knowledge, federation=None) -> RagPipeline:
    return RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel(),
                       federation=federation)


def request(**fields) -> SearchRequest:
    return SearchRequest(tenant_id=TENANT, query=QUERY, prefs=Preferences(explain=True), **fields)


def fingerprint(response):
    return [(r.entry.id, r.overall, r.scores, r.explanation, r.source_id) for r in response.results]


async def test_local_results_are_unchanged_when_no_remote_source_is_configured(local):
    alone = await pipeline(local).search_and_rank(request())
    empty = await pipeline(local, Federation(lambda: SourcesConfig(), remote_answer(float))).search_and_rank(request())
    assert fingerprint(alone) == fingerprint(empty) and alone.results
    assert alone.sources == empty.sources == ()
    assert alone.degraded_reasons == empty.degraded_reasons
    assert [t for t, _ in alone.timings] == [t for t, _ in empty.timings]
    assert all(r.source_id == "local" and r.explanation.source_id == "local" for r in alone.results)
    with pytest.raises(InvalidArgument, match="sources.*accepted: local"):
        await pipeline(local).search_and_rank(request(sources=("far",)))


@pytest.mark.parametrize("scale", [
    lambda rank: 1000.0 / rank,           # raw BM25-like, large
    lambda rank: 0.1 * rank,              # a distance: lower is better
    lambda rank: None,                    # no score at all
], ids=["bm25_scale", "distance", "no_score"])
async def test_the_remote_document_ranks_where_a_single_index_would_put_it_whatever_its_scale(tmp_path, local, scale):
    single = await store_with(tmp_path, "single", EVERYTHING)
    try:
        expected = [r.artifact.artifact_id for r in (await pipeline(single).search_and_rank(request())).results]
    finally:
        await single.close()
    federated = await pipeline(local, Federation(lambda: SourcesConfig((FAR,)), remote_answer(scale))
                               ).search_and_rank(request())
    got = [r.artifact.artifact_id.removeprefix("far:seg-") for r in federated.results]
    assert got[0] == expected[0] == "battery"
    assert got.index("kitchen") > got.index("battery_faq")       # the remote's first hit is not ours
    assert got == expected                                        # same order as one index holding all
    top = federated.results[0]
    assert top.source_id == top.explanation.source_id == "far" and top.entry.id == "far:seg-battery"
    assert top.explanation.dense_source == top.explanation.bm25_source == "rescored"
    assert top.entry.text == REMOTE["battery"][1] and top.artifact.reputation_prior == FAR.reputation
    assert {(r.source_id, r.status) for r in federated.sources} == {("local", OK), ("far", OK)}
    assert not federated.degraded


async def test_a_source_failing_mid_query_gives_a_partial_answer_marked_degraded(local):
    fed = Federation(lambda: SourcesConfig((FAR, DOWN)), remote_answer(float))
    response = await pipeline(local, fed).search_and_rank(request())
    by_id = {r.source_id: r for r in response.sources}
    assert by_id["down"].status == ERROR and "mid-query" in by_id["down"].error
    assert by_id["far"].status == OK and by_id["far"].result_count == 2
    assert by_id["local"].status == OK and by_id["local"].result_count == len(LOCAL)
    assert response.degraded and any(r.startswith("source down error") for r in response.degraded_reasons)
    assert {r.source_id for r in response.results} == {"local", "far"}


async def test_a_selection_asks_only_the_sources_named(local):
    asked: list[str] = []
    answer = remote_answer(float)

    async def counting(source, query, deadline_s):
        asked.append(source.id)
        return await answer(source, query, deadline_s)

    fed = Federation(lambda: SourcesConfig((FAR,)), counting)
    only_local = await pipeline(local, fed).search_and_rank(request(sources=("local",)))
    assert asked == [] and {r.source_id for r in only_local.results} == {"local"}
    assert [s.source_id for s in only_local.sources] == ["local"]
    only_far = await pipeline(local, fed).search_and_rank(request(sources=("far",)))
    assert asked == ["far"] and {r.source_id for r in only_far.results} == {"far"}
    assert [s.source_id for s in only_far.sources] == ["far"]


async def test_a_remote_copy_of_a_local_document_is_returned_once_as_the_local_one(local):
    async def copying(source, query, deadline_s):
        title, body = LOCAL["battery_faq"]
        return [RemoteHit(source.id, "copy", body, title=title, score=9.0, rank=1)]

    response = await pipeline(local, Federation(lambda: SourcesConfig((FAR,)), copying)).search_and_rank(request())
    texts = [r.entry.text for r in response.results]
    assert texts.count(LOCAL["battery_faq"][1]) == 1
    assert [r.source_id for r in response.results if r.entry.text == LOCAL["battery_faq"][1]] == ["local"]


async def test_a_remote_passage_is_labelled_as_untrusted_for_synthesis(local):
    from services.rag_pipeline.tools.convert import passage_title

    response = await pipeline(local, Federation(lambda: SourcesConfig((FAR,)), remote_answer(float))
                              ).search_and_rank(request())
    titles = {r.source_id: passage_title(r) for r in response.results}
    assert titles["far"].startswith("[remote source far: untrusted data] ")
    assert not titles["local"].startswith("[remote")


async def test_a_tenant_with_nothing_stored_still_gets_the_remote_results(local):
    fed = Federation(lambda: SourcesConfig((replace(FAR, tenants=frozenset({"empty-tenant"})),)), remote_answer(float))
    response = await pipeline(local, fed).search_and_rank(SearchRequest(tenant_id="empty-tenant", query=QUERY))
    assert {r.source_id for r in response.results} == {"far"} and response.results
    reports = {r.source_id: r for r in response.sources}
    assert reports["local"].status == ERROR and reports["local"].error == "nothing stored for this tenant"
    with pytest.raises(NotFound):                       # without federation, as before
        await pipeline(local).search_and_rank(SearchRequest(tenant_id="empty-tenant", query=QUERY))


def test_a_remote_hits_fused_score_depends_only_on_its_raw_signals_not_on_the_list_it_came_from():
    from ranking import RankingConfig
    from ranking.rank import rank
    from services.rag_pipeline.merge import Merged, ranking_candidates

    signals = (0, 0.5, 0.5, 0, 0)
    local = [Merged("l1", "a1", signals, dense=0.61, dense_rank=1, bm25=12.0, bm25_rank=1),
             Merged("l2", "a2", signals, dense=0.42, dense_rank=2, bm25=4.5, bm25_rank=3),
             Merged("l3", "a3", signals, dense=0.30, dense_rank=3, bm25=7.0, bm25_rank=2)]
    overall = {}
    for place, remote_score in ((1, 1.0e6), (50, -3.0)):      # first or last of its source, any scale
        twin = Merged("far:x", "far:x", signals, dense=0.42, bm25=4.5, origin="far", remote_score=remote_score)
        merged = local + [twin]
        for fusion in ("adaptive", "convex", "convex_minmax"):
            ranked = rank(ranking_candidates(merged), RankingConfig(fusion=fusion), len(merged))
            by_row = dict(zip(ranked.rows.tolist(), ranked.overall.tolist()))
            assert by_row[3] == pytest.approx(by_row[1], abs=1e-6), fusion     # its local twin's score
            overall.setdefault(fusion, set()).add(round(by_row[3], 6))
    assert all(len(v) == 1 for v in overall.values())
