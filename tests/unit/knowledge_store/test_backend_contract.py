"""The KnowledgeStore contract, run against every backend (backend.StoreBackend): embedded
(SQLite + FAISS + BM25) and qdrant (qdrant-client's local mode in a folder; a real Qdrant server
too when NUCLEUS_TEST_QDRANT_URL is set). Both are filled with the same documents and must give
the same answers: ingest, upsert, delete, both searches, every filter (same ids), tenant
canaries, bad input leaving no write, stats, profiles, feedback.

One store per backend for the module (local mode is slow to open); each test uses its own
tenants.
"""
from __future__ import annotations

import hashlib
import os
import time
import uuid
from dataclasses import replace

import numpy as np
import pytest

from ranking.profile import RankingProfile
from services.knowledge_store import front
from services.knowledge_store.backend import StoreBackend, open_store
from shared.errors import InvalidArgument, NotFound, Unimplemented
from shared.analysis import ANALYSER_ID, query_terms
from shared.records import AnalysedText, SearchFilters, SearchLogItem, SearchLogRecord
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for
from tests.unit.knowledge_store.naive_keywords import bm25, random_tenant, rm3_terms
from tests.support.retrieval import candidates_by_both_legs, candidates_by_filters

QDRANT_URL = os.environ.get("NUCLEUS_TEST_QDRANT_URL", "")
BACKENDS = ["embedded", "qdrant-local",
            pytest.param("qdrant-server", marks=pytest.mark.skipif(
                not QDRANT_URL, reason="NUCLEUS_TEST_QDRANT_URL is not set: no Qdrant server to test against"))]
DAY = 86_400


@pytest.fixture(scope="module", params=BACKENDS)
def store(request, tmp_path_factory) -> StoreBackend:
    base = tmp_path_factory.mktemp(request.param)
    if request.param == "embedded":
        settings = settings_for(base)
    elif request.param == "qdrant-local":
        settings = settings_for(base, backend="qdrant", qdrant_path=base / "qdrant")
    else:
        settings = settings_for(base, backend="qdrant", qdrant_url=QDRANT_URL,
                                qdrant_collection_prefix=f"t{uuid.uuid4().hex[:8]}")
    ks = open_store(settings, HashEmbedder())
    yield ks
    ks.close()


CORPUS = [
    doc("volcano", "Volcanic eruptions release sulfur dioxide that cools the climate for a year or two.",
        title="Volcanoes", source_type="wiki", source_id="w", tags=("geo", "climate"), owners=("ann",),
        modified_unix=10 * DAY),
    doc("bread", "Sourdough bread rises because wild yeast and lactobacilli ferment the dough.",
        title="Bread", source_type="blog", source_id="b", tags=("food",), owners=("bob",), created_unix=20 * DAY),
    doc("yeast", "Yeast cells ferment sugar into alcohol and carbon dioxide; brewers select strains.",
        title="Yeast", source_type="blog", source_id="b", tags=("food", "bio"), owners=("ann", "cy"),
        modified_unix=30 * DAY, visibility_groups=("lab",)),
    doc("ash", "Volcanic ash clouds ground aircraft because ash melts inside jet engines.",
        title="Ash", source_type="news", source_id="n", owners=("dee",), created_unix=40 * DAY,
        visibility_groups=("ops", "lab")),
    doc("undated", "Climate models couple oceans, ice and the atmosphere.", title="Models", source_type="wiki",
        source_id="w", tags=("climate",)),
]

PERSONA_DOC = doc("notes", "Persona notes on climate, glaciers and brewers.", title="Notes", source_type="note",
                  source_id="p")

FILTERS = {
    "none": SearchFilters(),
    "date_from": SearchFilters(date_from_unix=20 * DAY),
    "date_to": SearchFilters(date_to_unix=25 * DAY),
    "date_range": SearchFilters(date_from_unix=15 * DAY, date_to_unix=35 * DAY),
    "source_types": SearchFilters(source_types=("blog", "news")),
    "source_ids": SearchFilters(source_ids=("w",)),
    "tags_any": SearchFilters(tags=("bio", "geo")),
    "owners_any": SearchFilters(owners=("ann",)),
    "artifact_ids": SearchFilters(artifact_ids=("ash", "bread", "nope")),
    "persona": SearchFilters(persona_id="p1"),
    "visibility_none": SearchFilters(enforce_visibility=True),
    "visibility_lab": SearchFilters(enforce_visibility=True, visibility_groups=("lab",)),
    "combined": SearchFilters(source_types=("blog",), tags=("food",), date_from_unix=25 * DAY,
                              enforce_visibility=True, visibility_groups=("lab",)),
}

