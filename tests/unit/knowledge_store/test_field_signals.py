"""GetFieldSignals' contract on every backend (the contract tests' backends, test_backend_contract.py):
the signals of ingested entries equal a naive per-entry computation from the raw texts analysed
(tf, lengths, positions, idf, averages; the title cosine is the embedder's title vector · the
query vector); unknown ids are not-found rows, a deleted artifact is gone with its title vector;
bad requests are refused naming the field; artifacts stored before titles were embedded (an
old-schema embedded tenant, qdrant points without title statistics) get their title vectors
from the backfill and their title statistics recounted.
"""
from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest

from ranking.features import MAX_POSITIONS
from services.knowledge_store.backend import StoreBackend, open_store
from services.knowledge_store.chunking import context_line
from services.knowledge_store.field_signals import MAX_ENTRIES, build, field_signals
from services.knowledge_store.title_vectors import backfill_tenant, run_backfill
from shared.analysis import analyse, query_terms
from shared.errors import InvalidArgument
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for
from tests.unit.knowledge_store.test_backend_contract import BACKENDS, store  # noqa: F401  (the fixture)

LONG = " ".join(f"Paragraph {i} explains how volcanic ash grounds aircraft and melts in jet engines."
                for i in range(90))
DOCS = [
    doc("volcano", "Volcanic eruptions release sulfur dioxide; volcanic ash clouds ground aircraft.",
        title="Volcanic ash"),
    doc("bread", "Sourdough bread rises because wild yeast ferments the dough.", title="Bread"),
    doc("untitled", "Ash and yeast, a note without a title: ash again."),
    doc("long", LONG, title="Aviation and volcanic ash clouds"),
]
QUERY = "volcanic ash clouds, yeast"


def _naive(title: str, text: str, terms: list[str]) -> tuple[list[int], list[int], int, int, list[int], list[int]]:
    """(title tf, body tf, title length, body length, title positions, body positions) from raw text."""
    t_terms, b_terms = analyse(context_line(title, ())), analyse(text)
    index = {t: i for i, t in enumerate(terms)}
    return ([t_terms.count(t) for t in terms], [b_terms.count(t) for t in terms], len(t_terms), len(b_terms),
            [index.get(w, -1) for w in t_terms], [index.get(w, -1) for w in b_terms])


def _row(matrix: np.ndarray, i: int, length: int) -> list[int]:
    """Row i of a positions matrix as the field's first `length` positions (−1 past its width)."""
    got = matrix[i].tolist()[:length]
    return got + [-1] * (length - len(got))


