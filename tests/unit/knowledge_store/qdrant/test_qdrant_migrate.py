"""`nucleus migrate --to qdrant`: a tenant copied from the embedded store into Qdrant (local
mode) with its stored vectors, profiles and votes, resumed after an interruption, re-saturated
(BM25 scores then equal the embedded store's) and verified."""
from __future__ import annotations

import time

import pytest

from cli import migrate as mig
from ranking.profile import RankingProfile
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.qdrant import QdrantKnowledgeStore
from shared.records import SearchFilters, SearchLogItem, SearchLogRecord
from tests.support.ranking_models import linear_model
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

TEXTS = ["Volcanic eruptions release sulfur dioxide that cools the climate.",
         "Sourdough bread rises because wild yeast ferments the dough over many hours in a warm kitchen.",
         "Yeast cells ferment sugar into alcohol.", "Volcanic ash grounds aircraft; ash melts in jet engines.",
         "Climate models couple oceans, ice and atmosphere, and volcanic forcing matters for a few years.",
         "Glaciers retreat as the climate warms."]


async def test_migrate_resumes_then_copies_everything_and_agrees(tmp_path, capsys):
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
    want, _ = await source.keyword("acme", "volcanic climate yeast", [], 10, SearchFilters(), hits=True)
    source.close()

    settings = settings_for(tmp_path / "ks", backend="qdrant", qdrant_path=tmp_path / "qdrant")
    real_copy = mig._copy_batch
    calls = []

    async def interrupted(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("operator pressed ^C")
        await real_copy(*args)

    mig._copy_batch = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            await mig.migrate(settings, "acme", batch=2, samples=4)
    finally:
        mig._copy_batch = real_copy
    lines: list[str] = []
    assert await mig.migrate(settings, "acme", batch=2, samples=4, log=lines.append) == 0
    assert lines[0].startswith("resuming after artifact 'd1' (checkpoint ")
    assert any(line.startswith("counts: embedded 6 artifacts / 6 entries, qdrant 6 / 6 ok") for line in lines)

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
        ack = await target.record_feedback("acme", "artifact", "d1", False, "u1")        # the copied vote counts
        assert (ack.feedback_helpful, ack.feedback_unhelpful) == (0, 1)
        assert [(v.source_id, v.helpful, v.unhelpful) for v in await target.source_votes("acme")] == [("legal", 0, 1)]
        ack = await target.record_feedback("acme", "entry", "d2#0", True, "u2", search_id=search.search_id)
        assert ack.feedback_helpful == 1                                 # the copied search log checks it
    finally:
        target.close()


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