# What each filter lets through of CORPUS + PERSONA_DOC (ingested for persona "p1").
EXPECTED = {
    "none": {"volcano", "bread", "yeast", "ash", "undated", "notes"},
    "date_from": {"bread", "yeast", "ash"},
    "date_to": {"volcano", "bread"},
    "date_range": {"bread", "yeast"},
    "source_types": {"bread", "yeast", "ash"},
    "source_ids": {"volcano", "undated"},
    "tags_any": {"volcano", "yeast"},
    "owners_any": {"volcano", "yeast"},
    "artifact_ids": {"ash", "bread"},
    "persona": {"notes"},
    "visibility_none": {"volcano", "bread", "undated", "notes"},
    "visibility_lab": {"volcano", "bread", "undated", "yeast", "ash", "notes"},
    "combined": {"yeast"},
}


async def _fill(store: StoreBackend, tenant: str) -> None:
    report = await store.ingest(tenant, "", CORPUS)
    assert [r.artifact_id for r in report.results] == [d.artifact.artifact_id for d in CORPUS]
    await store.ingest(tenant, "p1", [PERSONA_DOC])


def _artifacts(hits) -> set[str]:
    return {h.entry.artifact_id for h in hits}


async def test_backend_implements_the_protocol(store):
    assert isinstance(store, StoreBackend)


@pytest.mark.parametrize("name", list(FILTERS))
async def test_every_filter_lets_through_the_same_entries_on_both_searches(store, name):
    tenant = "filters"
    if name == "none":
        await _fill(store, tenant)
    embedder = HashEmbedder()
    f = FILTERS[name]
    [dense] = await store.dense(tenant, await embedder.embed(["volcanic climate yeast"]), 50, f, hits=True)
    assert _artifacts(dense) == EXPECTED[name]
    listing, _ = await store.keyword(tenant, "", [], 50, f, hits=True)
    assert _artifacts(listing) == EXPECTED[name]
    keyword, _ = await store.keyword(tenant, "volcanic climate yeast dough brewers", [], 50, f, hits=True)
    assert _artifacts(keyword) == EXPECTED[name]


async def test_listing_is_newest_first_and_searches_rank_alike(store):
    tenant = "order"
    await _fill(store, tenant)
    listing, terms = await store.keyword(tenant, "", [], 10, SearchFilters(), hits=True)
    assert terms == []
    assert [h.entry.artifact_id for h in listing][:4] == ["ash", "yeast", "bread", "volcano"]
    assert {h.entry.artifact_id for h in listing[4:]} == {"undated", "notes"}
    hits, terms = await store.keyword(tenant, "volcanic ash", [], 10, SearchFilters(), hits=True)
    assert terms == ["volcan", "ash"]
    assert hits[0].entry.artifact_id == "ash" and _artifacts(hits) == {"ash", "volcano"}
    assert hits[0].score > hits[1].score > 0
    [dense] = await store.dense(tenant, await HashEmbedder().embed(
        ["Volcanic ash clouds ground aircraft because ash melts inside jet engines."]), 2, SearchFilters(), hits=True)
    assert dense[0].entry.artifact_id == "ash" and dense[0].score > 0.9
    only_stopwords, terms = await store.keyword(tenant, "the of and", [], 10, SearchFilters(), hits=True)
    assert only_stopwords == [] and terms == []


async def test_upsert_replaces_and_delete_removes(store):
    tenant = "upsert"
    await _fill(store, tenant)
    again = await store.ingest(tenant, "", [doc("bread", "Rye bread needs a sour starter; kneading is optional.",
                                                title="Bread", source_type="blog")])
    assert again.results[0].entries_replaced == 1
    hits, _ = await store.keyword(tenant, "sourdough lactobacilli", [], 10, SearchFilters(), hits=True)
    assert "bread" not in _artifacts(hits)
    hits, _ = await store.keyword(tenant, "rye starter", [], 10, SearchFilters(), hits=True)
    assert _artifacts(hits) == {"bread"} and len(hits) == 1
    same = await store.ingest(tenant, "", [CORPUS[0]])               # the same document again
    assert same.results[0].entries_replaced == 1
    assert (await store.stats(tenant)).entries == 6
    assert await store.delete(tenant, ["volcano", "never-there"]) == (1, 1)
    [dense] = await store.dense(tenant, await HashEmbedder().embed(["volcanic"]), 10, SearchFilters(), hits=True)
    assert "volcano" not in _artifacts(dense)
    stats = await store.stats(tenant)
    assert stats.artifacts == 5 and stats.entries == stats.vectors == stats.keyword_docs == 5
    assert {s.source_id: s.artifacts for s in stats.sources} == {"": 1, "b": 1, "n": 1, "p": 1, "w": 1}
    hits, _ = await store.keyword(tenant, "volcanic", [], 10, SearchFilters(), hits=True)
    assert _artifacts(hits) == {"ash"}


