"""Editing the sources file (federation/admin.py): who may change which field of which source,
validation, atomic writes, the lock that keeps concurrent writers' changes, the audit line."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from services.rag_pipeline.federation.admin import SourcesEditor, TENANT_ADMIN_FIELDS, operator_principal
from services.rag_pipeline.federation.sources import OPERATOR_FIELDS, load_sources
from shared.audit import AuditLog, read_records
from shared.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from shared.identity import ADMIN, Principal

ROOT = Path(__file__).resolve().parents[4]
T1_ADMIN = Principal(tenant_id="t1", user_id="admin1", roles=(ADMIN,))
T2_ADMIN = Principal(tenant_id="t2", user_id="admin2", roles=(ADMIN,))
ALICE = Principal(tenant_id="t1", user_id="alice", groups=("eng",))
OPERATOR = operator_principal("ops")
#: A value for each operator-only field that the parser would accept from the operator.
OPERATOR_VALUES = {"command": ["ticket-mcp", "--stdio"], "credential_env": "T1_TOKEN",
                   "credential_file": "secrets/t1.token", "allow_private_network": True, "trusted": True,
                   "header_env": {"X-Api-Key": "T1_KEY"}, "max_response_bytes": 4096,
                   "origin": "registry:corp/io.example/x@1.0.0"}


def entry(sid: str, **extra) -> dict:
    return {"id": sid, "url": f"https://{sid}.example.com/mcp", "groups": ["eng"], **extra}


@pytest.fixture
def files(tmp_path: Path):
    path = tmp_path / "sources.json"
    audit = tmp_path / "audit.jsonl"
    path.write_text(json.dumps({"sources": [
        entry("t1_docs", tenants=["t1"]),
        entry("t2_docs", tenants=["t2"], credential_env="T2_TOKEN"),
        entry("shared", tenants=["t1", "t2"]),
        entry("t1_ops", tenants=["t1"], credential_env="T1_OPS_TOKEN")]}))
    editor = SourcesEditor(path, stack_tenants={"t1", "t2"}, audit=AuditLog(audit))
    return path, audit, editor


def test_the_operator_table_covers_every_field() -> None:
    assert set(OPERATOR_VALUES) == set(OPERATOR_FIELDS)
    assert not set(TENANT_ADMIN_FIELDS) & set(OPERATOR_FIELDS)


@pytest.mark.parametrize("field", sorted(OPERATOR_FIELDS))
def test_every_operator_only_field_is_refused_for_a_tenant_admin(files, field: str) -> None:
    path, audit, editor = files
    before = path.read_bytes()
    with pytest.raises(PermissionDenied, match=f"field '{field}' is operator-only"):
        editor.add(T1_ADMIN, entry("new_one", **{field: OPERATOR_VALUES[field]}))
    with pytest.raises(PermissionDenied, match=f"field '{field}' is operator-only"):
        editor.edit(T1_ADMIN, "t1_docs", {field: OPERATOR_VALUES[field]})
    with pytest.raises(PermissionDenied, match=f"field '{field}' is operator-only"):
        editor.edit(T1_ADMIN, "t1_ops", {}, clear=[field])
    assert path.read_bytes() == before                              # nothing written
    denied = [r for r in read_records(audit) if r["decision"] == "deny"]
    assert len(denied) == 3 and all(r["event"] == "sources" and r["user"] == "admin1" for r in denied)
    assert all("fields=" in " ".join(r["notes"]) and field in " ".join(r["notes"]) for r in denied[:2])
    text = audit.read_text()
    for value in ("T1_TOKEN", "secrets/t1.token", "T1_KEY", "ticket-mcp"):
        assert value not in text                                    # field names only, never values
    # the operator may set each of them (the same values)
    edited = editor.edit(OPERATOR, "t1_docs", {field: OPERATOR_VALUES[field]})
    assert edited.to_json()[field] == OPERATOR_VALUES[field] and load_sources(path)[0] == edited


def test_a_tenant_admin_adds_only_for_its_own_tenant_with_https_and_no_headers_identity(files) -> None:
    path, _, editor = files
    with pytest.raises(PermissionDenied, match="'tenants' is operator-only"):
        editor.add(T1_ADMIN, entry("x1", tenants=["t2"]))
    with pytest.raises(PermissionDenied, match="'tenants' is operator-only"):
        editor.add(T1_ADMIN, entry("x1", tenants=["t1", "t2"]))
    with pytest.raises(PermissionDenied, match="'identity': 'headers'.*operator-only"):
        editor.add(T1_ADMIN, entry("x1", identity="headers"))
    with pytest.raises(InvalidArgument, match="url: a tenant admin's source must be an https://"):
        editor.add(T1_ADMIN, entry("x1", url="http://x1.example.com/mcp"))
    for internal in ("https://127.0.0.1:8443/mcp", "https://localhost/mcp", "https://10.1.2.3/mcp",
                     "https://[::1]/mcp", "https://169.254.169.254/latest", "https://2130706433/mcp",
                     "https://127.1/mcp"):
        with pytest.raises(PermissionDenied, match="'url': a loopback, private or link-local address"):
            editor.add(T1_ADMIN, entry("x1", url=internal))
    added = editor.add(T1_ADMIN, entry("x1", identity="none", credential_secret="x1.token", reputation=0.7,
                                       timeout_s=2, name="X one", compliance="internal", enabled=False))
    assert added.tenants == {"t1"} and added.identity == "none" and not added.enabled
    assert load_sources(path)[-1] == added
    (path.parent / "secrets" / "t1").mkdir(parents=True)
    (path.parent / "secrets" / "t1" / "x1.token").write_text("tenant-secret\n")
    assert load_sources(path)[-1].credential() == "tenant-secret"     # the tenant's own namespace


def test_another_tenants_source_is_invisible_and_untouchable(files) -> None:
    path, _, editor = files
    before = path.read_bytes()
    t2_before = {s.id: s for s in load_sources(path)}["t2_docs"]

    def message(call) -> str:
        with pytest.raises(NotFound) as caught:
            call()
        return str(caught.value)

    for sid in ("t2_docs", "no_such"):
        texts = {message(lambda: editor.edit(T1_ADMIN, sid, {"reputation": 0.9})),
                 message(lambda: editor.remove(T1_ADMIN, sid)),
                 message(lambda: editor.set_enabled(T1_ADMIN, sid, False))}
        assert texts == {f"no source {sid!r} among your tenant's sources"}      # the same answer for both
    taken = []
    for sid in ("t2_docs", "t1_docs"):                  # another tenant's id, and one of its own
        with pytest.raises(AlreadyExists) as caught:
            editor.add(T1_ADMIN, entry(sid))
        taken.append(str(caught.value).replace(sid, "X"))
    assert taken[0] == taken[1] and "t2" not in taken[0]
    assert path.read_bytes() == before
    with pytest.raises(PermissionDenied, match="shared with other tenants"):
        editor.edit(T1_ADMIN, "shared", {"reputation": 0.9})
    with pytest.raises(PermissionDenied, match="admin role"):
        editor.set_enabled(ALICE, "t1_docs", False)
    # its own: every change goes through
    editor.edit(T1_ADMIN, "t1_docs", {"reputation": 0.9, "groups": ["eng", "ops"]})
    editor.set_enabled(T1_ADMIN, "t1_docs", False)
    by_id = {s.id: s for s in load_sources(path)}
    assert by_id["t1_docs"].reputation == 0.9 and not by_id["t1_docs"].enabled
    assert by_id["t2_docs"] == t2_before
    editor.remove(T1_ADMIN, "t1_docs")
    assert "t1_docs" not in {s.id for s in load_sources(path)}


def test_a_tenant_admin_cannot_move_an_operator_credential_elsewhere(files) -> None:
    path, _, editor = files
    with pytest.raises(PermissionDenied, match="'url': this source carries settings the operator made "
                                               r"\(credential_env\)"):
        editor.edit(T1_ADMIN, "t1_ops", {"url": "https://attacker.example.com/mcp"})
    edited = editor.edit(T1_ADMIN, "t1_ops", {"reputation": 0.2, "identity": "none"})
    assert edited.credential_env == "T1_OPS_TOKEN" and edited.reputation == 0.2     # the operator's field stays
    shown = editor.readable(T1_ADMIN, edited)
    assert shown["credential_env"] == "(set by the operator)" and shown["reputation"] == 0.2
    assert editor.readable(OPERATOR, edited)["credential_env"] == "T1_OPS_TOKEN"
    moved = editor.edit(OPERATOR, "t1_ops", {"url": "https://ops2.example.com/mcp"})
    assert moved.url == "https://ops2.example.com/mcp"


def test_edit_changes_only_the_given_fields_and_validates_them(files) -> None:
    path, _, editor = files
    before = {s.id: s for s in load_sources(path)}
    with pytest.raises(InvalidArgument, match=r"reputation: must be a number in \[0, 1\], got 7"):
        editor.edit(OPERATOR, "t1_docs", {"reputation": 7})
    with pytest.raises(InvalidArgument, match="id: a source's id cannot be changed"):
        editor.edit(OPERATOR, "t1_docs", {"id": "renamed"})
    with pytest.raises(InvalidArgument, match="clear: unknown field 'colour'"):
        editor.edit(OPERATOR, "t1_docs", {}, clear=["colour"])
    with pytest.raises(InvalidArgument, match="changes: give at least one field"):
        editor.edit(OPERATOR, "t1_docs", {})
    with pytest.raises(InvalidArgument, match="token: secrets are never written"):
        editor.edit(OPERATOR, "t1_docs", {"token": "s3cr3t-value"})
    edited = editor.edit(OPERATOR, "t1_ops", {"credential_file": "secrets/ops.token", "timeout_s": 9})
    assert edited.credential_env is None and edited.credential_file == "secrets/ops.token"   # one credential kind
    after = {s.id: s for s in load_sources(path)}
    assert after["t1_ops"].groups == before["t1_ops"].groups and after["t1_ops"].timeout_s == 9
    assert {k: v for k, v in after.items() if k != "t1_ops"} == {k: v for k, v in before.items() if k != "t1_ops"}
    with pytest.raises(NotFound, match="no source 'nope'; known: t1_docs, t2_docs, shared, t1_ops"):
        editor.remove(OPERATOR, "nope")


def test_the_stacks_tenant_rule_and_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    several = SourcesEditor(path, stack_tenants={"t1", "t2"})
    with pytest.raises(InvalidArgument, match="tenants: required: this stack serves several tenants"):
        several.add(OPERATOR, entry("a"))
    assert not path.exists()
    one = SourcesEditor(path, stack_tenants={"acme"})
    one.add(OPERATOR, entry("a"))
    acme = Principal(tenant_id="acme", user_id="root", roles=(ADMIN,))
    one.edit(acme, "a", {"reputation": 0.1})                        # no tenants named: the stack's one tenant's
    path.write_text('{"sources": [{"id": "a", "url": "https://a.example.com/mcp", "reputation": 3}]}')
    with pytest.raises(InvalidArgument, match="sources file: has an error.*field 'reputation'"):
        one.edit(OPERATOR, "a", {"reputation": 0.2})
    with pytest.raises(InvalidArgument, match="has an error.*operator sees the details"):
        several.edit(T1_ADMIN, "a", {"reputation": 0.2})            # another tenant's entry may be at fault
    assert "3" in path.read_text()                                   # nothing written


def test_concurrent_writers_keep_each_others_changes(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    editor = SourcesEditor(path, stack_tenants={"t1"})
    editor.add(OPERATOR, entry("both"))
    script = (f"from services.rag_pipeline.federation.admin import SourcesEditor, operator_principal\n"
              f"e = SourcesEditor({str(path)!r}, stack_tenants={{'t1'}})\n"
              f"for i in range(12):\n"
              f"    e.add(operator_principal('p'), {{'id': f'proc_{{i}}', 'url': 'https://p.example.com/mcp'}})\n"
              f"e.edit(operator_principal('p'), 'both', {{'timeout_s': 7}})\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)

    def worker(n: int) -> None:
        for i in range(12):
            editor.add(T1_ADMIN, entry(f"thread{n}_{i}"))
        editor.edit(T1_ADMIN, "both", {"reputation": 0.9} if n == 0 else {"name": "both of them"})

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert proc.wait(timeout=60) == 0
    by_id = {s.id: s for s in load_sources(path)}
    assert len(by_id) == 1 + 12 + 24
    both = by_id["both"]
    assert (both.timeout_s, both.reputation, both.name) == (7.0, 0.9, "both of them")   # three writers, one entry
