"""Score completion: the vector call gives every candidate of both legs its exact cosine and its
BM25, as naive loops over the stored vectors and the stored keyword rows compute them; rows
that are gone or filtered out are "not computable"; quoted phrases count as terms."""
from __future__ import annotations

import math
import random
import sqlite3

import numpy as np
import pytest

from shared.analysis import query_terms
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.embedded.keyword_index import KeywordIndex
from services.knowledge_store.embedded.storage.db import tenant_dir_name
from shared.errors import InvalidArgument
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for
from tests.unit.knowledge_store.embedded.test_keyword_search import naive_bm25, random_docs

TENANT = "t"
VOCAB = [f"w{i}" for i in range(40)] + ["rare", "zeta", "kappa"]


def stored(tmp_path) -> tuple[dict[int, np.ndarray], dict[int, tuple[list[str], list[str]]]]:
    """Every stored vector and analysed keyword row of the tenant, read straight from SQLite."""
    conn = sqlite3.connect(tmp_path / "tenants" / tenant_dir_name(TENANT) / "store.sqlite")
    try:
        vectors = {rid: np.frombuffer(blob, np.float32) for rid, blob in conn.execute(
            "SELECT rid, vector FROM entry_vectors")}
        rows = {rid: (title.split(), body.split()) for rid, title, body in conn.execute(
            "SELECT rowid, title, body FROM entries_fts")}
    finally:
        conn.close()
    return vectors, rows


@pytest.fixture
async def corpus_store(tmp_path, embedder):
    rng = random.Random(7)
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    docs = random_docs(rng, 60, VOCAB)
    await store.ingest(TENANT, "", [
        doc(f"d{i}", " ".join(body), title=" ".join(title), source_type="odd" if i % 2 else "even")
        for i, (title, body) in enumerate(docs)])
    yield store
    store.close()


@pytest.mark.parametrize("seed", range(6))
async def test_completion_matches_naive_loops_over_the_stored_vectors_and_keyword_rows(
        corpus_store, tmp_path, embedder, seed):
    rng = random.Random(seed)
    phrases = [" ".join(rng.sample(VOCAB, 3)), " ".join(rng.sample(VOCAB, 2))]
    vectors = np.stack([embedder.vector(p) for p in phrases])
    keyword, terms = await corpus_store.keyword(TENANT, phrases[0], phrases[1:], 5, SearchFilters())
    dense, completion = await corpus_store.complete(
        TENANT, vectors, 5, SearchFilters(), keywords=phrases[0], extra_keywords=phrases[1:],
        complete_rows=keyword.row_ids)

    union = set(keyword.row_ids.tolist()) | {r for c in dense for r in c.row_ids.tolist()}
    assert set(completion.row_ids.tolist()) == union
    assert len(union) > len(keyword)                        # the legs disagree: completion has work to do
    all_vectors, rows = stored(tmp_path)
    ids = sorted(rows)
    expected_bm25 = dict(zip(ids, naive_bm25([rows[r] for r in ids], terms, (1.0, 1.0))))
    for rid, cos, bm25 in zip(completion.row_ids.tolist(), completion.dense.tolist(), completion.bm25.tolist()):
        best = max(float(np.dot(q.astype(np.float64), all_vectors[rid].astype(np.float64))) for q in vectors)
        assert cos == pytest.approx(best, abs=1e-5)
        assert bm25 == pytest.approx(expected_bm25[rid], rel=1e-5, abs=1e-6)
    # the legs' own scores are what completion recomputes
    leg_bm25 = dict(zip(keyword.row_ids.tolist(), keyword.scores.tolist()))
    done = dict(zip(completion.row_ids.tolist(), completion.bm25.tolist()))
    assert all(done[r] == pytest.approx(s, rel=1e-6) for r, s in leg_bm25.items())
    stats = completion.keyword_stats
    assert stats.terms == tuple(terms) and stats.entries == len(rows)
    assert stats.document_frequency == tuple(sum(1 for t, b in rows.values() if term in t or term in b)
                                             for term in terms)


async def test_rows_gone_or_filtered_out_are_not_computable(corpus_store, embedder):
    vector = embedder.vector("w1 w2 w3")[None, :]
    keyword, _ = await corpus_store.keyword(TENANT, "w1 w2 w3", [], 10, SearchFilters())
    rows = dict(zip(keyword.artifact_ids, keyword.row_ids.tolist()))
    gone = next(iter(rows))
    await corpus_store.delete(TENANT, [gone])
    _, completion = await corpus_store.complete(
        TENANT, vector, 3, SearchFilters(source_types=("even",)), keywords="w1 w2 w3",
        complete_rows=keyword.row_ids)
    got = dict(zip(completion.row_ids.tolist(), zip(completion.dense.tolist(), completion.bm25.tolist())))
    for artifact, rid in rows.items():
        dense, bm25 = got[rid]
        computable = artifact != gone and int(artifact[1:]) % 2 == 0
        assert (not math.isnan(dense) and not math.isnan(bm25)) == computable, artifact