async def test_a_retried_ingest_key_answers_its_commit_and_never_overwrites_a_newer_version(store):
    tenant = "retried"
    first = await store.ingest(tenant, "", [doc("note", "Kestrels hover above meadows.", title="Note")], key="k-1")
    await store.ingest(tenant, "", [doc("note", "Ospreys dive for fish.", title="Note")])     # written in between
    retry = await store.ingest(tenant, "", [doc("note", "Kestrels hover above meadows.", title="Note")], key="k-1")
    assert retry.results == first.results                     # the first attempt's report, nothing written
    hits, _ = await store.keyword(tenant, "ospreys kestrels", [], 10, SearchFilters(), hits=True)
    assert [h.entry.text for h in hits] == ["Ospreys dive for fish."]
    with pytest.raises(InvalidArgument, match="idempotency_key"):
        await store.ingest(tenant, "", [doc("other", "Wrens sing.")], key="not a key")


async def test_tenants_never_see_each_other(store):
    await store.ingest("canary-a", "", [doc("secret-a", "zebracanary alpha only in tenant a")])
    await store.ingest("canary-b", "", [doc("secret-b", "zebracanary beta only in tenant b")])
    for tenant, own in (("canary-a", "secret-a"), ("canary-b", "secret-b")):
        hits, _ = await store.keyword(tenant, "zebracanary", [], 10, SearchFilters(), hits=True)
        assert _artifacts(hits) == {own}
        [dense] = await store.dense(tenant, await HashEmbedder().embed(["zebracanary"]), 10,
                                               SearchFilters(), hits=True)
        assert _artifacts(dense) == {own}
        other = "secret-b#0" if own == "secret-a" else "secret-a#0"
        assert await store.get_entries(tenant, [other, f"{own}#0"]) == [
            h for h in await store.get_entries(tenant, [f"{own}#0"])]
        assert (await store.stats(tenant)).artifacts == 1
    with pytest.raises(NotFound):
        await store.keyword("canary-nobody", "zebracanary", [], 10, SearchFilters(), hits=True)


async def test_bad_input_leaves_no_write(store):
    tenant = "bad-input"
    with pytest.raises(InvalidArgument) as err:
        await store.ingest(tenant, "", [doc("fine", "a valid document"), doc("bad#id", "hash in the id")])
    assert "artifact_id" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        await store.ingest(tenant, "", [doc("fine", "a valid document"), doc("empty", "   ")])
    assert err.value.field == "documents[1].content"
    with pytest.raises(NotFound):
        await store.stats(tenant)                      # nothing was written, not even the tenant
    report = await store.ingest(tenant, "", [doc("fine", "a valid document"), doc("empty", "   ")],
                                commit_valid=True)
    assert [r.artifact_id for r in report.results] == ["fine"] and report.rejected[0].index == 1
    with pytest.raises(InvalidArgument):
        await store.dense(tenant, [[0.0] * 3], 5, SearchFilters(), hits=True)
    with pytest.raises(InvalidArgument):
        await store.keyword(tenant, "x", [], 0, SearchFilters(), hits=True)
    assert (await store.stats(tenant)).entries == 1


async def test_candidates_and_score_completion(store):
    tenant = "columns"
    await _fill(store, tenant)
    q = await HashEmbedder().embed(["volcanic ash climate"])
    [cols] = await store.dense(tenant, q, 3, SearchFilters())
    assert len(cols) == 3
    assert len(set(cols.row_ids.tolist())) == 3
    kw, terms = await store.keyword(tenant, "yeast", [], 10, SearchFilters())
    assert set(kw.artifact_ids) == {"bread", "yeast"}
    [cols], completion = await store.complete(
        tenant, q, 2, SearchFilters(), keywords="yeast", complete_rows=kw.row_ids.tolist())
    by_row = dict(zip(completion.row_ids.tolist(), completion.bm25.tolist()))
    for row, score in zip(kw.row_ids.tolist(), kw.scores.tolist()):
        assert by_row[row] == pytest.approx(score, rel=1e-4)
    dense = dict(zip(completion.row_ids.tolist(), completion.dense.tolist()))
    for row, score in zip(cols.row_ids.tolist(), cols.scores.tolist()):   # the vector leg's own cosine
        assert dense[row] == pytest.approx(score, abs=1e-5)
    assert completion.keyword_stats.document_frequency == (2,) and completion.keyword_stats.entries == 6


async def test_entry_vectors_are_the_stored_vectors_of_the_tenants_own_entries(store):
    tenant = "vectors"
    await _fill(store, tenant)
    [cols] = await store.dense(tenant, await HashEmbedder().embed(["volcanic ash"]), 2,
                                              SearchFilters())
    got = await store.entry_vectors(tenant, [*cols.entry_ids, "nope#0", "secret-a#0"])
    assert set(got) == set(cols.entry_ids)                       # unknown and other tenants' ids left out
    q = (await HashEmbedder().embed(["volcanic ash"]))[0]
    for entry_id, score in zip(cols.entry_ids, cols.scores.tolist()):   # exactly the vectors searched
        assert float(got[entry_id] @ q) == pytest.approx(score, abs=1e-5)


