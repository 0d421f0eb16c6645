"""The keyword leg: FTS5 BM25 checked against a naive implementation, query terms, listing."""
from __future__ import annotations

import math
import random

import pytest

from services.knowledge_store.core import KnowledgeStore
from services.knowledge_store.models import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

K1, B = 1.2, 0.75        # FTS5's bm25() constants


def naive_bm25(docs: list[tuple[list[str], list[str]]], query: list[str], weights: tuple[float, float]) -> list[float]:
    """FTS5's bm25() written out: weighted term frequency over the two columns, document
    length = tokens of both columns, idf = ln((N - n + .5) / (n + .5)) floored at 1e-6."""
    n_docs = len(docs)
    avgdl = sum(len(t) + len(b) for t, b in docs) / n_docs
    scores = []
    for title, body in docs:
        dl = len(title) + len(body)
        score = 0.0
        for term in query:
            hits = sum(1 for t, b in docs if term in t or term in b)
            idf = math.log((n_docs - hits + 0.5) / (hits + 0.5))
            idf = idf if idf > 0 else 1e-6
            tf = weights[0] * title.count(term) + weights[1] * body.count(term)
            score += idf * (tf * (K1 + 1)) / (tf + K1 * (1 - B + B * dl / avgdl))
        scores.append(score)
    return scores


@pytest.mark.parametrize("seed", range(4))
async def test_bm25_scores_match_a_naive_implementation(tmp_path, seed):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(25)]          # analyse("w7") == ["w7"]: terms are the words
    docs = [([rng.choice(vocab) for _ in range(rng.randint(1, 4))],
             [rng.choice(vocab) for _ in range(rng.randint(3, 40))]) for _ in range(40)]
    weights = (2.5, 1.0)
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder(), bm25_weights=weights)
    try:
        await store.ingest("t", "", [doc(f"d{i}", " ".join(body), title=" ".join(title))
                                     for i, (title, body) in enumerate(docs)])
        for _ in range(8):
            query = list(dict.fromkeys(rng.choice(vocab) for _ in range(rng.randint(1, 4))))
            hits, terms = await store.search_by_filters("t", " ".join(query), [], 40, SearchFilters())
            assert terms == query
            expected = naive_bm25(docs, query, weights)
            matching = {f"d{i}": s for i, s in enumerate(expected)
                        if any(q in docs[i][0] or q in docs[i][1] for q in query)}
            assert {h.entry.artifact_id for h in hits} == set(matching)
            for h in hits:
                assert h.score == pytest.approx(matching[h.entry.artifact_id], rel=1e-9, abs=1e-12)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    finally:
        store.close()


async def test_query_terms_are_analysed_and_extra_keywords_are_or_ed(store):
    await store.ingest("t", "", [doc("cats", "Cats are sleeping on the sofa."),
                                 doc("dogs", "Dogs were running in the park."),
                                 doc("birds", "Birds sing at dawn.")])
    hits, terms = await store.search_by_filters("t", "The sleeping cats", ["running dog"], 10, SearchFilters())
    assert terms == ["sleep", "cat", "run", "dog"]
    assert {h.entry.artifact_id for h in hits} == {"cats", "dogs"}


async def test_stopword_only_keywords_find_nothing(store):
    await store.ingest("t", "", [doc("a", "The cat and the hat.")])
    assert await store.search_by_filters("t", "the and of", [], 10, SearchFilters()) == ([], [])


async def test_empty_keywords_list_entries_newest_first_with_score_zero(store):
    await store.ingest("t", "", [doc("old", "old news", modified_unix=1_000),
                                 doc("new", "new news", modified_unix=3_000),
                                 doc("mid", "mid news", created_unix=2_000),
                                 doc("undated", "no date")])
    hits, terms = await store.search_by_filters("t", "", [], 10, SearchFilters())
    assert terms == []
    assert [h.entry.artifact_id for h in hits] == ["new", "mid", "old", "undated"]
    assert all(h.score == 0.0 for h in hits)
    hits, _ = await store.search_by_filters("t", "  ", [], 2, SearchFilters())
    assert [h.entry.artifact_id for h in hits] == ["new", "mid"]


async def test_title_and_heading_are_searchable(store):
    await store.ingest("t", "", [doc("guide", "# Installation\n\nRun the script.", "text/markdown", title="Zebra manual")])
    for q in ("zebra", "installation", "script"):
        hits, _ = await store.search_by_filters("t", q, [], 5, SearchFilters())
        assert [h.entry.id for h in hits] == ["guide#0"], q
    assert hits[0].entry.headline == "Installation"