async def test_field_signals_equal_a_naive_computation_from_the_raw_texts(store):
    tenant, embedder = "fields", HashEmbedder()
    await store.ingest(tenant, "", DOCS)
    chunks = await store.get_entries(tenant, [f"long#{i}" for i in range(40)])
    assert len(chunks) > 2                                       # the long document is several chunks
    hits = await store.get_entries(tenant, ["volcano#0", "bread#0", "untitled#0"]) + chunks
    ids = [h.entry.id for h in hits]
    q = embedder.vector("volcanic ash over europe")
    got = await field_signals(store, tenant, [*ids, "nope#0", "volcano#0"], QUERY, q)
    terms = query_terms([QUERY])
    assert got.query_terms == tuple(terms) == ("volcan", "ash", "cloud", "yeast")
    assert got.found.tolist() == [True] * len(ids) + [False, True]
    # idf and averages over every live entry, from the raw texts
    every = await store.get_entries(tenant, [f"{d.artifact.artifact_id}#{i}" for d in DOCS for i in range(40)])
    docs = [(analyse(context_line(h.artifact.title, ())), analyse(h.entry.text)) for h in every]
    n = len(docs)
    df = np.asarray([sum(t in a or t in b for a, b in docs) for t in terms], np.float64)
    assert got.idf.tolist() == pytest.approx(np.log1p((n - df + 0.5) / (df + 0.5)).tolist(), rel=1e-6)
    title_avg = sum(len(a) for a, _ in docs) / n
    body_avg = sum(len(b) for _, b in docs) / n
    assert got.avg_length == pytest.approx((title_avg, body_avg, title_avg + body_avg), rel=1e-6)
    for i, h in enumerate(hits):
        t_tf, b_tf, t_len, b_len, t_pos, b_pos = _naive(h.artifact.title, h.entry.text, list(terms))
        assert got.title_tf[i].tolist() == t_tf and got.body_tf[i].tolist() == b_tf, h.entry.id
        assert (got.title_length[i], got.body_length[i]) == (t_len, b_len)
        assert _row(got.title_positions, i, min(t_len, MAX_POSITIONS)) == t_pos[:MAX_POSITIONS]
        assert _row(got.body_positions, i, min(b_len, MAX_POSITIONS)) == b_pos[:MAX_POSITIONS]
        assert got.chunk_position[i] == h.entry.chunk_index
        if h.artifact.title:
            expected = float(embedder.vector(h.artifact.title) @ (q / np.linalg.norm(q)))
            assert got.dense_title[i] == pytest.approx(expected, abs=1e-5)
        else:
            assert np.isnan(got.dense_title[i])                  # an empty title has no title vector
    last = max((np.flatnonzero(got.body_positions[i] >= 0).max() for i in range(len(ids))
                if (got.body_positions[i] >= 0).any()), default=-1)
    assert got.body_positions.shape[1] == last + 1 <= MAX_POSITIONS      # trimmed to the last hit
    assert sorted({h.entry.chunk_index for h in chunks}) == list(range(len(chunks)))
    unknown = len(ids)
    assert np.isnan(got.title_tf[unknown]).all() and np.isnan(got.body_length[unknown])
    assert np.isnan(got.dense_title[unknown]) and np.isnan(got.chunk_position[unknown])
    assert (got.title_positions[unknown] == -1).all() and (got.body_positions[unknown] == -1).all()
    assert got.body_tf[-1].tolist() == got.body_tf[0].tolist()          # a repeated id: the same row


async def test_a_deleted_artifact_is_gone_with_its_title_vector_and_a_replaced_one_renewed(store):
    tenant, embedder = "fields-delete", HashEmbedder()
    await store.ingest(tenant, "", DOCS[:2])
    q = embedder.vector("volcanic ash")
    before = await field_signals(store, tenant, ["volcano#0", "bread#0"], "ash", q)
    assert before.found.tolist() == [True, True] and not np.isnan(before.dense_title).any()
    await store.delete(tenant, ["volcano"])
    after = await field_signals(store, tenant, ["volcano#0", "bread#0"], "ash", q)
    assert after.found.tolist() == [False, True] and await store.title_vectors(tenant, ["volcano"]) == {}
    assert after.idf[0] > before.idf[0]                                  # df and N count live entries only
    assert after.avg_length[0] == pytest.approx(len(analyse("Bread")))
    await store.ingest(tenant, "", [doc("bread", "Rye bread.", title="Glacier ash")])      # replaced: a new title
    renewed = await store.title_vectors(tenant, ["bread"])
    assert float(renewed["bread"] @ embedder.vector("Glacier ash")) == pytest.approx(1.0, abs=1e-5)
    await store.ingest(tenant, "", [doc("bread", "Rye bread.")])                           # … and no title
    assert await store.title_vectors(tenant, ["bread"]) == {}


