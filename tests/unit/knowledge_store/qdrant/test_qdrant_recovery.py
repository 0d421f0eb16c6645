"""Writes on the qdrant backend interrupted at each step (the process dying there, as a
SIGKILL would stop it): before the artifact's record is written the old version stays whole;
after it, the next store opened on the same Qdrant finishes the replacement. Readers never see
two versions, nor half of one."""
from __future__ import annotations

import pytest

from services.knowledge_store.qdrant import QdrantKnowledgeStore
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


class Killed(BaseException):
    """The process stops here."""


def _v(n: int):
    body = "\n\n".join(f"## Part {p}\n" + " ".join(f"v{n}word{p}x{w}" for w in range(40)) for p in range(3))
    return doc("art", body, content_type="text/markdown", title="Art")


async def _visible(store, tenant: str) -> dict[str, list[int]]:
    listing, _ = await store.keyword(tenant, "", [], 100, SearchFilters(), hits=True)
    out: dict[str, list[int]] = {}
    for h in listing:
        out.setdefault(h.entry.text.split()[0][:2], []).append(h.entry.chunk_index)
    return out


@pytest.mark.parametrize("die_at", ["artifact_record", "flip", "delete_old"])
async def test_a_write_killed_at_any_step_leaves_one_whole_version(tmp_path, die_at):
    settings = settings_for(tmp_path, backend="qdrant", qdrant_path=tmp_path / "qdrant", chunk_tokens=64,
                            chunk_overlap_tokens=0)
    a = QdrantKnowledgeStore(settings, HashEmbedder())
    await a.ingest("t", "", [_v(1)])
    first = await _visible(a, "t")
    assert list(first) == ["v1"] and len(first["v1"]) >= 3
    real = a._call

    async def dying(method, **kwargs):
        collection = kwargs.get("collection_name", "")
        if ((die_at == "artifact_record" and method == "upsert" and collection.endswith("_artifacts"))
                or (die_at == "flip" and method == "batch_update_points" and collection.endswith("_chunks"))
                or (die_at == "delete_old" and method == "delete" and collection.endswith("_chunks"))):
            raise Killed(die_at)
        return await real(method, **kwargs)

    a._call = dying
    with pytest.raises(Killed):
        await a.ingest("t", "", [_v(2)])
    a._call = real
    assert list(await _visible(a, "t")) in (["v1"], ["v2"])        # one version, whole
    a.close()

    b = QdrantKnowledgeStore(settings, HashEmbedder())             # the next replica
    try:
        seen = await _visible(b, "t")
        version = "v1" if die_at == "artifact_record" else "v2"    # the record is the commit point
        assert list(seen) == [version] and sorted(seen[version]) == list(range(len(first["v1"])))
        stats = await b.stats("t")
        assert (stats.artifacts, stats.entries) == (1, len(first["v1"]))
        hits, _ = await b.keyword("t", f"{version}word1x3", [], 10, SearchFilters(), hits=True)
        assert len(hits) == 1
        other = "v2" if version == "v1" else "v1"
        assert (await b.keyword("t", f"{other}word1x3", [], 10, SearchFilters(), hits=True))[0] == []
        # the term statistics match what is visible (recounted after an interrupted write)
        q = await HashEmbedder().embed(["x"])
        _, completion = await b.complete("t", q, 5, SearchFilters(),
                                                                      keywords=f"{version}word1x3 {other}word1x3")
        assert completion.keyword_stats.document_frequency == (1, 0)
        assert completion.keyword_stats.entries == len(first["v1"])
    finally:
        b.close()
