"""Each tenant's embedding model fingerprint (fingerprints.py) on both backends (Qdrant in local
mode): recorded at the first ingest through the front; an existing tenant whose stored vectors the
serving model reproduces gets the serving fingerprint, one whose vectors it does not gets
`unknown`; an archive of that one is refused naming --reembed, and imports with it, its vectors
then the serving model's."""
from __future__ import annotations

import numpy as np
import pytest

from services.knowledge_store.backend import open_store
from services.knowledge_store.fingerprints import UNKNOWN
from services.knowledge_store.front import StoreFront
from services.knowledge_store.preparation import derived_rows
from shared.errors import FailedPrecondition
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

KEY = bytes(range(32))


class OtherModel(HashEmbedder):
    """Another model of the same name and dimension: the hashing embedder's vectors, turned."""

    def vector(self, text: str) -> np.ndarray:
        v = np.roll(super().vector(text), 1) + super().vector(text)
        return v / np.linalg.norm(v)


def _store(path, backend, embedder):
    extra = {"backend": "qdrant", "qdrant_path": path / "qdrant"} if backend == "qdrant" else {}
    return open_store(settings_for(path, chunk_tokens=32, **extra), embedder)


async def _chunks(raw: bytes):
    yield raw


@pytest.mark.parametrize("backend", ["embedded", "qdrant"])
async def test_fingerprints_are_recorded_decided_and_an_unknown_model_imports_only_re_embedded(tmp_path, backend):
    docs = [doc(f"d{i}", f"Pump {i} seal leaks after the pressure test; replace seal {i}.", title=f"Pump {i}")
            for i in range(3)]
    for tenant, embedder in (("same", HashEmbedder()), ("old", OtherModel())):     # stored before fingerprints
        store = _store(tmp_path, backend, embedder)
        await store.ingest(tenant, "", docs)
        store.close()
    store = _store(tmp_path, backend, HashEmbedder())
    front = StoreFront(store)
    try:
        serving = await front.fingerprints.serving()
        assert len(serving) == 32 and await store.tenant_fingerprint("same") == ""
        await front.ingest(None, "fresh", "", docs)
        assert await store.tenant_fingerprint("fresh") == serving               # recorded at its first ingest
        await front.ingest(None, "same", "", [doc("late", "Valve pressure test at 12 bar.")])
        assert await store.tenant_fingerprint("same") == serving                # its sample re-embedded equal
        assert await front.fingerprints.of_tenant("old") == UNKNOWN
        assert await store.tenant_fingerprint("old") == UNKNOWN

        raw = b"".join([c async for c in front.export_tenant(None, "old", KEY)])
        assert b'"fingerprint":"unknown"' in raw
        with pytest.raises(FailedPrecondition, match="unknown model.*--reembed"):
            await front.import_tenant(None, _chunks(raw), KEY, as_tenant="copy")
        assert "copy" not in store.list_tenants()
        report = await front.import_tenant(None, _chunks(raw), KEY, as_tenant="copy", reembed=True)
        assert report.artifacts == 3 and await store.tenant_fingerprint("copy") == serving
        hits = await store.get_entries("copy", ["d1#0"])
        vectors = await store.entry_vectors("copy", ["d1#0"])
        want = HashEmbedder().vector(derived_rows(hits[0].artifact.title, hits[0].entry.headline,
                                                  hits[0].entry.text)[2])
        np.testing.assert_allclose(vectors["d1#0"], want, atol=1e-6)
        titles = await store.title_vectors("copy", ["d1"])
        np.testing.assert_allclose(titles["d1"], HashEmbedder().vector("Pump 1"), atol=1e-6)

        raw = b"".join([c async for c in front.export_tenant(None, "same", KEY)])
        assert f'"fingerprint":"{serving}"'.encode() in raw
        report = await front.import_tenant(None, _chunks(raw), KEY, as_tenant="same2")       # no --reembed needed
        assert report.artifacts == 4 and await store.tenant_fingerprint("same2") == serving
    finally:
        store.close()