async def test_score_keywords_for_texts_not_held(store):
    tenant = "external"
    await _fill(store, tenant)
    got = await store.score_texts(tenant, "yeast", [], [("Bread", "yeast makes the dough rise"),
                                                           ("", "glaciers melt in spring")])
    assert got.bm25[0] > 0 and got.bm25[1] == 0.0
    assert got.keyword_stats.document_frequency == (2,) and got.keyword_stats.entries == 6


async def test_entry_terms_score_as_the_entries_themselves_and_a_foreign_analyser_is_refused(store):
    """A peer stack's stored terms (GetEntries include_terms) scored as analysed texts give the
    BM25 and richness of the same texts sent whole; another analyser's terms are refused."""
    tenant = "terms"
    await _fill(store, tenant)
    hits = await store.get_entries(tenant, [f"{d.artifact.artifact_id}#0" for d in CORPUS])
    terms = await store.entry_terms(tenant, [*(h.entry.id for h in hits), "nope#0"])
    assert set(terms) == {h.entry.id for h in hits} and all(t[1] for t in terms.values())
    query = "volcanic ash yeast glaciers"
    whole = await store.score_texts(tenant, query, [], [(h.artifact.title, h.entry.text) for h in hits])
    analysed = await store.score_texts(tenant, query, [], [
        AnalysedText(ANALYSER_ID, *terms[h.entry.id], h.entry.richness) for h in hits])
    assert whole.bm25.max() > 0
    assert analysed.bm25.tolist() == pytest.approx(whole.bm25.tolist(), rel=1e-5)
    assert analysed.richness.tolist() == pytest.approx([h.entry.richness for h in hits], abs=1e-6)
    swapped = await store.score_texts(tenant, query, [], [AnalysedText(ANALYSER_ID, "", "yeast yeast", 0.5)])
    assert swapped.bm25[0] > 0                                   # the terms are what is scored, not a text
    for bad, field in ((AnalysedText("porter-1:x", "", "yeast", 0.5), "texts[0].analyser"),
                       (AnalysedText(ANALYSER_ID, "", "yeast", float("nan")), "texts[0].richness"),
                       (AnalysedText(ANALYSER_ID, "", "y " * 60_000, 0.5), "texts[0].body_terms")):
        with pytest.raises(InvalidArgument) as err:
            await store.score_texts(tenant, query, [], [bad])
        assert err.value.field == field


async def test_profiles_and_feedback(store):
    tenant = "inputs"
    await _fill(store, tenant)
    first = await store.put_profile(RankingProfile(tenant_id=tenant, name="fresh", recency_weight=0.5))
    second = await store.put_profile(RankingProfile(tenant_id=tenant, name="fresh", recency_weight=0.6))
    assert (first.version, second.version) == (1, 2)
    assert (await store.get_profile(tenant, "", "fresh")).recency_weight == 0.6
    assert (await store.get_profile(tenant, "", "fresh", 1)).recency_weight == 0.5
    assert (await store.get_profile(tenant, "p9", "fresh")).version == 2        # persona falls back
    await store.put_profile(RankingProfile(tenant_id=tenant, name="mine", is_default=True))
    assert (await store.get_profile(tenant, "", "")).name == "mine"
    assert [p.name for p in await store.list_profiles(tenant)] == ["fresh", "mine"]
    ack = await store.record_feedback(tenant, "entry", "bread#0", True, "u1")
    assert (ack.artifact_id, ack.feedback_helpful, ack.feedback_unhelpful) == ("bread", 1, 0)
    ack = await store.record_feedback(tenant, "artifact", "bread", False, "u1")      # replaces u1's vote
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
    ack = await store.record_feedback(tenant, "artifact", "bread", True, "u2")
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 1)
    hits, _ = await store.keyword(tenant, "sourdough", [], 1, SearchFilters(), hits=True)
    assert (hits[0].artifact.feedback_helpful, hits[0].artifact.feedback_unhelpful) == (1, 1)
    await store.ingest(tenant, "", [doc("bread", "Bread again, new text.", title="Bread")])   # counters kept
    hits, _ = await store.keyword(tenant, "bread", [], 1, SearchFilters(), hits=True)
    assert hits[0].artifact.feedback_helpful == 1
    with pytest.raises(NotFound):
        await store.record_feedback(tenant, "entry", "bread#7", True, "u1")
    with pytest.raises(InvalidArgument):
        await store.record_feedback(tenant, "artifact", "bread", True, " ")


def _logged(tenant: str, user: str, *items: tuple[str, str]) -> SearchLogRecord:
    return SearchLogRecord(tenant, "s" + uuid.uuid4().hex, user, int(time.time()), hashlib.sha256(b"q").hexdigest(),
                           tuple(SearchLogItem(e, a, rank) for rank, (e, a) in enumerate(items, 1)))


