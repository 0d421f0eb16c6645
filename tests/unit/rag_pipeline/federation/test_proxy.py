"""Proxy tools: names, sensitive-parameter redaction, per-caller listing that follows reloads."""
from __future__ import annotations

import json
from pathlib import Path

from services.rag_pipeline.federation.proxy import (
    ProxyTools,
    _redact_deep,
    proxy_name,
    scrubbed,
    sensitive_values,
    split_proxy_name,
)
from services.rag_pipeline.federation.remote import RemotePool, ToolInfo
from services.rag_pipeline.federation.sources import SourcesRegistry
from shared.identity import ADMIN, Principal
from shared.redaction import REDACTED, Redactor


def test_names() -> None:
    assert proxy_name("legal", "rag_search") == "legal__rag_search"
    assert split_proxy_name("legal__rag__search") == ("legal", "rag__search")
    assert split_proxy_name("rag_search") is None and split_proxy_name("__x") is None


def test_sensitive_values_are_found_at_any_depth_and_scrubbed() -> None:
    args = {"query": "q", "api_key": "k-123456", "nested": {"auth": {"oauth_token": "o-abcdef"}},
            "list": [{"capability_token": ["c-1", "c-2222"]}], "Bearer": "b-zzzzzz", "user_token": None}
    assert sorted(sensitive_values(args)) == sorted(["k-123456", "o-abcdef", "c-1", "c-2222", "b-zzzzzz"])
    clean = scrubbed(args)
    text = json.dumps(clean)
    assert all(v not in text for v in ("k-123456", "o-abcdef", "c-2222", "b-zzzzzz"))
    assert clean["query"] == "q" and clean["api_key"] == REDACTED


def test_values_echoed_by_a_remote_are_removed_from_what_comes_back() -> None:
    redactor = Redactor(sensitive_values({"user_token": "ut-SECRET-42"}))
    result = {"echo": "you sent ut-SECRET-42", "items": ["ut-SECRET-42", 3], "n": 1}
    assert json.dumps(_redact_deep(result, redactor)).count("ut-SECRET-42") == 0
    assert _redact_deep(result, redactor)["n"] == 1


def test_the_listing_is_per_caller_and_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    path.write_text(json.dumps({"sources": [
        {"id": "legal", "url": "http://127.0.0.1:1/mcp", "groups": ["legal"]},
        {"id": "ops", "kind": "tools", "url": "http://127.0.0.1:2/mcp", "groups": []}]}))
    registry = SourcesRegistry(path, stack_tenants=("acme",))
    proxy = ProxyTools(registry, RemotePool(), lambda ctx: ctx)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert proxy.update("legal", [ToolInfo("add", "adds", schema), ToolInfo("bad name!", "x", schema)])
    assert not proxy.update("legal", [ToolInfo("add", "adds", schema)])       # the same: no change
    proxy.update("ops", [ToolInfo("restart", "restarts", {})])
    proxy.update("gone", [ToolInfo("x", "", {})])                              # not configured: ignored
    alice = Principal("acme", "alice", groups=("legal",))
    bob = Principal("acme", "bob", groups=("sales",))
    admin = Principal("acme", "root", roles=(ADMIN,))
    listed = {t.name: t for t in proxy.tools_for(alice)}
    assert set(listed) == {"legal__add"} and listed["legal__add"].input_schema == schema
    assert listed["legal__add"].description.startswith("[legal]")
    assert proxy.tools_for(bob) == []
    assert {t.name for t in proxy.tools_for(admin)} == {"legal__add", "ops__restart"}
    assert proxy.resolve(alice, "legal__add") is not None
    assert proxy.resolve(bob, "legal__add") is None and proxy.resolve(alice, "ops__restart") is None
    other = Principal("globex", "alice", groups=("legal",))                  # another tenant, same groups
    assert proxy.tools_for(other) == [] and proxy.resolve(other, "legal__add") is None
    assert proxy.tools_for(Principal("globex", "root", roles=(ADMIN,))) == []   # an admin of another tenant
    path.write_text(json.dumps({"sources": [
        {"id": "legal", "url": "http://127.0.0.1:1/mcp", "groups": ["legal", "sales"]}]}))
    registry.reload()
    assert {t.name for t in proxy.tools_for(bob)} == {"legal__add"}            # groups changed
    assert {t.name for t in proxy.tools_for(admin)} == {"legal__add"}          # ops removed
