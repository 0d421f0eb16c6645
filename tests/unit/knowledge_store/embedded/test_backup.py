"""Snapshots and restores of tenants (embedded/backup.py, the store's half) and the authenticated
manifest around them (cli/backup.py): a snapshot is one commit of the tenant; a restore is
staged and verified before the swap and leaves other tenants alone; a changed byte, a changed
manifest or another stack's key is refused. Real SQLite files in tmp_path."""
from __future__ import annotations

import json
import shutil

import pytest

from cli import snapshots as cli_backup
from services.knowledge_store.embedded.core import KnowledgeStore
from shared.errors import FailedPrecondition
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


async def _answers(store: KnowledgeStore, tenant: str) -> list:
    out = []
    for query in ("pump seal", "valve pressure", "notes"):
        hits, _ = await store.keyword(tenant, query, [], 10, SearchFilters(), hits=True)
        out.append([(h.entry.id, round(h.score, 5)) for h in hits])
    return out


def vars_of(s) -> dict:
    return {name: getattr(s, name) for name in ("tenant_id", "file", "sha256", "bytes", "entries", "seq",
                                                "database_id", "point_unix")}


async def test_a_restored_tenant_answers_as_at_its_snapshot_and_other_tenants_are_untouched(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path / "data", scrub_interval_s=0), HashEmbedder())
    try:
        await store.ingest("t", "", [doc(f"p{i}", f"Notes on pump {i}: the seal leaks under pressure.") for i in range(6)])
        await store.ingest("u", "", [doc("v", "Valve pressure notes.")])
        before = await _answers(store, "t")
        store._tenants.save(await store._tenants.get("t"))           # saved indexes go along
        await store.ingest("t", "", [doc("p5", "Notes on pump 5: the seal leaks under pressure, again.")])
        before = await _answers(store, "t")
        (tmp_path / "snap" / "tenants").mkdir(parents=True)
        [snap] = await store.backup(["t"], tmp_path / "snap" / "tenants")
        assert (tmp_path / "snap" / "tenants" / "t.derived" / "manifest.json").is_file()
        assert (snap.entries, snap.tenant_id) == (6, "t") and snap.seq > 0
        assert (tmp_path / "snap" / "tenants" / snap.file).stat().st_mode & 0o777 == 0o600
        await store.ingest("t", "", [doc(f"late{i}", "Valve pressure notes, late.") for i in range(3)])
        await store.delete("t", ["p0"])
        assert await _answers(store, "t") != before

        rebuilt = store._tenants.counters["opened_rebuilt"]
        restored, seconds = await store.restore_tenant("t", tmp_path / "snap" / "tenants" / snap.file, snap.sha256)
        assert restored.entries == 6 and seconds >= 0
        assert await _answers(store, "t") == before
        assert store._tenants.counters["opened_replayed"] == 1                # saved indexes + the log, no rebuild
        assert store._tenants.counters["opened_rebuilt"] == rebuilt
        assert (await store.stats("u")).entries == 1
        assert [p.tenant_id for p in store.status().problems] == []
    finally:
        store.close()


async def test_a_restore_refuses_a_changed_file_or_a_damaged_database_and_keeps_the_tenant(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path / "data", scrub_interval_s=0), HashEmbedder())
    try:
        await store.ingest("t", "", [doc(f"p{i}", f"Notes on pump {i}. " * 40) for i in range(20)])
        (tmp_path / "snap").mkdir()
        [snap] = await store.backup(["t"], tmp_path / "snap")
        path = tmp_path / "snap" / snap.file
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(FailedPrecondition, match="does not match its manifest's SHA-256"):
            await store.restore_tenant("t", path, snap.sha256)
        page = int.from_bytes(data[16:18], "big")
        data[page * 2 + 8: page * 2 + 64] = b"\xa5" * 56                   # a b-tree page's header
        path.write_bytes(bytes(data))
        with pytest.raises(FailedPrecondition, match="integrity_check|not a usable database"):
            await store.restore_tenant("t", path, cli_backup._sha256(path))
        assert (await store.stats("t")).entries == 20                        # untouched
        assert not list((tmp_path / "data" / "tenants").glob(".restore-*"))  # staging cleaned up
    finally:
        store.close()


