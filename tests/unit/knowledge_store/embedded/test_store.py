"""KnowledgeStore core end to end on real SQLite + FAISS (tmp dirs)."""
from __future__ import annotations

import asyncio
import sqlite3

import numpy as np
import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from ranking.profile import RankingProfile
from shared.records import SearchFilters
from services.knowledge_store.embedded.storage.db import tenant_dir_name
from shared.errors import InvalidArgument, NotFound, UpstreamFailed
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

F = SearchFilters()


async def counts(store: KnowledgeStore, tenant: str) -> dict[str, int]:
    return await store.verify_integrity(tenant)


# -- round trip ------------------------------------------------------------------------------

TOPICS = {
    "volcano": ("Volcanoes", "A volcano erupts when molten rock called magma rises through the crust and "
                             "escapes as lava, ash and gas."),
    "bread": ("Baking bread", "Knead the dough with flour, water, yeast and salt, let it rise for an hour "
                              "and bake it in a hot oven."),
    "tax": ("Tax filing", "Employees must file their income tax return before the April deadline and "
                          "attach every payslip."),
    "python": ("Python lists", "A Python list is a mutable sequence; append adds an element and sort "
                               "orders the items in place."),
}


async def test_round_trip_with_the_real_model_finds_paraphrases_on_both_legs(tmp_path, minilm):
    store = KnowledgeStore(settings_for(tmp_path), minilm)
    try:
        report = await store.ingest("acme", "", [doc(a, body, title=title) for a, (title, body) in TOPICS.items()])
        assert report.total_entries == 4 and [r.entries_written for r in report.results] == [1, 1, 1, 1]
        queries = {"volcano": "what happens when a mountain spits out hot liquid rock",
                   "bread": "how do I make a loaf at home",
                   "tax": "when is the deadline to declare my salary to the government",
                   "python": "how to add an item to an array in a programming language"}
        vectors = minilm.encode(list(queries.values()))
        per_query = await store.dense("acme", vectors, 2, F, hits=True)
        for (expected, _), hits in zip(queries.items(), per_query):
            assert hits[0].entry.artifact_id == expected
            assert hits[0].score > hits[1].score
            assert hits[0].entry.tenant_id == "acme" and hits[0].rank == 1
        hits, terms = await store.keyword("acme", "erupting volcanoes", [], 3, F, hits=True)
        assert terms == ["erupt", "volcano"] and hits[0].entry.artifact_id == "volcano"
        # the vector leg's scores are cosines of the stored (context + text) embedding
        stored = minilm.encode([f"Volcanoes\n{TOPICS['volcano'][1]}"])
        assert per_query[0][0].score == pytest.approx(float(vectors[0] @ stored[0]), abs=1e-4)
    finally:
        store.close()


async def test_entry_fields_are_filled(store):
    await store.ingest("t", "p1", [doc("a1", "# Setup\n\nInstall it.\n\n- one\n- two", "text/markdown",
                                       title="Guide", modified_unix=1_700_000_000, tags=("x",))])
    [hit] = await store.get_entries("t", ["a1#0"])
    e = hit.entry
    assert (e.id, e.tenant_id, e.persona_id, e.artifact_id, e.chunk_index) == ("a1#0", "t", "p1", "a1", 0)
    assert e.headline == "Setup" and e.timestamp_unix == 1_700_000_000
    assert e.text.startswith("Install it.") and e.content_summary.startswith("Install it.")
    assert 0 < e.richness <= 1
    assert hit.artifact.title == "Guide" and hit.artifact.tags == ("x",)


async def test_progress_reports_embedded_entries(tmp_path, embedder):
    store = KnowledgeStore(settings_for(tmp_path, embed_batch_size=2), embedder)
    seen: list[tuple[int, int]] = []
    try:
        await store.ingest("t", "", [doc(f"d{i}", f"text {i}") for i in range(5)], progress=lambda d, t: seen.append((d, t)))
    finally:
        store.close()
    assert seen == [(0, 5), (2, 5), (4, 5), (5, 5)] and embedder.calls == 3   # 0 of n once chunked


