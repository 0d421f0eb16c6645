"""The keyword leg: in-memory BM25 checked against a naive implementation, query terms, listing."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.keyword_index import KeywordBatch, KeywordIndex
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

K1, B = 1.2, 0.75        # Okapi BM25 constants (keyword_index.py)


def naive_bm25(docs: list[tuple[list[str], list[str]]], query: list[str], weights: tuple[float, float]) -> list[float]:
    """Okapi BM25 written out: weighted term frequency over the two columns, document
    length = tokens of both columns, idf = ln(1 + (N - n + .5) / (n + .5)) (Lucene / bm25s)."""
    n_docs = len(docs)
    avgdl = sum(len(t) + len(b) for t, b in docs) / n_docs
    scores = []
    for title, body in docs:
        dl = len(title) + len(body)
        score = 0.0
        for term in query:
            hits = sum(1 for t, b in docs if term in t or term in b)
            if not hits:
                continue
            idf = math.log(1 + (n_docs - hits + 0.5) / (hits + 0.5))
            tf = weights[0] * title.count(term) + weights[1] * body.count(term)
            score += idf * (tf * (K1 + 1)) / (tf + K1 * (1 - B + B * dl / avgdl))
        scores.append(score)
    return scores


def random_docs(rng: random.Random, n: int, vocab: list[str]) -> list[tuple[list[str], list[str]]]:
    return [([rng.choice(vocab) for _ in range(rng.randint(1, 4))],
             [rng.choice(vocab) for _ in range(rng.randint(3, 40))]) for _ in range(n)]


async def assert_matches_naive(store: KnowledgeStore, live: dict[str, tuple[list[str], list[str]]],
                               rng: random.Random, vocab: list[str], weights: tuple[float, float],
                               queries: int = 8) -> None:
    """Every query's hits = the live docs holding a query term, scored as the naive loop."""
    ids = sorted(live)
    docs = [live[i] for i in ids]
    for _ in range(queries):
        query = list(dict.fromkeys(rng.choice(vocab) for _ in range(rng.randint(1, 4))))
        hits, terms = await store.keyword("t", " ".join(query), [], 100, SearchFilters(), hits=True)
        assert terms == query
        expected = naive_bm25(docs, query, weights)
        matching = {ids[i]: s for i, s in enumerate(expected)
                    if any(q in docs[i][0] or q in docs[i][1] for q in query)}
        assert {h.entry.artifact_id for h in hits} == set(matching)
        for h in hits:
            assert h.score == pytest.approx(matching[h.entry.artifact_id], rel=1e-9, abs=1e-12)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))


@pytest.mark.parametrize("seed", range(4))
async def test_bm25_scores_match_a_naive_implementation(tmp_path, seed):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(25)]          # analyse("w7") == ["w7"]: terms are the words
    docs = random_docs(rng, 40, vocab)
    weights = (2.5, 1.0)
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder(), bm25_weights=weights)
    try:
        await store.ingest("t", "", [doc(f"d{i}", " ".join(body), title=" ".join(title))
                                     for i, (title, body) in enumerate(docs)])
        await assert_matches_naive(store, {f"d{i}": d for i, d in enumerate(docs)}, rng, vocab, weights)
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(3))
async def test_scores_stay_exact_after_upserts_deletes_and_reopen(tmp_path, seed):
    rng = random.Random(100 + seed)
    vocab = [f"w{i}" for i in range(20)]
    weights = (1.0, 1.0)
    live: dict[str, tuple[list[str], list[str]]] = {}

    def as_doc(aid: str, d: tuple[list[str], list[str]]):
        return doc(aid, " ".join(d[1]), title=" ".join(d[0]))

    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder(), bm25_weights=weights)
    try:
        first = {f"d{i}": d for i, d in enumerate(random_docs(rng, 30, vocab))}
        await store.ingest("t", "", [as_doc(a, d) for a, d in first.items()])
        live.update(first)
        for step in range(6):
            # upsert some existing artifacts, add new ones, delete a few (compaction kicks in)
            changed = {a: random_docs(rng, 1, vocab)[0] for a in rng.sample(sorted(live), 4)}
            changed.update({f"n{step}_{j}": d for j, d in enumerate(random_docs(rng, 3, vocab))})
            await store.ingest("t", "", [as_doc(a, d) for a, d in changed.items()])
            live.update(changed)
            gone = rng.sample(sorted(live), 5)
            await store.delete("t", gone)
            for a in gone:
                del live[a]
            await assert_matches_naive(store, live, rng, vocab, weights, queries=4)
            integrity = await store.verify_integrity("t")
            assert integrity["records"] == integrity["vectors"] == integrity["keyword_docs"]
    finally:
        store.close()
    reopened = KnowledgeStore(settings_for(tmp_path), HashEmbedder(), bm25_weights=weights)
    try:
        await assert_matches_naive(reopened, live, rng, vocab, weights)
    finally:
        reopened.close()


