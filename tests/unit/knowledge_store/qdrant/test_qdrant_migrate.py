"""`nucleus migrate`: a tenant moved from the embedded store into Qdrant (local mode) as a tenant
archive with its stored vectors, profiles, models, fingerprint and user data (votes, search log,
source votes, the vote log with comments and search ids), its cut import redone on a
rerun, re-saturated (BM25 scores then equal the embedded store's), verified, skipped once
verified, a divergence found by `--verify-only`; then moved back to an embedded store."""
from __future__ import annotations

import time

import pytest

from cli import migrate as mig
from ranking.profile import RankingProfile
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.qdrant import QdrantKnowledgeStore
from services.knowledge_store.qdrant import archive as qdrant_archive
from shared.records import SearchFilters, SearchLogItem, SearchLogRecord
from tests.support.ranking_models import linear_model
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

TEXTS = ["Volcanic eruptions release sulfur dioxide that cools the climate.",
         "Sourdough bread rises because wild yeast ferments the dough over many hours in a warm kitchen.",
         "Yeast cells ferment sugar into alcohol.", "Volcanic ash grounds aircraft; ash melts in jet engines.",
         "Climate models couple oceans, ice and atmosphere, and volcanic forcing matters for a few years.",
         "Glaciers retreat as the climate warms."]


