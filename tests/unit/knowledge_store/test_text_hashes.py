"""The normalised text hash (shared/text_hash.py): what it ignores and what it does not, stored at
ingest on both backends, and backfilled for what was stored before it existed — an embedded tenant
at schema 7 (migrated; its rows still pass their checksums) and Qdrant points without it. The same
tenant, which had no entry spans either (schema 9), reads its old entries without one."""
from __future__ import annotations

import sqlite3

from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.qdrant import QdrantKnowledgeStore
from shared.text_hash import normalised_text, text_hash
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

TEXT = "Glaciers retreat as the climate warms; sea levels rise."


def test_the_hash_ignores_case_width_punctuation_and_spacing_but_not_words():
    assert normalised_text("ﬁne  Ｓtraße,\n\tok!") == "fine strasse ok"
    same = ["Glaciers retreat as the climate warms -- sea levels rise",
            "GLACIERS   retreat as the climate warms.\nSea levels rise!",
            "glaciers retreat as the climate warms sea levels rise"]
    assert {text_hash(t) for t in same} == {text_hash(TEXT)}
    assert text_hash("Glaciers advance as the climate warms; sea levels rise.") != text_hash(TEXT)
    assert text_hash("Glaciers retreat as the climate warms; sea levels rise 2.") != text_hash(TEXT)
    assert text_hash(" ... ") == "" and len(text_hash(TEXT)) == 24


def _db(tmp_path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite")


async def test_a_schema_7_embedded_tenant_gets_its_hashes_and_no_row_reads_as_corrupt(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    await store.ingest("t", "", [doc("a", TEXT), doc("b", TEXT.upper()), doc("c", "Yeast ferments sugar.")])
    assert [h.entry.text_hash for h in await store.get_entries("t", ["a#0", "c#0"])] == [
        text_hash(TEXT), text_hash("Yeast ferments sugar.")]
    store.close()
    db = _db(tmp_path)                              # what schema 7 left: no text_hash column, no spans
    for column in ("text_hash", "span_start", "span_end"):
        db.execute(f"ALTER TABLE entries DROP COLUMN {column}")
    db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    db.commit()
    db.close()

    served = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0, read_only=True), HashEmbedder())
    try:                                            # read-only: not migrated, the hash computed on read
        [hit] = await served.get_entries("t", ["a#0"])
        assert (hit.entry.text_hash, hit.entry.span_end) == (text_hash(TEXT), 0)
    finally:
        served.close()
    store = KnowledgeStore(settings_for(tmp_path, scrub_interval_s=0), HashEmbedder())
    try:
        hits = await store.get_entries("t", ["a#0", "b#0", "c#0"])
        assert [h.entry.text_hash for h in hits] == [text_hash(TEXT)] * 2 + [text_hash("Yeast ferments sugar.")]
        check = await store.check_tenant("t", repair=False)
        assert check.corrupt_rows == 0 and check.unverified_rows == 0
        assert {h.entry.span_end for h in hits} == {0}             # stored before spans: unknown
        await store.ingest("t", "", [doc("d", "  " + TEXT)])
        [new] = await store.get_entries("t", ["d#0"])
        assert (new.entry.span_start, new.entry.span_end) == (2, 2 + len(TEXT))
    finally:
        store.close()
    db = _db(tmp_path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("9",)
    assert db.execute("SELECT count(*) FROM entries WHERE text_hash IS NULL").fetchone() == (0,)
    db.close()


async def test_qdrant_points_without_a_hash_get_one_when_the_store_opens(tmp_path):
    settings = settings_for(tmp_path / "ks", backend="qdrant", qdrant_path=tmp_path / "qdrant")
    store = QdrantKnowledgeStore(settings, HashEmbedder())
    await store.ingest("t", "", [doc("a", TEXT), doc("b", "Yeast ferments sugar.")])
    assert [h.entry.text_hash for h in await store.get_entries("t", ["a#0"])] == [text_hash(TEXT)]
    client = store._q.client                        # what a store from before the hash left
    points, _ = client.scroll(store._names.chunks, limit=100, with_payload=["text_hash"])
    assert len(points) == 2 and all(p.payload.get("text_hash") for p in points)
    client.delete_payload(store._names.chunks, keys=["text_hash"], points=[p.id for p in points])
    assert [h.entry.text_hash for h in await store.get_entries("t", ["a#0"])] == [text_hash(TEXT)]   # lazily
    store.close()

    store = QdrantKnowledgeStore(settings, HashEmbedder())
    try:
        await store.get_entries("t", ["b#0"])       # the first call opens it: the backfill runs
        points, _ = store._q.client.scroll(store._names.chunks, limit=100, with_payload=["entry_id", "text_hash"])
        assert {p.payload["entry_id"]: p.payload.get("text_hash") for p in points} == {
            "a#0": text_hash(TEXT), "b#0": text_hash("Yeast ferments sugar.")}
        assert (await store.check_tenant("t", repair=False)).consistent
    finally:
        store.close()