async def test_the_manifest_mac_refuses_a_changed_manifest_file_or_another_stacks_key(tmp_path):
    store = KnowledgeStore(settings_for(tmp_path / "data", scrub_interval_s=0), HashEmbedder())
    try:
        await store.ingest("t", "", [doc("p", "Notes on a pump.")])
        (tmp_path / "snap" / "tenants").mkdir(parents=True)
        snaps = await store.backup([], tmp_path / "snap" / "tenants")
    finally:
        store.close()
    key, other = b"k" * 32, b"o" * 32
    directory = tmp_path / "snap"
    manifest = cli_backup.write_snapshot(directory, [vars_of(s) for s in snaps],
                                         [("link_secret", b"s3cret", True), ("sources.json", b"{}", False)], key,
                                         with_secrets=True)
    assert cli_backup.verify(directory, key)["tenants"]["t"]["entries"] == 1
    assert manifest["secrets"] == "encrypted" and b"s3cret" not in (directory / "stack" / "link_secret.enc").read_bytes()
    with pytest.raises(FailedPrecondition, match="another backup key"):
        cli_backup.verify(directory, other)

    changed = tmp_path / "changed"
    shutil.copytree(directory, changed)
    body = json.loads((changed / "manifest.json").read_text())
    body["tenants"]["t"]["entries"] = 2
    (changed / "manifest.json").write_text(json.dumps(body, sort_keys=True, indent=1))
    with pytest.raises(FailedPrecondition, match="manifest or its MAC was changed"):
        cli_backup.verify(changed, key)

    flipped = tmp_path / "flipped"
    shutil.copytree(directory, flipped)
    target = flipped / "stack" / "sources.json"
    target.write_bytes(b"{ }")
    with pytest.raises(FailedPrecondition, match="stack/sources.json does not match its SHA-256"):
        cli_backup.verify(flipped, key)


def test_retention_keeps_the_newest_snapshots_and_only_complete_ones(tmp_path):
    for name in ("20260101T000000Z", "20260102T000000Z", "20260103T000000Z"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    (tmp_path / "20260104T000000Z").mkdir()                    # no manifest: not a snapshot, never counted
    removed = cli_backup.prune(tmp_path, 2)
    assert [p.name for p in removed] == ["20260101T000000Z"]
    assert [p.name for p in cli_backup.snapshots_in(tmp_path)] == ["20260102T000000Z", "20260103T000000Z"]


def test_the_stack_state_comes_back_with_its_secrets_decrypted_and_is_refused_under_another_key(tmp_path, monkeypatch):
    import argparse

    from cli import backup as cli_commands

    for var in ("NUCLEUS_IDENTITY_DIR", "NUCLEUS_SOURCES_FILE", "NUCLEUS_RAG_AUTH_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    old = tmp_path / "old"
    (old / "identity").mkdir(parents=True)
    (old / "sources.json").write_text('{"sources": []}')
    (old / "identity" / "operator.key").write_text("PRIVATE KEY")
    (old / "identity" / "trust.json").write_text("{}")
    monkeypatch.setenv("NUCLEUS_RAG_LINK_SECRET", "link-s3cret")
    stack = cli_commands.stack_files(argparse.Namespace(data_dir=str(old), file=None))
    assert {name: secret for name, _, secret in stack} == {"sources.json": False, "identity/operator.key": True,
                                                           "identity/trust.json": False, "link_secret": True}
    key = b"k" * 32
    snapshot = tmp_path / "snap"
    (snapshot / "tenants").mkdir(parents=True)
    manifest = cli_backup.write_snapshot(snapshot, [], stack, key, with_secrets=True)
    assert all(b"PRIVATE KEY" not in p.read_bytes() for p in (snapshot / "stack").rglob("*") if p.is_file())

    fresh = tmp_path / "fresh"
    lines = cli_commands.restore_stack_state(argparse.Namespace(data_dir=str(fresh), file=None), snapshot,
                                             cli_backup.verify(snapshot, key), key)
    assert (fresh / "identity" / "operator.key").read_text() == "PRIVATE KEY"
    assert (fresh / "identity" / "operator.key").stat().st_mode & 0o777 == 0o600
    assert (fresh / "sources.json").read_text() == '{"sources": []}'
    assert (fresh / "link_secret").read_text() == "link-s3cret" and len(lines) == 4
    with pytest.raises(FailedPrecondition, match="cannot be decrypted"):
        cli_commands.restore_stack_state(argparse.Namespace(data_dir=str(tmp_path / "other"), file=None), snapshot,
                                         manifest, b"o" * 32)
    assert not (tmp_path / "other").exists()                    # nothing written before every secret decrypts

    left_out = tmp_path / "no-secrets"
    (left_out / "tenants").mkdir(parents=True)
    manifest = cli_backup.write_snapshot(left_out, [], stack, key, with_secrets=False)
    assert manifest["secrets"] == "left out" and set(manifest["files"]) == {"stack/sources.json",
                                                                            "stack/identity/trust.json"}
