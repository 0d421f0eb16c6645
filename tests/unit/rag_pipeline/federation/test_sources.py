"""The sources file: validation naming file/entry/field, credentials, visibility, reload semantics."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from services.rag_pipeline.federation.sources import (
    Source,
    SourcesFileError,
    SourcesRegistry,
    load_sources,
    parse_source,
    parse_sources,
    read_status_file,
    reload_request_path,
    write_sources,
)
from shared.identity import ADMIN, Principal

GOOD = {"id": "legal", "kind": "rag", "url": "https://legal.example.com/mcp", "credential_env": "LEGAL_TOKEN",
        "groups": ["legal"], "compliance": "internal", "timeout_s": 3, "reputation": 0.7}


def write(path: Path, sources: list) -> None:
    path.write_text(json.dumps({"sources": sources}))


def test_a_good_entry_parses() -> None:
    s = parse_source(GOOD)
    assert (s.id, s.kind, s.url, s.groups, s.timeout_s, s.reputation) == (
        "legal", "rag", "https://legal.example.com/mcp", frozenset({"legal"}), 3.0, 0.7)
    assert s.command is None and s.enabled and not s.allow_private_network


@pytest.mark.parametrize("field,value,words", [
    ("id", "Legal-Docs", "lower-case"),
    ("id", "x" * 33, "1-32"),
    ("kind", "search", "rag, tools"),
    ("url", "ftp://x.example/mcp", "http"),
    ("url", "https://user:pw@x.example/mcp", "credentials"),
    ("timeout_s", 0, "timeout_s"),
    ("timeout_s", "3", "number"),
    ("reputation", 1.5, "[0, 1]"),
    ("groups", "legal", "list of group names"),
    ("enabled", "yes", "true or false"),
    ("credential_env", "sk-abcdef 123", "name of an environment variable"),
    ("max_response_bytes", 10, "max_response_bytes"),
])
def test_each_bad_field_is_named_with_file_and_entry(field: str, value: object, words: str) -> None:
    entry = {**GOOD, field: value}
    with pytest.raises(SourcesFileError) as info:
        parse_sources({"sources": [{**GOOD, "id": "first"}, entry]}, file="conf/sources.json")
    message = str(info.value)
    assert message.startswith("conf/sources.json: sources[1]")
    assert f"field '{field}'" in message and words in message
    assert info.value.field_name == field


@pytest.mark.parametrize("field", ["credential", "token", "api_key", "password"])
def test_an_inline_secret_is_refused_without_echoing_it(field: str) -> None:
    with pytest.raises(SourcesFileError) as info:
        parse_source({**GOOD, field: "s3cr3t-value-xyz"}, file="s.json")
    assert f"field '{field}'" in str(info.value) and "credential_env" in str(info.value)
    assert "s3cr3t-value-xyz" not in str(info.value)


def test_exactly_one_transport_and_unknown_fields() -> None:
    with pytest.raises(SourcesFileError, match="exactly one of 'url'"):
        parse_source({**GOOD, "command": ["srv"]})
    no_transport = {k: v for k, v in GOOD.items() if k != "url"}
    with pytest.raises(SourcesFileError, match="exactly one of 'url'"):
        parse_source(no_transport)
    with pytest.raises(SourcesFileError, match="field 'colour': unknown field"):
        parse_source({**GOOD, "colour": "red"})
    with pytest.raises(SourcesFileError, match="duplicate id"):
        parse_sources({"sources": [GOOD, GOOD]})
    stdio = parse_source({**no_transport, "command": ["python", "-m", "srv"]})
    assert stdio.command == ("python", "-m", "srv") and stdio.transport == "stdio"


def test_broken_json_names_the_file_and_position(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    path.write_text('{"sources": [')
    with pytest.raises(SourcesFileError, match=r"sources.json: is not valid JSON: .* line 1"):
        load_sources(path)
    assert load_sources(tmp_path / "missing.json") == ()


def test_credential_is_read_at_call_time_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEGAL_TOKEN", "tok-first-value")
    s = parse_source(GOOD)
    assert s.credential() == "tok-first-value"
    monkeypatch.setenv("LEGAL_TOKEN", "tok-rotated-value")
    assert s.credential() == "tok-rotated-value"
    assert "tok-rotated" not in repr(s) and "tok-rotated" not in str(s) and "env:LEGAL_TOKEN" in repr(s)
    (tmp_path / "tok").write_text("file-token-abc\n")
    f = parse_source({**{k: v for k, v in GOOD.items() if k != "credential_env"}, "credential_file": "tok"},
                     base_dir=str(tmp_path))
    assert f.credential() == "file-token-abc" and "file-token-abc" not in repr(f)
    monkeypatch.delenv("LEGAL_TOKEN")
    assert s.credential() is None


def test_visibility_by_groups_admins_and_disabled() -> None:
    from services.rag_pipeline.federation.sources import SourcesConfig

    cfg = SourcesConfig(sources=(
        parse_source(GOOD), parse_source({**GOOD, "id": "hr", "groups": ["hr"]}),
        parse_source({**GOOD, "id": "admins_only", "groups": []}),
        parse_source({**GOOD, "id": "off", "enabled": False})), default_tenants=frozenset({"acme"}))
    alice = Principal("acme", "alice", groups=("legal",))
    bob = Principal("acme", "bob", groups=("sales",))
    admin = Principal("acme", "root", roles=(ADMIN,))
    assert [s.id for s in cfg.visible_to(alice)] == ["legal"]
    assert cfg.visible_to(bob) == [] and cfg.visible_to(None) == []
    assert [s.id for s in cfg.visible_to(admin)] == ["legal", "hr", "admins_only"]
    assert cfg.visible(bob, "legal") is None and cfg.get("off") is not None
    assert cfg.visible_to(Principal("globex", "alice", groups=("legal",))) == []     # tenant first
    assert cfg.visible_to(Principal("globex", "root", roles=(ADMIN,))) == []
    assert [s.id for s in cfg.visible_to(None, "acme")] == ["legal", "hr", "admins_only"]   # auth off, its tenant


def test_reload_keeps_the_last_good_config_and_records_the_error(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    write(path, [GOOD])
    reg = SourcesRegistry(path, stack_tenants=("acme",))
    first = reg.current()
    assert [s.id for s in first.sources] == ["legal"] and reg.last_error == ""
    seen: list[int] = []
    reg.subscribe(lambda cfg: seen.append(cfg.version))

    write(path, [GOOD, {**GOOD, "id": "hr", "reputation": 7}])
    result = reg.reload()
    assert not result.ok and "sources[1] (id 'hr'): field 'reputation'" in result.error
    assert str(path) in reg.last_error
    assert reg.current() is first and seen == []            # old config still serving
    status = read_status_file(path)
    assert status is not None and "reputation" in status["last_error"] and status["version"] == first.version

    write(path, [GOOD, {**GOOD, "id": "hr", "groups": ["hr"]}])
    result = reg.reload()
    assert result.ok and result.changed and reg.last_error == ""
    assert [s.id for s in reg.current().sources] == ["legal", "hr"] and seen == [reg.current().version]
    assert [s.id for s in first.sources] == ["legal"]           # a held snapshot never changes
    assert reg.reload().changed is False                        # same file: nothing to tell


def test_missing_file_is_no_sources_and_status_is_per_source(tmp_path: Path) -> None:
    reg = SourcesRegistry(tmp_path / "none.json", stack_tenants=("acme",))
    assert reg.current().sources == () and reg.last_error == ""
    write(reg.path, [GOOD, {**GOOD, "id": "off", "enabled": False}])
    reg.reload()
    assert reg.status("legal").state == "unknown" and reg.status("off").state == "locked"
    reg.set_status("legal", state="connected", contract="seed002", tools=("rag_search",))
    write(reg.path, [GOOD, {**GOOD, "id": "off", "enabled": False, "reputation": 0.1}])
    reg.reload()
    assert reg.status("legal").state == "connected"           # unchanged entry keeps its status
    write(reg.path, [{**GOOD, "timeout_s": 9}])
    reg.reload()
    assert reg.status("legal").state == "unknown" and "off" not in reg.statuses()


def test_watching_picks_up_edits_and_reload_requests(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"

    async def run() -> None:
        reg = SourcesRegistry(path, poll_s=0.05, stack_tenants=("acme",))
        reg.start_watching()
        write(path, [GOOD])
        for _ in range(100):
            await asyncio.sleep(0.05)
            if reg.current().sources:
                break
        assert [s.id for s in reg.current().sources] == ["legal"]
        before = reg.snapshot()["reloads"]
        reload_request_path(path).write_text("")
        for _ in range(100):
            await asyncio.sleep(0.05)
            if reg.snapshot()["reloads"] > before:
                break
        assert reg.snapshot()["reloads"] > before
        await reg.stop()

    asyncio.run(run())


def test_write_sources_round_trips_and_refuses_invalid(tmp_path: Path) -> None:
    path = tmp_path / "d" / "sources.json"
    sources = (parse_source(GOOD), parse_source({**GOOD, "id": "t", "kind": "tools", "groups": []}))
    write_sources(path, sources)
    assert load_sources(path) == tuple(Source(**{**s.__dict__, "base_dir": str(path.parent)}) for s in sources)
    with pytest.raises(SourcesFileError):
        write_sources(path, [Source(id="BAD", url="https://x.example/mcp")])
    assert [s.id for s in load_sources(path)] == ["legal", "t"]
