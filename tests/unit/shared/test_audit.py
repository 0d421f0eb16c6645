"""The audit trail: one JSON line per decision, with who/what/why and never a secret."""
from __future__ import annotations

from shared.audit import AuditEvent, AuditLog, read_records
from shared.identity import Principal


def test_records_are_json_lines_with_principal_resources_and_decision(tmp_path):
    path = tmp_path / "sub" / "audit.jsonl"
    audit = AuditLog(path)
    who = Principal(tenant_id="acme", user_id="bob", groups=("hr",), auth_method="api_key", key_id="k-platform",
                    extra={"acting_for": "1"})
    audit.record(AuditEvent.for_principal(who, event="tool", decision="allow", tool="rag_search",
                                          resources=["hr-policies"], entries=["travel#0", "travel#1"]))
    audit.record(AuditEvent.for_principal(who, event="tool", decision="deny", tool="rag_get_raw_results",
                                          reason="unauthorized_source: legal", resources=["legal"]))
    first, second = read_records(path)
    assert first["tenant"] == "acme" and first["user"] == "bob" and first["key_id"] == "k-platform"
    assert first["acting_for"] is True and first["entries"] == ["travel#0", "travel#1"]
    assert first["ts"].endswith("Z") and first["decision"] == "allow"
    assert second["decision"] == "deny" and second["reason"] == "unauthorized_source: legal"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_secrets_in_free_text_are_redacted(tmp_path):
    path = tmp_path / "audit.jsonl"
    AuditLog(path).record(AuditEvent(event="tool", decision="deny", reason="Bearer nrk_abcdefghijklmnop failed",
                                     notes=("https://x/documents/a?sig=SIGNATUREVALUE123",)))
    text = path.read_text()
    assert "nrk_abcdefghijklmnop" not in text and "SIGNATUREVALUE123" not in text


def test_long_id_lists_are_cut_with_a_count(tmp_path):
    path = tmp_path / "audit.jsonl"
    AuditLog(path).record(AuditEvent(event="tool", decision="allow", entries=tuple(f"e#{i}" for i in range(250))))
    (record,) = read_records(path)
    assert len(record["entries"]) == 201 and record["entries"][-1] == "... 50 more"


def test_no_path_means_no_file_and_no_error(tmp_path):
    AuditLog(None).record(AuditEvent(event="tool", decision="allow"))
    assert list(tmp_path.iterdir()) == []