# -- upsert and delete -----------------------------------------------------------------------

LONG_OLD = " ".join(f"Obsolete paragraph {i} mentions quasarword and ancient details." for i in range(120))


async def test_upsert_replaces_old_entries_on_both_legs(store, embedder):
    first = await store.ingest("t", "", [doc("a", LONG_OLD), doc("b", "unrelated neighbour text")])
    old_chunks = first.results[0].entries_written
    assert old_chunks > 2
    report = await store.ingest("t", "", [doc("a", "Fresh text about pulsarword only.")])
    assert report.results[0].entries_written == 1 and report.results[0].entries_replaced == old_chunks
    assert await counts(store, "t") == {"records": 2, "vectors": 2, "keyword_docs": 2}
    assert (await store.keyword("t", "quasarword", [], 10, F, hits=True))[0] == []
    hits, _ = await store.keyword("t", "pulsarword", [], 10, F, hits=True)
    assert [h.entry.id for h in hits] == ["a#0"]
    old_vector = embedder.vector(LONG_OLD[:500])
    [vhits] = await store.dense("t", old_vector[None, :], 10, F, hits=True)
    assert {h.entry.id for h in vhits} == {"a#0", "b#0"}
    assert all("quasarword" not in h.entry.text for h in vhits)
    assert (await store.get_entries("t", ["a#1"])) == []


async def test_delete_removes_records_vectors_and_keywords(store, embedder):
    await store.ingest("t", "", [doc("keep", "kept text about lemurs"), doc("gone", LONG_OLD)])
    before = await counts(store, "t")
    gone_chunks = before["records"] - 1
    assert await store.delete("t", ["gone", "never-existed"]) == (1, gone_chunks)
    assert await counts(store, "t") == {"records": 1, "vectors": 1, "keyword_docs": 1}
    assert (await store.keyword("t", "quasarword", [], 10, F, hits=True))[0] == []
    [vhits] = await store.dense("t", embedder.vector(LONG_OLD[:300])[None, :], 10, F, hits=True)
    assert [h.entry.id for h in vhits] == ["keep#0"]
    assert await store.get_entries("t", ["gone#0"]) == []
    stats = await store.stats("t")
    assert (stats.artifacts, stats.entries, stats.vectors, stats.keyword_docs) == (1, 1, 1, 1)
    assert await store.delete("t", ["gone"]) == (0, 0)


# -- filters: k results when k match, however few match -------------------------------------

N_DOCS = 120
GROUP = 20          # attribute c is carried by docs with i % GROUP == c: 6 docs each


def _filter_corpus():
    docs_default, docs_persona = [], []
    for i in range(N_DOCS):
        c = i % GROUP
        # Non-matching documents repeat the query words, so they outrank the matching ones.
        body = "alpha beta " * (1 if c <= 10 else 6) + f"document {i}"
        meta = dict(
            source_type="wiki" if c == 1 else "blog",
            tags=("rare", "t") if c == 2 else ("common",),
            owners=("alice",) if c == 3 else ("bob",),
            source_id="s-rare" if c == 4 else "s-main",
            modified_unix=1_600_000_000 + i if c == 6 else 1_200_000_000 + i,
            visibility_groups=("g-rare",) if c == 7 else () if c == 9 else ("g-other",),
        )
        (docs_persona if c == 5 else docs_default).append(doc(f"d{i}", body, **meta))
    return docs_default, docs_persona


FILTER_CASES = {
    "source_types": (SearchFilters(source_types=("wiki",)), {1}),
    "tags": (SearchFilters(tags=("nope", "rare")), {2}),
    "owners": (SearchFilters(owners=("alice", "carol")), {3}),
    "source_ids": (SearchFilters(source_ids=("s-rare",)), {4}),
    "persona_id": (SearchFilters(persona_id="p-rare"), {5}),
    "date_range": (SearchFilters(date_from_unix=1_500_000_000, date_to_unix=1_700_000_000), {6}),
    "date_from_only": (SearchFilters(date_from_unix=1_500_000_000), {6}),
    "artifact_ids": (SearchFilters(artifact_ids=tuple(f"d{i}" for i in range(10, N_DOCS, GROUP))), {10}),
    "visibility": (SearchFilters(visibility_groups=("g-rare",), enforce_visibility=True), {7, 9}),
    "visibility_no_groups": (SearchFilters(enforce_visibility=True), {9}),
    "visibility_not_enforced": (SearchFilters(visibility_groups=("g-rare",)), set(range(GROUP))),
    "combined": (SearchFilters(tags=("rare",), source_types=("blog",)), {2}),
}