async def test_a_vote_naming_a_search_counts_only_for_its_tenant_user_and_results(store):
    tenant, other = "logged", "logged-other"
    await _fill(store, tenant)
    await _fill(store, other)
    search = _logged(tenant, "alice", ("bread#0", "bread"), ("yeast#0", "yeast"))
    await store.record_search(search)
    await store.record_search(_logged(other, "alice", ("bread#0", "bread")))
    sid = search.search_id
    refused = [(tenant, "entry", "bread#0", "bob", sid),                  # another user
               (tenant, "artifact", "volcano", "alice", sid),             # not among its results
               (other, "entry", "bread#0", "alice", sid),                 # another tenant
               (tenant, "entry", "bread#0", "alice", "s" + uuid.uuid4().hex)]   # never logged
    for t, target, target_id, user, search_id in refused:
        with pytest.raises(InvalidArgument) as err:
            await store.record_feedback(t, target, target_id, True, user, search_id=search_id)
        assert err.value.field == "search_id", (t, target_id, user)
    with pytest.raises(InvalidArgument) as err:
        await store.record_feedback(tenant, "entry", "bread#0", True, "alice", search_id="short")
    assert err.value.field == "search_id"
    hits, _ = await store.keyword(tenant, "sourdough", [], 1, SearchFilters(), hits=True)
    assert (hits[0].artifact.feedback_helpful, hits[0].artifact.feedback_unhelpful) == (0, 0)   # nothing written
    ack = await store.record_feedback(tenant, "entry", "bread#0", True, "alice", search_id=sid)
    assert (ack.artifact_id, ack.feedback_helpful, ack.feedback_unhelpful) == ("bread", 1, 0)
    ack = await store.record_feedback(tenant, "artifact", "bread", False, "alice", search_id=sid)   # replaces
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
    with pytest.raises(NotFound):                       # no store, no log
        await store.record_search(_logged("logged-none", "alice", ("bread#0", "bread")))
    with pytest.raises(InvalidArgument) as err:
        await store.record_search(replace(search, items=(SearchLogItem("bread#0", "bread", 0),)))
    assert err.value.field == "items[0].rank"


async def test_source_votes_are_one_per_user_per_source_and_tenant(store):
    tenant = "source-votes"
    await _fill(store, tenant)
    votes = await store.record_source_feedback(tenant, "legal", "legal:d1", True, "alice")
    assert (votes.source_id, votes.helpful, votes.unhelpful) == ("legal", 1, 0)
    votes = await store.record_source_feedback(tenant, "legal", "legal:d2", False, "alice")   # replaces alice's
    assert (votes.helpful, votes.unhelpful) == (0, 1)
    votes = await store.record_source_feedback(tenant, "legal", "legal:d1", True, "bob")
    assert (votes.helpful, votes.unhelpful) == (1, 1)
    votes = await store.record_source_feedback(tenant, "wiki", "wiki:x", True, "bob")
    assert (votes.source_id, votes.helpful, votes.unhelpful) == ("wiki", 1, 0)          # the voted source's only
    assert [(v.source_id, v.helpful, v.unhelpful) for v in await store.source_votes(tenant)] == [
        ("legal", 1, 1), ("wiki", 1, 0)]
    assert await store.source_votes("source-votes-other") == []
    with pytest.raises(InvalidArgument) as err:
        await store.record_source_feedback(tenant, "legal", "wiki:x", True, "bob")
    assert err.value.field == "target_id"
    search = _logged(tenant, "carol", ("legal:d1", "legal:d1"))
    await store.record_search(search)
    with pytest.raises(InvalidArgument) as err:
        await store.record_source_feedback(tenant, "legal", "legal:d9", True, "carol", search_id=search.search_id)
    assert err.value.field == "search_id"
    votes = await store.record_source_feedback(tenant, "legal", "legal:d1", True, "carol",
                                               search_id=search.search_id)
    assert (votes.source_id, votes.helpful, votes.unhelpful) == ("legal", 2, 1)


