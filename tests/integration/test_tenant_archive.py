"""`nucleus tenant export` / `tenant import` as CLI processes against a KnowledgeStore process of
their own (embedding through the suite stack's LlmOrchestration): a tenant exported to a 0600
file and imported under another tenant id answers the same searches; a changed byte is refused
with a non-zero exit and the tenant it was to replace is unchanged; a read names the copy of the
data it read (`data_id`), kept by a write, new after an import replaced the tenant."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from services.knowledge_store.client import KnowledgeStoreClient
from shared.errors import FailedPrecondition
from shared.records import ArtifactMeta, DocumentIn, SearchFilters
from tests.integration.test_backup_restore import nucleus_run, start_store, stop
from tests.support.retrieval import search_by_filters

pytestmark = pytest.mark.integration
NOTES = {"pump": "The pump seal leaks after the pressure test; replace the seal and torque the flange.",
         "valve": "Valve pressure test: close the outlet, raise to 12 bar, hold ten minutes, check the gauge.",
         "battery": "Battery controller reset: hold the service button for five seconds until the light blinks."}


async def _listing(client: KnowledgeStoreClient, tenant: str, query: str = "") -> list[tuple[str, str]]:
    hits, _ = await search_by_filters(client, tenant, query, [], 100, SearchFilters())
    return sorted((h.entry.artifact_id, h.entry.text) for h in hits)


async def test_a_tenant_exported_and_imported_under_another_id_answers_the_same_and_a_changed_byte_is_refused(
        stack, tmp_path: Path):
    data = tmp_path / "store"
    data.mkdir()
    proc, ks = start_store(data, stack["llm_orchestration"]["grpc"])
    key, archive = tmp_path / "backup.key", tmp_path / "out" / "src.archive"
    archive.parent.mkdir()

    def cli(*args: str):
        return nucleus_run("tenant", *args, "--key", str(key), "--knowledge-store-target", ks, data_dir=tmp_path)

    client = KnowledgeStoreClient(ks, ingest_timeout_s=60)
    try:
        await client.ingest("src", "", [DocumentIn(ArtifactMeta(artifact_id=a, title=a.title()), text)
                                         for a, text in NOTES.items()])
        exported = cli("export", "--tenant", "src", "--to", str(archive))
        assert exported.returncode == 0, exported.stderr
        assert oct(archive.stat().st_mode & 0o777) == "0o600"
        assert [p.name for p in archive.parent.iterdir()] == ["src.archive"]       # no partial file left
        assert not list(data.glob(".archive-*")), "the store left its temporary archive file"

        imported = cli("import", str(archive), "--as-tenant", "copy")
        assert imported.returncode == 0, imported.stderr
        assert "as copy: 3 artifacts" in imported.stdout
        assert (await client.stats("copy")).artifacts == 3
        for query in ("", "pressure test", "battery reset"):
            assert await _listing(client, "copy", query) == await _listing(client, "src", query)
        assert not list(data.glob(".archive-*")) and not list(data.glob(".import-*"))

        again = cli("export", "--tenant", "src", "--to", str(archive))             # never over a file
        assert again.returncode == 2 and "exists" in again.stderr

        tampered = tmp_path / "tampered.archive"
        shutil.copy(archive, tampered)
        raw = tampered.read_bytes()
        tampered.write_bytes(raw.replace(b"12 bar", b"99 bar", 1))
        before = await _listing(client, "copy")
        refused = cli("import", str(tampered), "--as-tenant", "copy", "--replace")
        assert refused.returncode == FailedPrecondition.exit_code, refused.stderr
        assert "SHA-256" in refused.stderr
        assert await _listing(client, "copy") == before

        # the store verifies too: the changed bytes sent past the CLI's check are refused there
        with pytest.raises(FailedPrecondition, match="SHA-256"):
            await client.import_tenant(_chunks(tampered.read_bytes()), bytes.fromhex(key.read_text().strip()),
                                       as_tenant="copy", replace=True)
        assert await _listing(client, "copy") == before
        assert not list(data.glob(".archive-*")) and not list(data.glob(".import-*"))

        # a read names the copy of the data it read (pages.py drops held rankings of a replaced one)
        held = client.data_id("copy")
        await client.ingest("copy", "", [DocumentIn(ArtifactMeta(artifact_id="extra"), "An extra pump note.")])
        await _listing(client, "copy")
        assert held and client.data_id("copy") == held, "a write keeps the data id"
        await client.import_tenant(_chunks(archive.read_bytes()), bytes.fromhex(key.read_text().strip()),
                                   as_tenant="copy", replace=True)
        await _listing(client, "copy")
        assert client.data_id("copy") not in ("", held), "an import that replaces the data gives it a new id"
    finally:
        await client.close()
        stop(proc)


async def _chunks(raw: bytes, size: int = 4096):
    for start in range(0, len(raw), size):
        yield raw[start:start + size]
