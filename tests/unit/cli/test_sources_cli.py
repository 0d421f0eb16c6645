"""`nucleus sources add|edit|remove|enable|disable|reload` through the real parsers, on a temporary
sources file, with a real `SourcesRegistry` polling it as the running service does; and the
federation lines of `nucleus status` (one per failing source)."""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

from cli.main import main
from cli.sources_file import source_lines
from services.rag_pipeline.federation.sources import SourcesRegistry, load_sources, status_path
from shared.audit import read_records


@pytest.fixture
def cli(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.delenv("NUCLEUS_RAG_AUDIT_LOG", raising=False)
    monkeypatch.delenv("NUCLEUS_SOURCES_FILE", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    path = tmp_path / "sources.json"

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--data-dir", str(tmp_path), "sources", "--file", str(path), *argv])
        captured = capsys.readouterr()
        return code, " ".join(captured.out.split()), " ".join(captured.err.split())

    run.path, run.audit = path, tmp_path / "audit.jsonl"
    return run


class Service:
    """A `SourcesRegistry` polled in a thread, as the running RAGPipeline polls its file."""

    def __init__(self, path: Path, tenants: set[str]) -> None:
        self.registry = SourcesRegistry(path, stack_tenants=tenants)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.registry.check_for_changes()
            time.sleep(0.05)

    def __enter__(self) -> "Service":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_add_edit_disable_enable_remove_with_validation_exit_codes_and_audit(cli) -> None:
    code, out, _ = cli("add", "legal", "--url", "https://legal.example.com/mcp", "--groups", "legal,research",
                       "--credential-env", "LEGAL_TOKEN", "--reputation", "0.7", "--wait", "0")
    assert code == 0 and "added source legal (https://legal.example.com/mcp)" in out
    code, _, err = cli("add", "legal", "--url", "https://other.example.com/mcp", "--wait", "0")
    assert code == 3 and "already_exists: a source with id 'legal' already exists" in err
    code, _, err = cli("add", "hr", "--url", "ftp://hr.example.com", "--wait", "0")
    assert code == 2 and "url: must be an http:// or https:// URL" in err and "'ftp'" in err
    code, _, err = cli("edit", "legal", "--timeout-s", "500", "--wait", "0")
    assert code == 2 and "timeout_s: must be a number in [0.05, 120], got 500" in err
    code, _, err = cli("add", "tk", "--command", "ticket-mcp --stdio", "--header-env", "X-Key", "--wait", "0")
    assert code == 2 and "--header-env: must be HEADER=ENV_VAR" in err
    code, out, _ = cli("edit", "legal", "--timeout-s", "2", "--credential-file", "secrets/legal.token",
                       "--wait", "0")
    assert code == 0 and "edited source legal: credential_file, timeout_s" in out
    legal = load_sources(cli.path)[0]
    assert (legal.timeout_s, legal.reputation, legal.credential_env, legal.credential_file, legal.groups) == (
        2.0, 0.7, None, "secrets/legal.token", frozenset({"legal", "research"}))   # only the given fields changed
    assert cli("disable", "legal", "--wait", "0")[0] == 0 and not load_sources(cli.path)[0].enabled
    assert cli("enable", "legal", "--wait", "0")[0] == 0 and load_sources(cli.path)[0].enabled
    code, _, err = cli("remove", "nosuch", "--wait", "0")
    assert code == 3 and "not_found: no source 'nosuch'; known: legal" in err
    code, out, _ = cli("add", "tk", "--command", "ticket-mcp --stdio", "--kind", "tools", "--header-env",
                       "X-Api-Key=TK_KEY", "--trusted", "--wait", "0")
    assert code == 0 and load_sources(cli.path)[1].command == ("ticket-mcp", "--stdio")
    assert cli("remove", "legal", "--wait", "0")[0] == 0
    assert [s.id for s in load_sources(cli.path)] == ["tk"]
    records = [r for r in read_records(cli.audit) if r["event"] == "sources"]
    assert [(r["tool"], r["decision"], r["resources"]) for r in records][:3] == [
        ("nucleus sources add", "allow", ["legal"]), ("nucleus sources add", "deny", ["legal"]),
        ("nucleus sources add", "deny", ["hr"])]
    assert len(records) == 10 and all(r["auth_method"] == "cli" and r["user"] for r in records)
    assert "LEGAL_TOKEN" not in cli.audit.read_text() and "TK_KEY" not in cli.audit.read_text()


def test_a_write_is_reloaded_by_the_running_service_and_follows_its_tenant_rule(cli) -> None:
    with Service(cli.path, {"t1", "t2"}) as service:
        code, out, _ = cli("reload", "--wait", "5")                 # a fresh stack: no sources file yet
        assert code == 0 and "service reloaded" in out, out
        code, _, err = cli("add", "legal", "--url", "https://legal.example.com/mcp")
        assert code == 2 and "tenants: required: this stack serves several tenants" in err
        assert not cli.path.exists()                                # refused before anything is written
        code, out, _ = cli("add", "legal", "--url", "https://legal.example.com/mcp", "--tenants", "t1")
        assert code == 0 and re.search(r"service reloaded: configuration version \d+, 1 sources", out), out
        assert service.registry.current().get("legal").tenants == {"t1"}
        assert cli("disable", "legal")[0] == 0
        assert not service.registry.current().get("legal").enabled   # the change took effect


def test_reload_on_a_fresh_stack_answers_at_once(cli) -> None:
    """Issue 33 item 7: with no sources file the service never published a status, so the CLI
    waited its whole --wait and said no RAGPipeline had reloaded it."""
    with Service(cli.path, {"demo"}):
        started = time.monotonic()
        code, out, _ = cli("reload", "--wait", "10")
        elapsed = time.monotonic() - started
    assert code == 0 and "service reloaded: configuration version" in out and "no running" not in out
    assert elapsed < 5, f"the handshake took {elapsed:.1f}s"
    assert json.loads(status_path(cli.path).read_text())["sources"] == []
    code, out, _ = cli("reload", "--wait", "0.3")                   # and nobody answers when nobody runs
    assert code == 0 and "no running RAGPipeline reloaded it" in out


def test_status_has_one_line_per_failing_source(tmp_path: Path) -> None:
    path = tmp_path / "sources.json"
    rows = [{"id": "ok1", "url": "https://a.example.com", "status": {"state": "connected"}},
            {"id": "down", "url": "https://b.example.com", "status": {"state": "error",
                                                                     "last_error": "connection: refused"}},
            {"id": "nocred", "url": "https://c.example.com", "status": {"state": "action_required",
                                                                       "last_error": "credential missing"}},
            {"id": "off", "url": "https://d.example.com", "enabled": False,
             "status": {"state": "locked", "last_error": "disabled in the sources file"}}]
    path.write_text(json.dumps({"sources": [{k: v for k, v in r.items() if k != "status"} for r in rows]}))
    status_path(path).write_text(json.dumps({"version": 3, "last_error": "", "sources": rows}))
    lines = source_lines(path)
    assert lines[0].startswith("federation: 4 remote sources")
    failing = [line for line in lines[1:] if line.strip().startswith("source ")]
    assert len(failing) == 2
    assert "source down" in failing[0] and "error" in failing[0] and "connection: refused" in failing[0]
    assert "source nocred" in failing[1] and "action_required" in failing[1] and "credential missing" in failing[1]
    assert not any("source off" in line or "source ok1" in line for line in lines)   # disabled and fine: no line
