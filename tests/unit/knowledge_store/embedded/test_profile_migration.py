"""A tenant database made before profiles had re-rank fields (schema 3) or learned-ranking fields
(schema 4) keeps its profiles: opened writable it is migrated (the columns added with their
defaults: re-ranking off, no model; the `ranking_models` table made), opened read-only it is
served as it is, the missing fields read as their defaults."""
from __future__ import annotations

import sqlite3

from ranking.profile import RankingProfile
from services.knowledge_store.embedded.core import KnowledgeStore
from tests.support.ranking_models import linear_model
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


LEARNED = ("model_sha256", "feature_version", "feedback_expansion")


def _db(tmp_path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "tenants" / "t" / "store.sqlite")


async def _schema_3_tenant(tmp_path) -> None:
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    await store.ingest("t", "", [doc("a", "some text")])
    await store.put_profile(RankingProfile(tenant_id="t", name="old", recency_weight=0.4, is_default=True))
    store.close()
    db = _db(tmp_path)                       # what schema 3 left: no re-rank or model columns, no models
    for column in ("reranker", "rerank_top_n", "rerank_weight", *LEARNED):
        db.execute(f"ALTER TABLE profiles DROP COLUMN {column}")
    db.execute("DROP TABLE ranking_models")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    db.close()


async def test_a_schema_3_tenant_is_migrated_keeping_its_profiles_with_reranking_off(tmp_path):
    await _schema_3_tenant(tmp_path)
    store = KnowledgeStore(settings_for(tmp_path), HashEmbedder())
    try:
        old = await store.get_profile("t", "", "")
        assert (old.name, old.recency_weight, old.is_default) == ("old", 0.4, True)
        assert (old.reranker, old.rerank_top_n, old.rerank_weight) == ("", 20, 0.5)
        new = await store.put_profile(RankingProfile(tenant_id="t", name="old", reranker="rerank-api",
                                                     rerank_top_n=5, rerank_weight=0.9))
        assert (new.version, new.reranker, new.rerank_top_n, new.rerank_weight) == (2, "rerank-api", 5, 0.9)
        assert (old.model_sha256, old.feature_version, old.feedback_expansion) == ("", 0, "")
        sha, _ = await store.put_ranking_model("t", linear_model())               # the new table is there
        assert await store.get_ranking_model("t", sha) == linear_model()
    finally:
        store.close()
    db = _db(tmp_path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("9",)
    assert db.execute("SELECT count(*) FROM ingest_keys").fetchone() == (0,)          # schema 7
    assert db.execute("SELECT version, reranker, rerank_top_n, rerank_weight FROM profiles ORDER BY seq").fetchall() \
        == [(1, "", 20, 0.5), (2, "rerank-api", 5, 0.9)]
    db.close()


async def test_a_schema_3_tenant_served_read_only_reads_its_profiles_with_the_defaults(tmp_path):
    await _schema_3_tenant(tmp_path)
    store = KnowledgeStore(settings_for(tmp_path, read_only=True), HashEmbedder())
    try:
        [old] = await store.list_profiles("t")
        assert (old.name, old.reranker, old.rerank_top_n, old.rerank_weight) == ("old", "", 20, 0.5)
        assert (old.model_sha256, old.feature_version, old.feedback_expansion) == ("", 0, "")
        assert await store.get_ranking_model("t", "0" * 64) is None                  # no table: no model
    finally:
        store.close()
    db = _db(tmp_path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)   # untouched
    db.close()