async def test_no_keyword_phrases_leave_bm25_absent_and_too_many_rows_are_refused(corpus_store, embedder):
    vector = embedder.vector("w1")[None, :]
    dense, completion = await corpus_store.complete(
        TENANT, vector, 4, SearchFilters(), keywords="")
    assert len(completion) == len(dense[0]) and np.isnan(completion.bm25).all()
    assert not np.isnan(completion.dense).any()
    with pytest.raises(InvalidArgument, match="complete_row_ids"):
        await corpus_store.complete(
            TENANT, vector, 4, SearchFilters(), keywords="w1", complete_rows=np.arange(1001))


async def test_a_quoted_phrase_ranks_the_entry_holding_it_exactly_first(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest(TENANT, "", [
        doc("loose", "The peer was reset after the connection dropped; reset the connection to the peer again."),
        doc("exact", "Error 104: connection reset by peer while streaming the log."),
        doc("other", "Connection pooling keeps a peer list and resets it nightly."),
    ])
    plain, _ = await store.keyword(TENANT, "connection reset by peer", [], 3, SearchFilters())
    quoted, _ = await store.keyword(TENANT, '"connection reset by peer"', [], 3, SearchFilters())
    assert plain.artifact_ids[0] == "loose"                 # more matches of the words, shorter...
    assert quoted.artifact_ids[0] == "exact"                # ...but only one holds the phrase
    assert quoted.scores[0] > plain.scores[list(plain.artifact_ids).index("exact")]
    _, completion = await store.complete(
        TENANT, HashEmbedder().vector("x")[None, :], 3, SearchFilters(), keywords='"connection reset by peer"',
        complete_rows=quoted.row_ids)
    by_row = dict(zip(completion.row_ids.tolist(), completion.bm25.tolist()))
    assert [by_row[r] for r in quoted.row_ids.tolist()] == pytest.approx(quoted.scores.tolist(), rel=1e-6)
    store.close()


@pytest.mark.parametrize("seed", range(5))
def test_score_rows_equals_search_scores_and_is_nan_for_unknown_or_deleted_rows(seed):
    rng = random.Random(seed)
    docs = random_docs(rng, 80, VOCAB)
    rids = list(range(3, 3 + 2 * len(docs), 2))
    index = KeywordIndex.build(((r, " ".join(t), " ".join(b)) for r, (t, b) in zip(rids, docs)), (1.0, 1.0))
    index.remove(rids[:5])
    terms = query_terms([" ".join(rng.sample(VOCAB, 4))])
    phrase = [np.asarray(rng.sample(rids, 3), np.int64)]
    found = dict(index.search(terms, 1000, phrase_rids=phrase))
    asked = np.asarray(rids + [0, 10_000], np.int64)
    scores = index.score_rows(terms, asked, phrase)
    for rid, score in zip(asked.tolist(), scores.tolist()):
        if rid in rids[:5] or rid not in rids:
            assert math.isnan(score)
        else:
            assert score == pytest.approx(found.get(rid, 0.0), rel=1e-6, abs=1e-7)
    assert index.document_frequencies(terms + ["never-seen"])[-1] == 0


@pytest.mark.parametrize("seed", range(3))
def test_score_rows_after_a_search_of_the_same_terms_reads_its_scores_and_a_write_forgets_them(seed):
    rng = random.Random(seed)
    docs = random_docs(rng, 80, VOCAB)
    rids = list(range(1, 1 + len(docs)))
    index = KeywordIndex.build(((r, " ".join(t), " ".join(b)) for r, (t, b) in zip(rids, docs)), (1.0, 1.0))
    terms = query_terms([" ".join(rng.sample(VOCAB, 4))])
    asked = np.asarray(rids + [0], np.int64)
    fresh = index.score_rows(terms, asked)                  # no search yet: scored term by term
    index.search(terms, 10, allowed=np.asarray(rids[::2], np.int64))   # keeps its whole, unmasked column
    assert len(index._memo) == 1
    np.testing.assert_array_equal(index.score_rows(terms, asked), fresh)   # the same sums, bit for bit
    index.remove(rids[:3])                                  # a write: the kept column is forgotten
    assert not index._memo
    after = index.score_rows(terms, asked)
    assert np.isnan(after[:3]).all() and not np.array_equal(after[3:-1], fresh[3:-1])
