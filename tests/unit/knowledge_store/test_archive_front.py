"""The front's tenant export and import (front.py `export_tenant`, `import_tenant`) on a real
embedded store: the archive streamed out and back in under another tenant id; the store's own
temporary files gone afterwards; user data only with `with_user_data` under another id; operators
only; a short key and changed bytes refused with nothing written; the import logged without key
material."""
from __future__ import annotations

import logging

import pytest

from services.knowledge_store.backend import open_store
from services.knowledge_store.front import StoreFront
from shared.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from shared.identity import OPERATOR, Principal
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for

KEY = bytes(range(32))
OPERATOR_P = Principal("", "operator", roles=(OPERATOR,), auth_method="service", key_id="op-key-1")


async def _chunks(raw: bytes, size: int = 1000):
    for start in range(0, len(raw), size):
        yield raw[start:start + size]


@pytest.fixture
async def front(tmp_path):
    store = open_store(settings_for(tmp_path / "s", chunk_tokens=32), HashEmbedder())
    await store.ingest("acme", "", [doc(f"d{i}", f"Pump {i} seal leaks after the pressure test {i}.")
                                    for i in range(3)])
    await store.record_feedback("acme", "artifact", "d1", True, "u1")
    yield StoreFront(store)
    store.close()


async def _export(front, tenant="acme", p=OPERATOR_P) -> bytes:
    return b"".join([c async for c in front.export_tenant(p, tenant, KEY)])


async def test_an_exported_tenant_imports_under_another_id_and_the_import_is_logged_without_the_key(
        front, tmp_path, caplog):
    raw = await _export(front)
    with caplog.at_level(logging.INFO, logger="services.knowledge_store.front"):
        report = await front.import_tenant(OPERATOR_P, _chunks(raw), KEY, as_tenant="copy")
        full = await front.import_tenant(OPERATOR_P, _chunks(raw), KEY, as_tenant="full", with_user_data=True)
    assert (report.tenant_id, report.artifacts, report.user_records) == ("copy", 3, 0)
    assert (full.tenant_id, full.artifacts, full.user_records) == ("full", 3, 2)     # the vote, and in the log
    assert (await front.stats(None, "copy")).artifacts == 3
    assert [v["user_id"] for v in await front.store.user_data("full", "vote")] == ["u1"]
    assert await front.store.user_data("copy", "vote") == []
    line = [r.getMessage() for r in caplog.records if "tenant archive imported" in r.getMessage()]
    assert len(line) == 2 and "tenant=acme as_tenant=copy" in line[0] and "operator_key_id=op-key-1" in line[0]
    assert "with_user_data=False" in line[0] and "with_user_data=True" in line[1] and "user_records=2" in line[1]
    assert KEY.hex() not in line[0]
    assert not list((tmp_path / "s").glob(".archive-*"))


async def test_export_and_import_are_for_operators_only(front):
    user = Principal("acme", "ada", roles=("admin",))
    with pytest.raises(PermissionDenied, match="a tenant export needs an operator credential"):
        await _export(front, p=user)
    with pytest.raises(PermissionDenied, match="a tenant import needs an operator credential"):
        await front.import_tenant(user, _chunks(b"x"), KEY, as_tenant="copy")


@pytest.mark.parametrize("key, options, error, field", [
    (b"short", {}, InvalidArgument, "backup_key"),
    (KEY, {"as_tenant": "no spaces"}, InvalidArgument, "as_tenant"),
], ids=["short key", "bad tenant id"])
async def test_bad_options_are_refused_naming_the_field(front, key, options, error, field):
    raw = await _export(front)
    with pytest.raises(error, match=field):
        await front.import_tenant(None, _chunks(raw), key, **{"as_tenant": "copy", **options})
    assert "copy" not in front.store.list_tenants()


async def test_a_changed_byte_or_another_key_is_refused_and_nothing_is_written(front, tmp_path):
    raw = await _export(front)
    with pytest.raises(FailedPrecondition, match="SHA-256"):
        await front.import_tenant(None, _chunks(raw.replace(b"Pump 1", b"Pump 7", 1)), KEY, as_tenant="copy")
    with pytest.raises(FailedPrecondition, match="another backup key"):
        await front.import_tenant(None, _chunks(raw), bytes(32), as_tenant="copy")
    with pytest.raises(FailedPrecondition, match="truncated"):
        await front.import_tenant(None, _chunks(raw[:-10]), KEY, as_tenant="copy")
    assert "copy" not in front.store.list_tenants()
    assert not list((tmp_path / "s").glob(".archive-*")) and not list((tmp_path / "s").glob(".import-*"))


async def test_an_unknown_tenant_is_not_exported_as_an_empty_archive(front):
    with pytest.raises(NotFound, match="tenant 'nobody' not found"):
        await _export(front, "nobody")