async def test_profile_rerank_fields_round_trip_and_are_checked_naming_the_field(store):
    from dataclasses import replace
    tenant = "rerank-fields"
    stored = await store.put_profile(RankingProfile(tenant_id=tenant, name="ce", reranker="cross-encoder",
                                                    rerank_top_n=7, rerank_weight=0.25))
    got = await store.get_profile(tenant, "", "ce")
    assert (stored.reranker, stored.rerank_top_n, stored.rerank_weight) == ("cross-encoder", 7, 0.25)
    assert (got.reranker, got.rerank_top_n, got.rerank_weight) == ("cross-encoder", 7, 0.25)
    plain = await store.put_profile(RankingProfile(tenant_id=tenant, name="plain"))
    assert (plain.reranker, plain.rerank_top_n, plain.rerank_weight) == ("", 20, 0.5)        # off by default
    bad = {"reranker": "bge-large", "rerank_top_n": 51, "rerank_weight": 1.5}
    for field, value in [*bad.items(), ("rerank_top_n", 0), ("rerank_weight", -0.1)]:
        with pytest.raises(InvalidArgument, match=field):
            await store.put_profile(replace(plain, name="bad", **{field: value}))
    assert [p.name for p in await store.list_profiles(tenant)] == ["ce", "plain"]         # nothing half-written
    if store.status().data_dir.startswith("qdrant:"):       # a point stored before the fields existed
        from qdrant_client import models as qm
        from services.knowledge_store.qdrant import layout
        old_row = ["", "old", 1, 1.0, 0.0, 0.0, 0.0, "convex", 0.5, "auto", 30.0, 5.0, 0, 1, 1]
        await store._call("upsert", collection_name=store._names.profiles, wait=True, points=[qm.PointStruct(
            id=layout.profile_point(tenant, "", "old", 1), vector={},
            payload={"tenant_id": tenant, "persona_id": "", "name": "old", "version": 1, "row": old_row})])
        old = await store.get_profile(tenant, "", "old")
        assert (old.relevancy_weight, old.fusion_method, old.reputation_prior_strength) == (1.0, "convex", 5.0)
        assert (old.reranker, old.rerank_top_n, old.rerank_weight, old.is_default) == ("", 20, 0.5, False)


async def test_embedded_only_calls_name_the_backend(store):
    if store.status().data_dir.startswith("qdrant:"):
        with pytest.raises(Unimplemented, match="qdrant backend"):
            await store.configure_index("filters", "hnsw")
    else:
        assert (await store.configure_index("filters", "flat"))[0] == "flat"


async def test_personas(store):
    from services.knowledge_store.personas import Persona
    tenant = "personas"
    stored = await store.put_persona(Persona(tenant_id=tenant, persona_id="p1", display_name="Analyst",
                                             allowed_tools=("search", "search")))
    assert stored.allowed_tools == ("search",) and stored.updated_unix > 0
    await store.put_persona(Persona(tenant_id=tenant, persona_id="p0", system_prompt="be brief"))
    assert (await store.get_persona(tenant, "p1")).display_name == "Analyst"
    assert [p.persona_id for p in await store.list_personas(tenant)] == ["p0", "p1"]
    with pytest.raises(NotFound):
        await store.get_persona(tenant, "nobody")
    with pytest.raises(InvalidArgument):
        await store.put_persona(Persona(tenant_id=tenant, persona_id="p2", allowed_tools=("bad tool!",)))


@pytest.mark.skipif(not QDRANT_URL, reason="NUCLEUS_TEST_QDRANT_URL is not set: concurrent replicas need a Qdrant "
                                           "server (local mode locks its folder to one process)")
async def test_concurrent_replicas_on_one_qdrant_server_serve_each_others_writes(tmp_path):
    import asyncio
    settings = settings_for(tmp_path, backend="qdrant", qdrant_url=QDRANT_URL,
                            qdrant_collection_prefix=f"r{uuid.uuid4().hex[:8]}")
    a, b = open_store(settings, HashEmbedder()), open_store(settings, HashEmbedder())
    try:
        await asyncio.gather(*(store.ingest("shared", "", [doc(f"{name}-{i}", f"replica {name} document {i} text")])
                               for i in range(5) for name, store in (("a", a), ("b", b))))
        for reader in (a, b):
            listing, _ = await reader.keyword("shared", "", [], 100, SearchFilters(), hits=True)
            assert {h.entry.artifact_id for h in listing} == {f"{n}-{i}" for n in "ab" for i in range(5)}
        await b.ingest("shared", "", [doc("a-0", "rewritten by replica b")])
        hits, _ = await a.keyword("shared", "rewritten", [], 5, SearchFilters(), hits=True)
        assert [h.entry.artifact_id for h in hits] == ["a-0"]
        assert (await a.stats("shared")).entries == 10
    finally:
        a.close()
        b.close()


PHRASE_CORPUS = [
    doc("terms-1", "Heart rate and failure rate of valves: heart surgery outcomes, failure analysis.", title="Valves"),
    doc("terms-2", "Heart muscle failure modes; the heart of the failure is fatigue.", title="Muscle"),
    doc("terms-3", "Failure to thrive and heart murmurs in infants.", title="Infants"),
    doc("phrase", "A cohort study of older patients admitted to hospital with congestive heart failure, followed "
                  "for two years for readmission, diet, exercise and the drugs they were prescribed.",
        title="Cohort"),
    doc("other", "Kidney stones and diet.", title="Kidneys"),
]


