"""One vote per user per document: a second vote replaces the first, a vote needs a user, and
a database made before per-user votes (schema 1) is migrated keeping its votes and counters."""
from __future__ import annotations

import sqlite3

import pytest

from services.knowledge_store.embedded.core import KnowledgeStore
from shared.errors import InvalidArgument
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


def _db(tmp_path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite")


async def test_a_users_second_vote_on_a_document_replaces_the_first(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        await store.ingest("t", "", [doc("a", "first chunk text. " * 200)])
        for target, target_id in (("entry", "a#0"), ("entry", "a#1"), ("artifact", "a")):
            ack = await store.record_feedback("t", target, target_id, True, "mallory")
            assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 0), target_id
        ack = await store.record_feedback("t", "artifact", "a", False, "mallory")
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
        ack = await store.record_feedback("t", "entry", "a#0", True, "alice")
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 1)
    finally:
        store.close()
    db = _db(tmp_path)
    assert db.execute("SELECT user_id, helpful FROM votes ORDER BY user_id").fetchall() == [("alice", 1),
                                                                                          ("mallory", 0)]
    assert db.execute("SELECT count(*) FROM feedback").fetchone() == (5,)       # the log keeps every vote
    db.close()


@pytest.mark.parametrize("user", ["", "   "])
async def test_a_vote_without_a_user_is_refused_naming_user_id(tmp_path, user):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        await store.ingest("t", "", [doc("a", "some text")])
        with pytest.raises(InvalidArgument) as err:
            await store.record_feedback("t", "artifact", "a", True, user)
        assert err.value.field == "user_id"
    finally:
        store.close()


async def test_votes_of_deleted_documents_are_forgotten(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        await store.ingest("t", "", [doc("a", "some text")])
        await store.record_feedback("t", "artifact", "a", True, "alice")
        await store.delete("t", ["a"])
        db = _db(tmp_path)
        assert db.execute("SELECT count(*) FROM votes").fetchone() == (0,)
        db.close()
        await store.ingest("t", "", [doc("a", "some text again")])
        ack = await store.record_feedback("t", "artifact", "a", False, "alice")
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
    finally:
        store.close()


async def test_a_schema_1_database_is_migrated_keeping_votes_and_counters(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", [doc("a", "some text"), doc("b", "other text")])
    store.close()
    db = _db(tmp_path)                        # what version 1 left: the log and the counters, no votes
    db.execute("DROP TABLE votes")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.executemany("INSERT INTO feedback(created_unix, target, target_id, artifact_id, helpful, user_id, comment, "
                   "counted) VALUES (?, ?, ?, 'a', ?, ?, '', ?)",
                   [(1, "artifact", "a", 1, "u1", 0), (2, "entry", "a#0", 0, "u1", 1),   # u1 changed their mind
                    (3, "artifact", "a", 1, "", 1), (4, "artifact", "a", 1, "u2", 1)])
    db.execute("UPDATE artifacts SET feedback_helpful = 2, feedback_unhelpful = 1 WHERE artifact_id = 'a'")
    db.commit()
    db.close()

    reopened = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        [hit] = await reopened.get_entries("t", ["a#0"])
        assert (hit.artifact.feedback_helpful, hit.artifact.feedback_unhelpful) == (2, 1)    # data kept
        ack = await reopened.record_feedback("t", "artifact", "a", False, "u2")              # u2 flips: 1 -> 0
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 2)
        ack = await reopened.record_feedback("t", "artifact", "a", False, "u1")              # u1 again: no growth
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 2)
    finally:
        reopened.close()
    db = _db(tmp_path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("9",)   # 1 -> 2 -> ... -> 9
    assert db.execute("SELECT user_id, helpful, target_id FROM votes ORDER BY user_id").fetchall() == [
        ("u1", 0, "a"), ("u2", 0, "a")]
    db.close()
