"""SearchAndRank never returns a result pointing at an entry that vanished between the candidate
search and the entry fetch (its artifact deleted, or upserted into fewer chunks): the result is
dropped and its place refilled from the remaining candidates. A real KnowledgeStore (SQLite +
FAISS in tmp_path) is changed by real writes at that moment, or concurrently."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from services.rag_pipeline.core import RagPipeline
from services.rag_pipeline.models import Preferences, SearchRequest, SearchResponse
from shared.records import Hit
from shared.settings import RagPipelineSettings
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

TENANT = "acme"
QUERY = "battery controller reset"
DOCS = {f"doc{i}": f"Battery controller note {i}: reset the controller when the battery {'hangs ' * (i % 4 + 1)}"
                   f"and check the status light. Extra words {i} {'firmware ' * i}" for i in range(8)}


class FetchRace(InProcessKnowledge):
    """The real store; `before_fetch` runs (once) just before the next GetEntries, as a writer
    committing between the candidate search and the entry fetch would."""

    before_fetch: Callable[[], Awaitable[None]] | None = None

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str], *,
                          timeout_s: float | None = None) -> list[Hit]:
        action, self.before_fetch = self.before_fetch, None
        if action is not None:
            await action()
        return await super().__getattr__("get_entries")(tenant_id, entry_ids, timeout_s=timeout_s)


@pytest.fixture
async def knowledge(tmp_path):
    knowledge = FetchRace.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [doc(aid, body, title=f"Note {aid}") for aid, body in DOCS.items()])
    yield knowledge
    await knowledge.close()


@pytest.fixture
def pipeline(knowledge) -> RagPipeline:
    return RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())


async def search(pipeline: RagPipeline, k: int = 3, collapse: bool | None = None, **prefs) -> SearchResponse:
    return await pipeline.search_and_rank(SearchRequest(query=QUERY, tenant_id=TENANT, top_k_final=k,
                                                        prefs=Preferences(explain=True, **prefs), collapse=collapse))


async def assert_results_exist(knowledge: InProcessKnowledge, response: SearchResponse) -> None:
    """Every result carries the text its entry holds in the store right now."""
    ids = [r.entry.id for r in response.results]
    stored = {h.entry.id: h.entry.text for h in await knowledge.store.get_entries(TENANT, ids)}
    for r in response.results:
        assert r.entry.text, f"{r.entry.id} returned without text"
        assert stored.get(r.entry.id) == r.entry.text, f"{r.entry.id} is not (or no longer) in the store"


async def test_an_artifact_deleted_before_the_fetch_is_dropped_and_its_place_refilled(pipeline, knowledge):
    before = await search(pipeline)
    top = before.results[0].artifact.artifact_id

    async def delete_top() -> None:
        await knowledge.store.delete(TENANT, [top])

    knowledge.before_fetch = delete_top
    response = await search(pipeline)
    assert top not in {r.artifact.artifact_id for r in response.results}
    assert len(response.results) == 3                      # refilled from the remaining candidates
    assert not response.degraded, response.degraded_reasons
    assert "vanished=1" in response.debug
    await assert_results_exist(knowledge, response)
    assert [r.artifact.artifact_id for r in response.results] == [r.artifact.artifact_id
                                                                 for r in before.results[1:]] + [
        response.results[-1].artifact.artifact_id]        # the others keep their order


async def test_chunks_dropped_by_an_upsert_that_shrinks_the_artifact_are_never_returned(tmp_path):
    long_manual = "\n\n".join(f"Section {i}. The battery controller reset procedure, step {i}: hold the reset "
                              f"button and watch the status light. " + "filler words here " * 60 for i in range(6))
    knowledge = FetchRace.in_directory(tmp_path)
    try:
        await knowledge.store.ingest(TENANT, "", [doc("manual", long_manual, title="Manual"),
                                                  *(doc(a, b) for a, b in DOCS.items())])
        pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=InProcessLanguageModel())
        before = await search(pipeline, k=20, collapse=False)  # every candidate: 8 notes + the manual's chunks
        manual_chunks = {r.entry.id for r in before.results if r.artifact.artifact_id == "manual"}
        assert any(not e.endswith("#0") for e in manual_chunks), manual_chunks

        async def shrink() -> None:
            await knowledge.store.ingest(TENANT, "", [doc("manual", "The battery controller manual moved.",
                                                          title="Manual")])

        knowledge.before_fetch = shrink
        response = await search(pipeline, k=20, collapse=False)
        assert {r.entry.id for r in response.results if r.artifact.artifact_id == "manual"} == {"manual#0"}
        assert len(response.results) == len(DOCS) + 1
        assert not response.degraded, response.degraded_reasons
        await assert_results_exist(knowledge, response)
    finally:
        await knowledge.close()


class RecordingModel(InProcessLanguageModel):
    """The in-process language model, remembering what it was asked to re-rank."""

    reranked: list[tuple[str, str]] = []

    async def rerank(self, query: str, candidates: Sequence[tuple[str, str]], *, method: str = "",
                     timeout_s: float | None = None):
        self.reranked = list(candidates)
        return await super().rerank(query, candidates, timeout_s=timeout_s)


async def test_vanished_entries_are_not_sent_to_the_reranker(knowledge):
    model = RecordingModel()
    pipeline = RagPipeline(RagPipelineSettings(), knowledge=knowledge, llm=model)
    before = await search(pipeline)
    gone = [r.artifact.artifact_id for r in before.results[:2]]

    async def delete_two() -> None:
        await knowledge.store.delete(TENANT, gone)

    knowledge.before_fetch = delete_two
    response = await search(pipeline, rerank=True)
    assert model.reranked and all(text for _, text in model.reranked)
    assert not {entry_id.split("#")[0] for entry_id, _ in model.reranked} & set(gone)
    assert not set(gone) & {r.artifact.artifact_id for r in response.results}
    assert len(response.results) == 3 and not response.degraded, response.degraded_reasons
    await assert_results_exist(knowledge, response)


async def test_everything_deleted_before_the_fetch_answers_no_results(pipeline, knowledge):
    async def delete_all() -> None:
        await knowledge.store.delete(TENANT, list(DOCS))

    knowledge.before_fetch = delete_all
    response = await search(pipeline)
    assert response.results == ()


async def test_concurrent_deletes_and_upserts_never_surface_a_vanished_entry(pipeline, knowledge):
    stop = asyncio.Event()
    writes = 0

    async def writer(n: int) -> None:
        nonlocal writes
        i = 0
        while not stop.is_set():
            aid = f"doc{(n + i) % len(DOCS)}"
            if i % 2:
                await knowledge.store.delete(TENANT, [aid])
            else:
                body = DOCS[aid] if i % 4 else DOCS[aid] + "\n\n" + "More battery controller detail. " * 80
                await knowledge.store.ingest(TENANT, "", [doc(aid, body, title=f"Note {aid}")])
            writes += 1
            i += 1

    async def reader() -> list[SearchResponse]:
        # At least 25 searches each, and on until the writers have interleaved enough writes (a
        # loaded machine, or searches that also log, can otherwise finish before the writers run).
        answers: list[SearchResponse] = []
        while len(answers) < 25 or (writes <= 20 and len(answers) < 500):
            answers.append(await search(pipeline, k=4))
        return answers

    writers = [asyncio.create_task(writer(n)) for n in range(4)]
    try:
        answers = [r for batch in await asyncio.gather(*(reader() for _ in range(4))) for r in batch]
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert writes > 20
    for response in answers:
        assert not response.degraded, response.degraded_reasons
        for r in response.results:
            assert r.entry.text, f"{r.entry.id} returned without text"