async def test_quoted_phrase_scores_alike_on_both_backends(tmp_path):
    stores = {"embedded": open_store(settings_for(tmp_path / "e"), HashEmbedder()),
              "qdrant": open_store(settings_for(tmp_path / "q", backend="qdrant", qdrant_path=tmp_path / "q" / "qd"),
                                   HashEmbedder())}
    try:
        got = {}
        for name, store in stores.items():
            await store.ingest("phrases", "", PHRASE_CORPUS)      # one batch: one average length on both
            plain, _ = await store.keyword("phrases", "heart failure", [], 3, SearchFilters(), hits=True)
            quoted, terms = await store.keyword("phrases", '"heart failure"', [], 3, SearchFilters(), hits=True)
            assert terms == ["heart", "failur"]
            assert "phrase" not in _artifacts(plain)                     # only the phrase brings it in
            assert quoted[0].entry.artifact_id == "phrase"
            cols, _ = await store.keyword("phrases", '"heart failure"', [], 3, SearchFilters())
            [_], completion = await store.complete(
                "phrases", await HashEmbedder().embed(["kidney"]), 1, SearchFilters(), keywords='"heart failure"',
                complete_rows=cols.row_ids.tolist())
            by_row = dict(zip(completion.row_ids.tolist(), completion.bm25.tolist()))
            assert [by_row[r] for r in cols.row_ids.tolist()] == pytest.approx(cols.scores.tolist(), rel=1e-4)
            filtered, _ = await store.keyword("phrases", '"heart failure"', [], 3,
                                                        SearchFilters(artifact_ids=("terms-1", "other")), hits=True)
            # No text has "hearts failures" in a row: the entries whose analysed terms have
            # "heart failur" in a row hold it ("heart of the failure" too: stopwords are dropped).
            inflected, _ = await store.keyword("phrases", '"hearts failures"', [], 5, SearchFilters(), hits=True)
            got[name] = ([(h.entry.id, h.score) for h in plain], [(h.entry.id, h.score) for h in quoted],
                         [h.entry.id for h in filtered], [(h.entry.id, h.score) for h in inflected])
        for e, q in zip(got["embedded"][:2] + got["embedded"][3:], got["qdrant"][:2] + got["qdrant"][3:]):
            assert [i for i, _ in e] == [i for i, _ in q]
            assert [s for _, s in e] == pytest.approx([s for _, s in q], rel=1e-4)
        assert got["embedded"][2] == got["qdrant"][2] == ["terms-1#0"]
    finally:
        for store in stores.values():
            store.close()


async def test_a_ranking_model_is_stored_once_by_hash_and_named_only_through_put_ranking_model(store):
    import hashlib as _hashlib
    import pickle

    from ranking.trees import MAX_MODEL_BYTES
    from tests.support.ranking_models import linear_model
    tenant = "models"
    raw = linear_model(0.25)
    sha = _hashlib.sha256(raw).hexdigest()
    base = await store.put_profile(RankingProfile(tenant_id=tenant, name="default", recency_weight=0.3))
    again, stored = await store.put_ranking_model(tenant, raw, replace(base, feedback_expansion="rm3"))
    assert again == sha and (stored.model_sha256, stored.feature_version, stored.version) == (sha, 1, 2)
    assert stored.feedback_expansion == "rm3"
    assert await store.put_ranking_model(tenant, raw) == (sha, None)                  # stored once: same hash
    assert await store.get_ranking_model(tenant, sha) == raw                          # round trip by hash
    assert await store.get_ranking_model("models-other", sha) is None                 # per tenant
    assert await store.get_ranking_model(tenant, "0" * 64) is None
    # a weight edit through put_profile keeps the model; put_profile naming a model is refused
    edited = await store.put_profile(RankingProfile(tenant_id=tenant, name="default", recency_weight=0.6))
    assert (edited.version, edited.model_sha256, edited.feature_version) == (3, sha, 1)
    for field, value in (("model_sha256", sha), ("feature_version", 1)):
        with pytest.raises(InvalidArgument, match=field):
            await store.put_profile(RankingProfile(tenant_id=tenant, name="default", **{field: value}))
    listed = await store.list_profiles(tenant)
    assert [(p.version, p.model_sha256) for p in listed] == [(3, sha)]               # the hash, not the bytes
    # tampered, oversized and pickled models are refused, nothing written
    for bad, why in ((raw.replace(b'"top_n": 30', b'"top_n": 300'), "top_n"),
                     (b"{" + b" " * MAX_MODEL_BYTES + b"}", "bytes"),
                     (pickle.dumps({"format": "nucleus-ranker"}), "pickle"),
                     (linear_model(feature_version=99), "feature_version")):
        with pytest.raises(InvalidArgument, match=why):
            await store.put_ranking_model(tenant, bad, edited)
    assert (await store.get_profile(tenant, "", "default")).version == 3


