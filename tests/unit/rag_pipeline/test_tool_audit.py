"""One `event: tool` audit line per MCP tool call, from one middleware, whatever answers it."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from services.rag_pipeline.tools.calls import Call, audit_call, tool_audit_middleware
from shared.audit import AuditLog, read_records
from shared.errors import ResourceExhausted
from shared.identity import Principal

ALICE = Principal("acme", "alice", ("eng",), key_id="k-alice")


def ctx(name: object) -> SimpleNamespace:
    return SimpleNamespace(method="tools/call", params={"name": name, "arguments": {"user_token": "ut-SECRET"}})


async def test_a_tool_with_its_own_record_a_refusal_an_error_result_and_a_rate_limit_each_leave_one_line(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    middleware = tool_audit_middleware(log, lambda c: ALICE)

    async def rich(c):                         # a RAG tool: hands over its richer record
        call = Call("rag_search", principal=ALICE)
        audit_call(log, call, "allow", resources=["wiki"], entries=["e1"])
        audit_call(log, call, "allow", resources=["wiki"], entries=["e1", "e2"])     # the last one counts
        return {"content": []}

    async def error_result(c):
        return {"isError": True, "content": [{"type": "text", "text": "invalid_argument: top_k must be 1-100"}]}

    async def limited(c):
        raise ResourceExhausted("rate limit of tool calls exceeded")

    await middleware(ctx("rag_search"), rich)
    await middleware(ctx("search_and_rank"), error_result)
    with pytest.raises(ResourceExhausted):
        await middleware(ctx("record_feedback"), limited)
    await middleware(ctx(42), error_result)                      # a non-string tool name
    await middleware(SimpleNamespace(method="tools/list", params={}), error_result)   # not a tool call
    records = read_records(tmp_path / "audit.jsonl")
    assert [(r["tool"], r["decision"]) for r in records] == [
        ("rag_search", "allow"), ("search_and_rank", "deny"), ("record_feedback", "deny"), ("(no tool name)", "deny")]
    assert records[0]["entries"] == ["e1", "e2"] and records[1]["reason"].startswith("invalid_argument")
    assert records[2]["reason"].startswith("rate_limited") and all(r["user"] == "alice" for r in records)
    assert "ut-SECRET" not in (tmp_path / "audit.jsonl").read_text()


def test_outside_a_tool_call_a_record_is_written_at_once(tmp_path: Path):
    log = AuditLog(tmp_path / "audit.jsonl")
    audit_call(log, Call("GET /documents", principal=ALICE), "deny", "unavailable: down")
    assert [r["tool"] for r in read_records(tmp_path / "audit.jsonl")] == ["GET /documents"]