def test_compaction_and_incremental_updates_equal_a_fresh_build():
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(30)]
    weights = (2.0, 1.0)
    rows = [(rid, " ".join(t), " ".join(b)) for rid, (t, b) in enumerate(random_docs(rng, 200, vocab), start=1)]
    index = KeywordIndex(weights)
    for start in range(0, len(rows), 37):                  # appended in batches
        part = rows[start:start + 37]
        index.add([r[0] for r in part], KeywordBatch.from_docs([(r[1], r[2]) for r in part], weights))
    dead = set(rng.sample(range(1, 201), 70))
    index.remove(np.asarray(sorted(dead), np.int64))
    assert index.needs_compaction and index.ntotal == 130
    fresh = KeywordIndex.build([r for r in rows if r[0] not in dead], weights)
    compacted = index.compacted()
    assert not compacted.needs_compaction
    allowed = np.asarray(sorted(rng.sample(range(1, 201), 90)), np.int64)
    for _ in range(20):
        query = [rng.choice(vocab) for _ in range(rng.randint(1, 5))]
        for k, flt in ((10, None), (500, None), (7, allowed)):
            want = fresh.search(query, k, flt)
            assert want and all(rid not in dead for rid, _ in want)
            for got in (index.search(query, k, flt), compacted.search(query, k, flt)):
                assert [r for r, _ in got] == [r for r, _ in want]
                assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12)


def test_equal_scores_rank_lower_rid_first_even_at_the_cut():
    index = KeywordIndex.build([(rid, "", "alpha beta") for rid in (5, 9, 12, 40, 41)], (1.0, 1.0))
    assert [r for r, _ in index.search(["alpha"], 3)] == [5, 9, 12]
    assert [r for r, _ in index.search(["alpha"], 3, np.asarray([41, 12, 40], np.int64))] == [12, 40, 41]
    assert index.search(["gamma"], 3) == []


async def test_filtered_keyword_search_still_fills_k(store):
    # the best-scoring entries are all outside the filter: the filter must apply inside the search
    await store.ingest("t", "", [doc(f"hot{i}", "needle " * 5 + f"filler{i}", tags=("other",)) for i in range(30)])
    await store.ingest("t", "", [doc(f"cold{i}", f"needle haystack straw{i} " + "hay " * i, tags=("wanted",))
                                 for i in range(8)])
    hits, _ = await store.keyword("t", "needle", [], 5, SearchFilters(tags=("wanted",)), hits=True)
    assert [h.entry.artifact_id for h in hits] == ["cold0", "cold1", "cold2", "cold3", "cold4"]
    assert all(h.score > 0 for h in hits)
    hits, _ = await store.keyword("t", "needle", [], 50, SearchFilters(tags=("wanted",)), hits=True)
    assert len(hits) == 8
    hits, _ = await store.keyword("t", "needle", [], 5, SearchFilters(tags=("nobody",)), hits=True)
    assert hits == []


async def test_tiny_tenant_ranks_a_term_every_entry_holds_by_tf(store):
    # FTS5 floored the idf of a term in more than half the entries at 1e-6: everything tied at ~0
    await store.ingest("t", "", [doc("one", "solar panel roof install"),
                                 doc("three", "solar solar solar panel roof"),
                                 doc("two", "solar solar panel roof install")])
    hits, _ = await store.keyword("t", "solar", [], 10, SearchFilters(), hits=True)
    assert [h.entry.artifact_id for h in hits] == ["three", "two", "one"]
    assert hits[-1].score > 0.1
    assert hits[0].score > hits[1].score > hits[2].score


async def test_query_terms_are_analysed_and_extra_keywords_are_or_ed(store):
    await store.ingest("t", "", [doc("cats", "Cats are sleeping on the sofa."),
                                 doc("dogs", "Dogs were running in the park."),
                                 doc("birds", "Birds sing at dawn.")])
    hits, terms = await store.keyword("t", "The sleeping cats", ["running dog"], 10, SearchFilters(), hits=True)
    assert terms == ["sleep", "cat", "run", "dog"]
    assert {h.entry.artifact_id for h in hits} == {"cats", "dogs"}


async def test_stopword_only_keywords_find_nothing(store):
    await store.ingest("t", "", [doc("a", "The cat and the hat.")])
    assert await store.keyword("t", "the and of", [], 10, SearchFilters(), hits=True) == ([], [])


async def test_empty_keywords_list_entries_newest_first_with_score_zero(store):
    await store.ingest("t", "", [doc("old", "old news", modified_unix=1_000),
                                 doc("new", "new news", modified_unix=3_000),
                                 doc("mid", "mid news", created_unix=2_000),
                                 doc("undated", "no date")])
    hits, terms = await store.keyword("t", "", [], 10, SearchFilters(), hits=True)
    assert terms == []
    assert [h.entry.artifact_id for h in hits] == ["new", "mid", "old", "undated"]
    assert all(h.score == 0.0 for h in hits)
    hits, _ = await store.keyword("t", "  ", [], 2, SearchFilters(), hits=True)
    assert [h.entry.artifact_id for h in hits] == ["new", "mid"]


async def test_title_and_heading_are_searchable(store):
    await store.ingest("t", "", [doc("guide", "# Installation\n\nRun the script.", "text/markdown", title="Zebra manual")])
    for q in ("zebra", "installation", "script"):
        hits, _ = await store.keyword("t", q, [], 5, SearchFilters(), hits=True)
        assert [h.entry.id for h in hits] == ["guide#0"], q
    assert hits[0].entry.headline == "Installation"