async def test_bad_requests_are_refused_naming_the_field(store):
    tenant = "fields-bad"
    await store.ingest(tenant, "", DOCS[:1])
    q = HashEmbedder().vector("ash")
    cases = [(["volcano#0"] * (MAX_ENTRIES + 1), "ash", q, "entry_ids"),
             ("volcano#0", "ash", q, "entry_ids"),
             (["not an id"], "ash", q, "entry_ids[0]"),
             (["volcano#0"], "ash", q[:10], "query_vector"),
             (["volcano#0"], "ash", np.full(384, np.nan), "query_vector"),
             (["volcano#0"], "ash", np.zeros(384), "query_vector"),
             (["volcano#0"], 42, q, "query")]
    for ids, query, vector, field in cases:
        with pytest.raises(InvalidArgument) as err:
            await field_signals(store, tenant, ids, query, vector)
        assert err.value.field == field, (field, str(err.value))
    ok = await field_signals(store, tenant, ["volcano#0"] * MAX_ENTRIES, "ash", q)      # the limit itself is served
    assert ok.found.all() and ok.found.shape == (MAX_ENTRIES,)


async def _forget_title_data(store: StoreBackend, tenant: str) -> None:
    """Make the tenant look as if stored before titles were embedded and counted."""
    if hasattr(store, "_names"):                                 # qdrant: records, points, tenant statistics
        from services.knowledge_store.qdrant import layout
        await store._call("delete_payload", collection_name=store._names.artifacts, keys=["title_vector"],
                          points=await store._all(tenant), wait=True)
        await store._call("delete_payload", **store._chunk_args(tenant), keys=["tl"],
                          points=await store._all(tenant), wait=True)
        n, total = await store._tenant_stats(tenant)
        await store._put_tenant(tenant, n, total, None)
        assert (await store._tenant_totals(tenant))[2] is None and layout
    else:
        tenant_obj = await store._tenants.get(tenant)
        conn = tenant_obj.db.writer
        conn.execute("DELETE FROM title_vectors")
        tenant_obj.allowed.clear()          # as a committed write does: the in-memory title vectors are stale


async def test_artifacts_stored_before_titles_were_embedded_get_them_from_the_backfill(store):
    tenant, embedder = "fields-backfill", HashEmbedder()
    await store.ingest(tenant, "", DOCS)
    q = embedder.vector("volcanic ash")
    ids = ["volcano#0", "bread#0", "untitled#0"]
    fresh = await field_signals(store, tenant, ids, QUERY, q)
    await _forget_title_data(store, tenant)
    old = await field_signals(store, tenant, ids, QUERY, q)
    assert np.isnan(old.dense_title).all()                       # until the backfill: NaN
    assert old.avg_length == pytest.approx(fresh.avg_length)      # title statistics recounted (qdrant)
    assert sorted(a for a, _ in await store.lacking_title_vectors(tenant, 10)) == ["bread", "long", "volcano"]
    assert await backfill_tenant(store, HashEmbedder(), settings_for("."), tenant, batch=2, pause_s=0) == 3
    assert await store.lacking_title_vectors(tenant, 10) == []
    assert await backfill_tenant(store, HashEmbedder(), settings_for("."), tenant) == 0     # idempotent
    back = await field_signals(store, tenant, ids, QUERY, q)
    np.testing.assert_allclose(back.dense_title, fresh.dense_title, atol=1e-6)
    # a backfilled title is stored only while the artifact still has it: a re-ingest wins
    await _forget_title_data(store, tenant)
    await store.ingest(tenant, "", [doc("bread", "Rye bread.", title="Rye")])
    stale = [("bread", "Bread", embedder.vector("Bread")), ("volcano", "Volcanic ash", embedder.vector("Volcanic ash"))]
    assert await store.put_title_vectors(tenant, stale) == 1
    assert float((await store.title_vectors(tenant, ["bread"]))["bread"] @ embedder.vector("Rye")) \
        == pytest.approx(1.0, abs=1e-5)
    assert tenant in await run_backfill(store, HashEmbedder(), settings_for("."), pause_s=0)