async def test_weighted_keyword_queries_score_as_a_naive_bm25_loop(store):
    """Term weights multiply each term's BM25 contribution, in the keyword leg, its hits and the
    completion of a vector leg's rows; weights of 1 score bit for bit as no weights."""
    tenant, f = "weighted", SearchFilters()
    docs = await random_tenant(store, tenant, 7)
    vocab = sorted({w for t, b in docs.values() for w in (t + " " + b).split()})
    rng = np.random.default_rng(11)
    q = await HashEmbedder().embed(["kidney"])
    for _ in range(3):
        weights = {str(t): float(w) for t, w in zip(rng.choice(vocab, 4, replace=False), rng.uniform(0.1, 3.0, 4))}
        weights["zzzunheld"] = 2.0                               # a term no entry holds adds nothing
        naive = bm25(docs, weights)
        cols, terms = await store.keyword(tenant, "kidney", [], 50, f, term_weights=weights)
        assert terms == list(weights)
        got = dict(zip(cols.entry_ids, cols.scores.tolist()))
        assert set(got) == {e for e, s in naive.items() if s > 0}
        assert list(got.values()) == pytest.approx([naive[e] for e in got], rel=1e-5)
        assert cols.scores.tolist() == sorted(cols.scores.tolist(), reverse=True)
        hits, _ = await store.keyword(tenant, "kidney", [], 5, f, term_weights=weights, hits=True)
        assert [h.entry.id for h in hits] == list(cols.entry_ids[:5])
        [_], completion = await store.complete(
            tenant, q, 5, f, keywords="kidney", complete_rows=cols.row_ids.tolist(), term_weights=weights)
        by_row = dict(zip(completion.row_ids.tolist(), completion.bm25.tolist()))
        assert [by_row[r] for r in cols.row_ids.tolist()] == pytest.approx(cols.scores.tolist(), rel=1e-5)
        assert completion.keyword_stats.terms == tuple(query_terms(["kidney"]))   # the query's own terms
    text = "glacier kidney insulin"
    plain, own = await store.keyword(tenant, text, [], 50, f)
    ones, _ = await store.keyword(tenant, text, [], 50, f, term_weights=dict.fromkeys(own, 1.0))
    assert plain.entry_ids == ones.entry_ids and plain.scores.tobytes() == ones.scores.tobytes()
    assert plain.scores.tolist() == pytest.approx([bm25(docs, dict.fromkeys(own, 1.0))[e] for e in plain.entry_ids],
                                                  rel=1e-5)


class _Front:
    """The front's one retrieval over a bare backend, as a client would call it."""

    def __init__(self, store: StoreBackend) -> None:
        self._store = store

    async def retrieve(self, request):
        return await front.retrieve(self._store, request)


async def test_rm3_is_the_labs_rm3_over_the_visible_hits_then_weighted_bm25(store):
    """feedback_expansion "rm3": the lab's rm3 over the 10 best hits the filters let through, the
    keyword leg and the completion searching the expanded weighted terms; "" unchanged; a value
    not accepted refused naming the field."""
    tenant, f = "rm3", SearchFilters()
    docs = await random_tenant(store, tenant, 5)
    q = await HashEmbedder().embed(["kidney"])
    even = SearchFilters(artifact_ids=tuple(f"r{i}" for i in range(0, 40, 2)))
    for text, filters in (("glacier kidney", f), ("insulin receptor lipid", f), ("virus plasma", even)):
        allowed = set(docs) if filters is f else {f"{a}#0" for a in filters.artifact_ids}
        expected = rm3_terms(docs, query_terms([text]), allowed)
        assert len(expected) > len(query_terms([text]))
        cols, terms = await candidates_by_filters(_Front(store), tenant, text, [], 50, filters, feedback_expansion="rm3")
        assert terms == list(expected)
        assert list(cols.entry_ids) and set(cols.entry_ids) <= allowed
        naive = bm25(docs, expected)
        assert set(cols.entry_ids) == {e for e in allowed if naive[e] > 0}
        assert cols.scores.tolist() == pytest.approx([naive[e] for e in cols.entry_ids], rel=1e-4)
        keyword, both_terms, [_], completion = await candidates_by_both_legs(
            _Front(store), tenant, q, 50, filters, keywords=text, feedback_expansion="rm3")
        assert both_terms == terms and keyword.entry_ids == cols.entry_ids
        by_row = dict(zip(completion.row_ids.tolist(), completion.bm25.tolist()))
        assert [by_row[r] for r in keyword.row_ids.tolist()] == pytest.approx(keyword.scores.tolist(), rel=1e-5)
        assert completion.keyword_stats.terms == tuple(query_terms([text]))
        plain, plain_terms = await candidates_by_filters(_Front(store), tenant, text, [], 50, filters)
        direct, _ = await store.keyword(tenant, text, [], 50, filters)
        assert plain_terms == query_terms([text]) and plain.scores.tobytes() == direct.scores.tobytes()
    nothing, terms = await candidates_by_filters(_Front(store), tenant, "zzzunheld", [], 50, f, feedback_expansion="rm3")
    assert len(nothing) == 0 and terms == query_terms(["zzzunheld"])          # no hit: the query stands
    with pytest.raises(InvalidArgument) as err:
        await candidates_by_filters(_Front(store), tenant, "kidney", [], 50, f, feedback_expansion="RM3")
    assert err.value.field == "feedback_expansion" and "'rm3'" in str(err.value)