async def test_migrate_resumes_a_cut_import_then_moves_the_tenant_there_and_back_and_agrees(tmp_path):
    embedder = HashEmbedder()
    source = KnowledgeStore(settings_for(tmp_path / "ks"), embedder)
    await source.ingest("acme", "", [doc(f"d{i}", t, title=f"Doc {i}", tags=("t",) if i % 2 else ())
                                     for i, t in enumerate(TEXTS)])
    await source.put_profile(RankingProfile(tenant_id="acme", name="fresh", recency_weight=0.4))
    sha, _ = await source.put_ranking_model("acme", linear_model(), RankingProfile(tenant_id="acme", name="tuned"))
    await source.record_feedback("acme", "artifact", "d1", True, "u1")
    await source.record_source_feedback("acme", "legal", "legal:x", False, "u1")
    search = SearchLogRecord("acme", "s" * 24, "u2", int(time.time()), "0" * 64, (SearchLogItem("d2#0", "d2", 1),))
    await source.record_search(search)
    await source.record_feedback("acme", "entry", "d2#0", True, "u2", comment="clear", search_id=search.search_id)
    await source.set_tenant_fingerprint("acme", "f" * 32)
    want, _ = await source.keyword("acme", "volcanic climate yeast", [], 10, SearchFilters(), hits=True)
    source.close()

    settings = settings_for(tmp_path / "ks", qdrant_path=tmp_path / "qdrant")
    # A kill -9 after the import's points were written: nothing cleaned up, nothing re-saturated.
    with pytest.MonkeyPatch.context() as mp:
        async def killed(self):
            raise KeyboardInterrupt("kill -9")

        async def no_cleanup(self):
            return None
        mp.setattr(qdrant_archive._Stage, "commit", killed)
        mp.setattr(qdrant_archive._Stage, "abort", no_cleanup)
        with pytest.raises(KeyboardInterrupt):
            await mig.migrate(settings, "qdrant", ["acme"], samples=4)
    lines: list[str] = []
    assert await mig.migrate(settings, "qdrant", ["acme"], samples=4, log=lines.append) == 0
    assert lines[0] == "tenant acme: an earlier run stopped during its import: importing it again"
    assert any(line.startswith("tenant acme: counts 6 artifacts / 6 entries / 2 profile versions / 0 personas, "
                               "target 6 / 6 / 2 / 0; records SHA-256 equal") for line in lines), lines
    lines.clear()
    assert await mig.migrate(settings, "qdrant", ["acme"], samples=4, log=lines.append) == 0
    assert lines == ["tenant acme: moved and verified by an earlier run, skipped"]
    lines.clear()
    assert await mig.migrate(settings, "qdrant", ["acme"], samples=4, verify_only=True, log=lines.append) == 0

    target = QdrantKnowledgeStore(settings, embedder)
    try:
        got, _ = await target.keyword("acme", "volcanic climate yeast", [], 10, SearchFilters(), hits=True)
        assert [h.entry.id for h in got] == [h.entry.id for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-5)
        assert (await target.get_profile("acme", "", "fresh")).recency_weight == 0.4
        assert (await target.get_profile("acme", "", "tuned")).model_sha256 == sha         # and the model it names
        assert await target.get_ranking_model("acme", sha) == linear_model()
        d1 = [h for h in got if h.entry.artifact_id == "d1"]
        assert d1 and d1[0].artifact.feedback_helpful == 1
        assert [(v["artifact_id"], v["user_id"], v["helpful"]) for v in await target.user_data("acme", "vote")] == [
            ("d1", "u1", True), ("d2", "u2", True)]                      # the votes themselves, not only the counters
        assert [(r["target_id"], r["comment"], r["search_id"]) for r in await target.user_data("acme", "feedback")
                if r["comment"]] == [("d2#0", "clear", search.search_id)]      # the vote log, comment and search
        ack = await target.record_feedback("acme", "artifact", "d1", False, "u1")        # a user's vote flips
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
        assert [(v.source_id, v.helpful, v.unhelpful) for v in await target.source_votes("acme")] == [("legal", 0, 1)]
        ack = await target.record_feedback("acme", "entry", "d2#0", True, "u2", search_id=search.search_id)
        assert ack.feedback_helpful == 1                                 # the search log arrived and checks it
        assert await target.tenant_fingerprint("acme") == "f" * 32
        await target.ingest("acme", "", [doc("late", "Glaciers calve icebergs into the fjord.")])   # diverged
    finally:
        target.close()
    lines.clear()
    assert await mig.migrate(settings, "qdrant", ["acme"], samples=4, verify_only=True, log=lines.append) == 1
    assert "tenant acme: counts 6 artifacts / 6 entries" in lines[0] and "target 7 / 7" in lines[0]

    back = settings_for(tmp_path / "back", qdrant_path=tmp_path / "qdrant")       # and the other way
    lines.clear()
    assert await mig.migrate(back, "embedded", ["acme"], samples=4, log=lines.append) == 0, lines
    store = KnowledgeStore(back, embedder)
    try:
        assert (await store.stats("acme")).artifacts == 7
        assert await store.tenant_fingerprint("acme") == "f" * 32
        assert (await store.get_profile("acme", "", "tuned")).model_sha256 == sha
        ack = await store.record_feedback("acme", "artifact", "d1", True, "u1")          # u1's flipped vote, back
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (1, 0)
        assert [(v.source_id, v.helpful, v.unhelpful) for v in await store.source_votes("acme")] == [("legal", 0, 1)]
        ack = await store.record_feedback("acme", "entry", "d2#0", False, "u2", search_id=search.search_id)
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)   # u2's vote under the search, flipped
        log = [(r["user_id"], r["helpful"], r["comment"]) for r in await store.user_data("acme", "feedback")]
        assert ("u2", True, "clear") in log and len(log) == 6           # every vote both stores took, no more
    finally:
        store.close()


async def test_recount_repairs_drifted_statistics(tmp_path):
    settings = settings_for(tmp_path, backend="qdrant", qdrant_path=tmp_path / "qdrant")
    store = QdrantKnowledgeStore(settings, HashEmbedder())
    await store.ingest("acme", "", [doc(f"d{i}", t) for i, t in enumerate(TEXTS)])
    want, _ = await store.keyword("acme", "volcanic yeast", [], 10, SearchFilters(), hits=True)
    await store._apply_stats("acme", {}, 40, 0.0)        # a lost or doubled delta: N is wrong now
    drifted, _ = await store.keyword("acme", "volcanic yeast", [], 10, SearchFilters(), hits=True)
    assert drifted[0].score != pytest.approx(want[0].score, rel=1e-3)
    store.close()
    lines: list[str] = []
    assert await mig.recount(settings, "acme", log=lines.append) == 0
    assert lines[0].startswith("recounted tenant acme: 6 entries")
    store = QdrantKnowledgeStore(settings, HashEmbedder())
    try:
        again, _ = await store.keyword("acme", "volcanic yeast", [], 10, SearchFilters(), hits=True)
        assert [h.score for h in again] == pytest.approx([h.score for h in want], rel=1e-4)
    finally:
        store.close()