@pytest.fixture(params=["flat", "hnsw", "ivf"])
async def filter_store(request, tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.configure_index("t", request.param, ivf_nlist=2)
    docs_default, docs_persona = _filter_corpus()
    await store.ingest("t", "", docs_default)
    await store.ingest("t", "p-rare", docs_persona)
    yield store
    store.close()


@pytest.mark.parametrize("case", FILTER_CASES)
async def test_filters_return_k_matching_entries_on_both_legs(filter_store, case):
    filters, classes = FILTER_CASES[case]
    expected = {f"d{i}#0" for i in range(N_DOCS) if i % GROUP in classes}
    k = len(expected)
    hits, _ = await filter_store.keyword("t", "alpha beta", [], k, filters, hits=True)
    assert {h.entry.id for h in hits} == expected
    listing, _ = await filter_store.keyword("t", "", [], k, filters, hits=True)
    assert {h.entry.id for h in listing} == expected
    query = HashEmbedder().vector("alpha beta " * 6)
    per_query = await filter_store.dense("t", np.stack([query, -query]), k, filters, hits=True)
    assert [{h.entry.id for h in hits} for hits in per_query] == [expected, expected]
    # asking for more than exist returns exactly those that exist
    hits, _ = await filter_store.keyword("t", "alpha", [], k + 10, filters, hits=True)
    assert len(hits) == k


async def test_unfiltered_searches_are_dominated_by_non_matching_documents(filter_store):
    hits, _ = await filter_store.keyword("t", "alpha beta", [], 6, F, hits=True)
    assert all(int(h.entry.artifact_id[1:]) % GROUP > 10 for h in hits)


# -- tenant isolation ------------------------------------------------------------------------

TENANTS = ["acme", "Acme", "globex", "initech", "umbrella", "hooli", "tenant.with-dots_1"]


def _canary(tenant: str) -> str:
    return "canary" + "".join(c for c in tenant.lower() if c.isalnum()) + ("upper" if tenant != tenant.lower() else "")


async def test_tenants_never_see_each_others_data(tmp_path, embedder):
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        for t in TENANTS:
            await store.ingest(t, "", [doc("shared-id", f"Secret {_canary(t)} material of {t}."),
                                       doc(f"own-{len(t)}", "ordinary shared words")])
        assert store.list_tenants() == sorted(TENANTS)
        for t in TENANTS:
            for other in TENANTS:
                hits, _ = await store.keyword(t, _canary(other), [], 50, F, hits=True)
                [vhits] = await store.dense(t, embedder.vector(f"Secret {_canary(other)}")[None, :], 50, F, hits=True)
                listing, _ = await store.keyword(t, "", [], 50, F, hits=True)
                for h in [*hits, *vhits, *listing]:
                    assert h.entry.tenant_id == t
                    assert _canary(other) not in h.entry.text.split() or other == t
                assert bool(hits) == (other == t)
            stats = await store.stats(t)
            assert (stats.artifacts, stats.entries, stats.vectors) == (2, 2, 2)
        dirs = sorted(p.name for p in (tmp_path / "tenants").iterdir())
        assert dirs == sorted(tenant_dir_name(t) for t in TENANTS)
        assert "+acme" in dirs and "acme" in dirs
    finally:
        store.close()


async def test_a_tenant_that_was_never_written_is_not_found(store):
    await store.ingest("exists", "", [doc("a", "text")])
    with pytest.raises(NotFound, match="tenant 'ghost' has no knowledge store"):
        await store.keyword("ghost", "text", [], 5, F, hits=True)
    with pytest.raises(NotFound):
        await store.dense("ghost", np.ones((1, 384), np.float32), 5, F, hits=True)
    with pytest.raises(NotFound):
        await store.stats("ghost")
    with pytest.raises(NotFound):
        await store.delete("ghost", ["a"])
    assert store.list_tenants() == ["exists"]
    assert await store.get_profile("ghost", "", "") is None


@pytest.mark.parametrize("tenant", ["", "../etc", "a/b", "-lead", "x" * 65, "tenant id", "tëst"])
async def test_bad_tenant_ids_are_rejected(store, tenant):
    with pytest.raises(InvalidArgument) as err:
        await store.ingest(tenant, "", [doc("a", "text")])
    assert err.value.field == "tenant_id"
    with pytest.raises(InvalidArgument):
        await store.keyword(tenant, "x", [], 1, F, hits=True)
    assert store.list_tenants() == []


# -- invalid input: field named, nothing written ---------------------------------------------

def _bad_batches():
    good = [doc(f"new{i}", f"brand new zorblax document {i}") for i in range(3)]
    return {
        "empty content": (good + [doc("x", "   \n ")], "documents[3].content"),
        "oversized content": (good + [doc("x", "y" * 1_001)], "documents[3].content"),
        "html without text": (good + [doc("x", "<p> </p><script>x</script>", "text/html")], "documents[3].content"),
        "missing artifact id": (good + [doc("", "text")], "documents[3].artifact.artifact_id"),
        "hash in artifact id": (good + [doc("a#1", "text")], "documents[3].artifact.artifact_id"),
        "duplicate artifact id": (good + [doc("new0", "text")], "documents[3].artifact.artifact_id"),
        "bad content type": (good + [doc("x", "text", "application/pdf")], "documents[3].content_type"),
        "bad reputation prior": (good + [doc("x", "text", reputation_prior=1.5)], "documents[3].artifact.reputation_prior"),
        "negative time": (good + [doc("x", "text", created_unix=-1)], "documents[3].artifact.created_unix"),
        "empty tag": (good + [doc("x", "text", tags=("ok", ""))], "documents[3].artifact.tags[1]"),
        "too many documents": ([doc(f"m{i}", "text") for i in range(6)], "documents"),
        "no documents": ([], "documents"),
    }


@pytest.mark.parametrize("case", list(_bad_batches()))
async def test_invalid_documents_name_the_field_and_write_nothing(tmp_path, embedder, case):
    store = KnowledgeStore(settings_for(tmp_path, max_document_chars=1_000, max_documents_per_request=5), embedder)
    try:
        await store.ingest("t", "", [doc("existing", "existing text")])
        before = (await counts(store, "t"), await store.stats("t"))
        calls = embedder.calls
        documents, field = _bad_batches()[case]
        with pytest.raises(InvalidArgument) as err:
            await store.ingest("t", "", documents)
        assert err.value.field == field, str(err.value)
        assert (await counts(store, "t"), await store.stats("t")) == before
        assert embedder.calls == calls, "nothing is embedded before the whole request is valid"
        assert (await store.keyword("t", "zorblax", [], 10, F, hits=True))[0] == []
    finally:
        store.close()


async def test_commit_valid_writes_the_good_documents_and_reports_each_bad_one_by_index(tmp_path, embedder):
    store = KnowledgeStore(settings_for(tmp_path, max_document_chars=1_000), embedder)
    try:
        batch = [doc("good-1", "Otters hold hands while sleeping."), doc("empty", "   "),
                 doc("huge", "x " * 600), doc("good-2", "Puffins nest in burrows."),
                 doc("good-1", "a repeated id"), doc("bad#id", "text"), doc("markup", "<p> </p>", "text/html")]
        report = await store.ingest("t", "", batch, commit_valid=True)
        assert [(r.index, r.artifact_id) for r in report.results] == [(0, "good-1"), (3, "good-2")]
        assert [(r.index, r.field) for r in report.rejected] == [
            (1, "documents[1].content"), (2, "documents[2].content"), (4, "documents[4].artifact.artifact_id"),
            (5, "documents[5].artifact.artifact_id"), (6, "documents[6].content")]
        assert "is empty" in report.rejected[0].reason and "at most 1000" in report.rejected[1].reason
        hits, _ = await store.keyword("t", "otters puffins", [], 10, F, hits=True)
        assert {h.entry.artifact_id for h in hits} == {"good-1", "good-2"}
        assert (await store.stats("t")).artifacts == 2
        only_bad = await store.ingest("t", "", [doc("e", "")], commit_valid=True)
        assert only_bad.results == () and [r.index for r in only_bad.rejected] == [0]
        with pytest.raises(InvalidArgument):                    # the default stays all-or-nothing
            await store.ingest("t", "", [doc("good-3", "Seals."), doc("e", "")])
        assert (await store.stats("t")).artifacts == 2
    finally:
        store.close()


async def test_a_document_larger_than_the_old_two_million_character_limit_is_chunked(store):
    text = "\n\n".join(f"Paragraph {i} about the migratory habits of arctic terns." for i in range(40_000))
    assert len(text) > 2_000_000
    report = await store.ingest("t", "", [doc("terns", text)])
    assert report.results[0].entries_written > 100


async def test_bad_persona_id_is_rejected(store):
    with pytest.raises(InvalidArgument) as err:
        await store.ingest("t", "bad persona!", [doc("a", "text")])
    assert err.value.field == "persona_id"


class WrongDimension(HashEmbedder):
    async def embed(self, texts):
        return np.ones((len(texts), 12), np.float32) / np.sqrt(12)


class FailsSecondBatch(HashEmbedder):
    async def embed(self, texts):
        if self.calls == 1:
            raise ConnectionError("orchestrator went away")
        return await super().embed(texts)


@pytest.mark.parametrize("bad", [WrongDimension(), FailsSecondBatch()])
async def test_embedder_failures_write_nothing(tmp_path, bad):
    good = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await good.ingest("t", "", [doc("existing", "existing text")])
    good.close()
    store = KnowledgeStore(settings_for(tmp_path, embed_batch_size=2), bad)
    try:
        with pytest.raises(UpstreamFailed):
            await store.ingest("t", "", [doc(f"n{i}", f"new text {i}") for i in range(5)])
        assert await counts(store, "t") == {"records": 1, "vectors": 1, "keyword_docs": 1}
    finally:
        store.close()


async def test_vector_search_validates_dimension_top_k_and_filters(store):
    await store.ingest("t", "", [doc("a", "text")])
    with pytest.raises(InvalidArgument, match=r"query_vectors\[0\]: expected 384 dims, got 12"):
        await store.dense("t", np.ones((1, 12), np.float32), 5, F, hits=True)
    for k in (0, 1_001):
        with pytest.raises(InvalidArgument) as err:
            await store.dense("t", np.ones((1, 384), np.float32), k, F, hits=True)
        assert err.value.field == "top_k"
    with pytest.raises(InvalidArgument) as err:
        await store.keyword("t", "x", [], 5, SearchFilters(date_from_unix=10, date_to_unix=5), hits=True)
    assert err.value.field == "filters.date_to_unix"
    with pytest.raises(InvalidArgument) as err:
        await store.dense("t", np.full((1, 384), np.nan, np.float32), 5, F, hits=True)
    assert err.value.field == "query_vectors[0]"


async def test_get_entries_keeps_request_order_and_skips_unknown(store):
    await store.ingest("t", "", [doc("a", "first"), doc("b", "second")])
    hits = await store.get_entries("t", ["b#0", "zzz#0", "a#0", "b#0"])
    assert [(h.entry.id, h.rank) for h in hits] == [("b#0", 1), ("a#0", 2)]
    with pytest.raises(InvalidArgument) as err:
        await store.get_entries("t", ["a#0", "no-chunk-index"])
    assert err.value.field == "entry_ids[1]"


# -- reopen ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["flat", "hnsw"])
async def test_reopen_from_disk_gives_identical_results_and_counts(tmp_path, embedder, kind):
    rng = np.random.default_rng(0)          # varied texts: distinct scores, no ties to reorder
    vocab = "solar lunar panel wind farm grid storage battery turbine cable tariff peak load hydro".split()
    texts = [f"Report {i}: " + " ".join(rng.choice(vocab, size=8)) for i in range(60)]
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    await store.configure_index("t", kind)
    await store.ingest("t", "p", [doc(f"r{i}", t, tags=("energy",) if i % 2 else ()) for i, t in enumerate(texts)])
    await store.delete("t", ["r5"])
    queries = np.stack([embedder.vector(q) for q in ("solar panels", "lunar grid storage", "wind")])
    filters = SearchFilters(tags=("energy",))

    async def snapshot(s: KnowledgeStore):       # k covers every entry: ties cannot change the set
        vec = await s.dense("t", queries, 60, F, hits=True)
        vec_f = await s.dense("t", queries, 60, filters, hits=True)
        kw = await s.keyword("t", "solar wind", [], 10, filters, hits=True)
        st = await s.stats("t")
        return ([[(h.entry.id, round(h.score, 5)) for h in hits] for hits in vec + vec_f],
                [(h.entry.id, h.score) for h in kw[0]], await s.verify_integrity("t"),
                (st.artifacts, st.entries, st.vectors, st.keyword_docs, st.index_kind))

    before = await snapshot(store)
    store.close()
    reopened = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        assert await snapshot(reopened) == before
        assert before[3][4] == kind
    finally:
        reopened.close()


# -- index kinds through the store -----------------------------------------------------------

async def test_configure_hnsw_and_ivf_then_search(tmp_path, embedder):
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        assert await store.configure_index("t", "ivf") == ("flat", 0), "IVF waits for enough vectors"
        texts = [f"item {i} {['red', 'green', 'blue', 'cyan'][i % 4]} widget number{i}" for i in range(1_100)]
        await store.ingest("t", "", [doc(f"i{i}", t) for i, t in enumerate(texts[:1_000])])
        assert (await store.stats("t")).index_kind == "flat"
        await store.ingest("t", "", [doc(f"i{i}", t) for i, t in enumerate(texts[1_000:], start=1_000)])
        assert (await store.stats("t")).index_kind == "ivf", "trained once 1,024 vectors exist"
        queries = np.stack([embedder.vector(t) for t in texts[:50]])
        for kind in ("ivf", "hnsw", "flat"):
            if kind != "ivf":
                assert await store.configure_index("t", kind, hnsw_m=16) == (kind, 1_100)
            per_query = await store.dense("t", queries, 1, F, hits=True)
            assert sum(h[0].entry.id == f"i{i}#0" for i, h in enumerate(per_query)) >= 48, kind
            filtered = await store.dense("t", queries[:5], 5, SearchFilters(artifact_ids=("i7", "i9")), hits=True)
            assert all({h.entry.id for h in hits} == {"i7#0", "i9#0"} for hits in filtered)
        with pytest.raises(InvalidArgument) as err:
            await store.configure_index("t", "annoy")
        assert err.value.field == "index_kind"
    finally:
        store.close()


async def test_hnsw_deletes_and_upserts_stay_consistent(tmp_path, embedder):
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        await store.configure_index("t", "hnsw")
        await store.ingest("t", "", [doc(f"d{i}", f"note {i} about topic{i % 7}") for i in range(100)])
        await store.delete("t", [f"d{i}" for i in range(10)])
        assert await counts(store, "t") == {"records": 90, "vectors": 90, "keyword_docs": 90}
        [hits] = await store.dense("t", embedder.vector("note 3 about topic3")[None, :], 100, F, hits=True)
        assert len(hits) == 90 and not {h.entry.id for h in hits} & {f"d{i}#0" for i in range(10)}
        await store.delete("t", [f"d{i}" for i in range(10, 40)])     # past the tombstone threshold
        await store.ingest("t", "", [doc("d50", "replaced note")])
        assert await counts(store, "t") == {"records": 60, "vectors": 60, "keyword_docs": 60}
        [hits] = await store.dense("t", embedder.vector("replaced note")[None, :], 1, F, hits=True)
        assert hits[0].entry.id == "d50#0" and hits[0].entry.text == "replaced note"
    finally:
        store.close()


# -- stats -----------------------------------------------------------------------------------

async def test_stats_per_source(store):
    await store.ingest("t", "", [
        doc("w1", "wiki one", source_id="wiki", source_type="wiki", tags=("a",), visibility_groups=("eng",)),
        doc("w2", LONG_OLD, source_id="wiki", source_type="wiki", tags=("b",)),
        doc("m1", "mail", source_id="mail", source_type="email", visibility_groups=("hr",)),
    ])
    stats = await store.stats("t")
    assert (stats.tenant_id, stats.artifacts, stats.dimension, stats.index_kind) == ("t", 3, 384, "flat")
    assert stats.entries == stats.vectors == stats.keyword_docs > 3
    by_source = {s.source_id: s for s in stats.sources}
    assert by_source["wiki"].artifacts == 2 and by_source["wiki"].entries == stats.entries - 1
    assert by_source["wiki"].tags == ("a", "b") and by_source["wiki"].visibility_groups == ("eng",)
    assert (by_source["mail"].source_type, by_source["mail"].visibility_groups) == ("email", ("hr",))
    assert stats.last_indexed_unix == max(s.last_indexed_unix for s in stats.sources) > 0


# -- richness at ingest ----------------------------------------------------------------------

async def test_richness_ranks_a_structured_paragraph_above_ok(store):
    rich = ("## Rollout checklist\n\nBefore enabling the feature flag for every customer, confirm that:\n\n"
            "- the migration ran on all shards and the backfill finished;\n"
            "- dashboards show error rates below the agreed service level objective;\n"
            "- on-call engineers know the rollback command.\n\n"
            "| stage | traffic |\n|---|---|\n| canary | 1% |\n| full | 100% |\n")
    await store.ingest("t", "", [doc("rich", rich, "text/markdown"), doc("ok", "ok.")])
    rich_hit, ok_hit = await store.get_entries("t", ["rich#0", "ok#0"])
    assert rich_hit.entry.richness > 0.3 > 0.05 > ok_hit.entry.richness


# -- ranking profiles ------------------------------------------------------------------------

async def test_profiles_are_versioned_and_defaults_resolve(store):
    v1 = await store.put_profile(RankingProfile("t", name="default", recency_weight=0.3))
    v2 = await store.put_profile(RankingProfile("t", name="default", recency_weight=0.5))
    assert (v1.version, v2.version) == (1, 2) and v2.updated_unix > 0
    assert (await store.get_profile("t", "", "default")).recency_weight == 0.5
    assert (await store.get_profile("t", "", "default", version=1)).recency_weight == 0.3
    assert (await store.get_profile("t", "", "")).version == 2, "a profile named 'default' is the default"
    assert (await store.get_profile("t", "legal", "")).persona_id == "", "persona falls back to tenant"

    persona = await store.put_profile(RankingProfile("t", persona_id="legal", name="strict", fusion_method="rrf",
                                                     is_default=True))
    assert persona.version == 1 and persona.is_default
    got = await store.get_profile("t", "legal", "")
    assert (got.persona_id, got.name, got.fusion_method) == ("legal", "strict", "rrf")
    assert (await store.get_profile("t", "legal", "default")).persona_id == ""
    assert await store.get_profile("t", "", "missing") is None
    assert await store.get_profile("t", "", "default", version=9) is None

    listed = await store.list_profiles("t")
    assert [(p.persona_id, p.name, p.version) for p in listed] == [("", "default", 2), ("legal", "strict", 1)]
    assert [p.name for p in await store.list_profiles("t", "legal")] == ["strict"]

    newer = await store.put_profile(RankingProfile("t", name="fresh", is_default=True))
    assert (await store.get_profile("t", "", "")).name == "fresh"
    assert newer.is_default and not (await store.get_profile("t", "", "default")).is_default


@pytest.mark.parametrize("bad, field", [
    (dict(recency_weight=-0.1), "recency_weight"),
    (dict(relevancy_weight=0, recency_weight=0, richness_weight=0, reputation_weight=0), "relevancy_weight"),
    (dict(fusion_method="max"), "fusion_method"),
    (dict(recency_mode="sometimes"), "recency_mode"),
    (dict(dense_weight=1.5), "dense_weight"),
    (dict(recency_half_life_days=0), "recency_half_life_days"),
    (dict(name=""), "name"),
    (dict(tenant_id="../x"), "tenant_id"),
])
async def test_invalid_profiles_are_rejected(store, bad, field):
    with pytest.raises(InvalidArgument) as err:
        await store.put_profile(RankingProfile(**{"tenant_id": "t", **bad}))
    assert err.value.field == field
    assert await store.list_profiles("t") == []


# -- feedback --------------------------------------------------------------------------------

async def test_feedback_is_counted_on_the_artifact_and_persisted(tmp_path, embedder):
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    await store.ingest("t", "", [doc("a", LONG_OLD, reputation_prior=0.7), doc("b", "other")])
    assert await store.record_feedback("t", "entry", "a#1", True, "u1") == \
        type(await store.record_feedback("t", "artifact", "b", True, "u1"))("a", 1, 0, 0.7)
    await store.record_feedback("t", "artifact", "a", False, "u2")
    await store.record_feedback("t", "entry", "a#0", False, "u3")
    ack = await store.record_feedback("t", "entry", "a#0", False, "u4")
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 3)
    ack = await store.record_feedback("t", "artifact", "a", True, "u2")     # u2 changes their mind
    assert (ack.feedback_helpful, ack.feedback_unhelpful) == (2, 2)
    hits, _ = await store.keyword("t", "quasarword", [], 1, F, hits=True)
    assert (hits[0].artifact.feedback_helpful, hits[0].artifact.feedback_unhelpful) == (2, 2)
    await store.ingest("t", "", [doc("a", "rewritten text")])                 # upsert keeps the votes
    store.close()
    reopened = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        [hit] = await reopened.get_entries("t", ["a#0"])
        assert (hit.artifact.feedback_helpful, hit.artifact.feedback_unhelpful) == (2, 2)
        with pytest.raises(NotFound):
            await reopened.record_feedback("t", "entry", "a#7", True, "u1")
        with pytest.raises(InvalidArgument) as err:
            await reopened.record_feedback("t", "chunk", "a#0", True, "u1")
        assert err.value.field == "target"
    finally:
        reopened.close()
    db = sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite")
    assert db.execute("SELECT count(*), sum(counted) FROM feedback").fetchone() == (6, 5)   # u2 counted once
    db.close()


# -- concurrency -----------------------------------------------------------------------------

async def test_concurrent_ingests_and_searches_stay_consistent(store, embedder):
    await store.ingest("t", "", [doc("seed", "seed text")])

    async def writer(w: int):
        for i in range(5):
            await store.ingest("t", "", [doc(f"w{w}-{i}-{j}", f"writer {w} batch {i} doc {j} mango") for j in range(4)])
            await store.ingest("u", "", [doc(f"w{w}-{i}", f"other tenant {w} {i}")])

    async def reader():
        for _ in range(20):
            hits, _ = await store.keyword("t", "mango", [], 50, F, hits=True)
            assert all(h.entry.tenant_id == "t" for h in hits)
            [vhits] = await store.dense("t", embedder.vector("mango batch")[None, :], 20, F, hits=True)
            assert len(vhits) == min(20, len({h.entry.id for h in vhits}))

    await asyncio.gather(*(writer(w) for w in range(4)), *(reader() for _ in range(4)))
    assert await counts(store, "t") == {"records": 81, "vectors": 81, "keyword_docs": 81}
    assert await counts(store, "u") == {"records": 20, "vectors": 20, "keyword_docs": 20}