def test_the_vectorised_build_equals_a_per_token_loop_on_100_random_entries():
    """build's counts and positions (all rows split at once, looked up in C) against a naive loop
    over every token; its speed is in the serving-cost benchmark (lab.learned_serving), not here."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(400)]
    rows = [((" ".join(rng.choice(words, 8)), " ".join(rng.choice(words, 250))), i, None) for i in range(100)]
    rows[3] = None                                                   # a row not found
    terms = ["w1", "w2", "w3", "w4", "w5"]
    got = build(terms, [5] * 5, 1000, (8.0, 250.0, 258.0), rows, np.ones(384, np.float32))
    for i, row in enumerate(rows):
        if row is None:
            assert not got.found[i] and np.isnan(got.body_tf[i]).all() and (got.body_positions[i] == -1).all()
            continue
        for field, tf, length, positions in ((row[0][0], got.title_tf, got.title_length, got.title_positions),
                                             (row[0][1], got.body_tf, got.body_length, got.body_positions)):
            tokens = field.split()
            assert tf[i].tolist() == [float(tokens.count(t)) for t in terms]
            assert length[i] == len(tokens)
            want = [terms.index(w) if w in terms else -1 for w in tokens][:positions.shape[1]]
            assert positions[i, :len(want)].tolist() == want and (positions[i, len(want):] == -1).all()


async def test_a_schema_5_tenant_opens_migrated_and_the_backfill_fills_its_title_vectors(tmp_path):
    from services.knowledge_store.embedded.core import KnowledgeStore
    from services.knowledge_store.embedded.storage.db import SCHEMA_VERSION
    embedder = HashEmbedder()
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    await store.ingest("t", "", DOCS[:3])
    q = embedder.vector("volcanic ash")
    fresh = await field_signals(store, "t", ["volcano#0", "bread#0", "untitled#0"], QUERY, q)
    store.close()
    db = sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite")     # what schema 5 left: no title vectors
    db.execute("DROP TABLE title_vectors")
    db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    read_only = KnowledgeStore(settings_for(tmp_path, read_only=True), embedder)
    try:                                                         # served as it is: no title vectors, no error
        served = await field_signals(read_only, "t", ["volcano#0", "bread#0", "untitled#0"], QUERY, q)
        assert served.found.all() and np.isnan(served.dense_title).all()
    finally:
        read_only.close()
    store = KnowledgeStore(settings_for(tmp_path), embedder)
    try:
        old = await field_signals(store, "t", ["volcano#0", "bread#0", "untitled#0"], QUERY, q)
        assert np.isnan(old.dense_title).all()
        np.testing.assert_array_equal(old.body_tf, fresh.body_tf)
        assert old.avg_length == pytest.approx(fresh.avg_length)
        assert await run_backfill(store, embedder, settings_for(tmp_path), pause_s=0) == {"t": 2}
        back = await field_signals(store, "t", ["volcano#0", "bread#0", "untitled#0"], QUERY, q)
        np.testing.assert_allclose(back.dense_title, fresh.dense_title, atol=1e-6)
    finally:
        store.close()
    db = sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert db.execute("SELECT count(*) FROM title_vectors").fetchone() == (2,)
    db.close()


async def test_the_startup_backfill_repeats_a_pass_the_embedder_was_not_up_for(tmp_path):
    from services.knowledge_store.embedded.core import KnowledgeStore
    from services.knowledge_store.title_vectors import keep_backfilling
    from shared.errors import Unavailable

    class NotUpYet(HashEmbedder):            # LlmOrchestration starting after the store: its first call fails
        async def embed(self, texts):
            if not self.calls:
                self.calls += 1
                raise Unavailable("llm_orchestration is not serving yet")
            return await super().embed(texts)

    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        await store.ingest("t", "", DOCS[:2])
        (await store._tenants.get("t")).db.writer.execute("DELETE FROM title_vectors")
        await keep_backfilling(store, NotUpYet(), settings_for(tmp_path, read_only=True), retry_s=0)
        assert len(await store.lacking_title_vectors("t", 10)) == 2          # a read-only store: none
        embedder = NotUpYet()
        await keep_backfilling(store, embedder, settings_for(tmp_path), retry_s=0)
        assert await store.lacking_title_vectors("t", 10) == [] and embedder.calls == 2    # failed, then 1 batch
    finally:
        store.close()
