"""Federation, sources side, with real processes: RAGPipeline (auth on, its own sources file)
federating an independent RAG MCP server (tests/support/foreign_rag_server.py, official SDK,
protected by its own token). Proxy tools per caller group, username overwrite, sensitive
parameters kept out of logs / traces / audit, admin-only source tools, reload semantics
(broken file, 8 concurrent clients, tool list following the file)."""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.auth.api_keys import hash_key
from tests.support import background
from tests.support.mcp_clients import error_text, http_client, structured
from tests.support.processes import stop, wait_ready

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
FOREIGN_TOKEN_ENV = "NUCLEUS_ITEST_FOREIGN_TOKEN"


def _wait_ready(path: Path, proc: subprocess.Popen, what: str, timeout_s: float = 90.0) -> dict:
    return wait_ready(path, proc, what, timeout_s)


_stop = stop


class Fed:
    def __init__(self, data: Path, foreign_url: str, keys: dict[str, str], sources: Path, log: Path) -> None:
        self.data, self.foreign_url, self.keys, self.sources, self.log = data, foreign_url, keys, sources, log
        self.mcp_url = ""
        self.audit = data / "audit.jsonl"
        self.traces = data / "traces"

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}

    def entry(self, sid: str, groups: list[str], **extra) -> dict:
        return {"id": sid, "kind": "rag", "url": self.foreign_url, "credential_env": FOREIGN_TOKEN_ENV,
                "groups": groups, "timeout_s": 5, "reputation": 0.6, **extra}

    def write(self, entries: list[dict] | str) -> None:
        text = entries if isinstance(entries, str) else json.dumps({"sources": entries})
        tmp = self.sources.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.sources)


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    data = tmp_path_factory.mktemp("federation")
    token = "ft-" + secrets.token_urlsafe(16)
    env = {**os.environ, FOREIGN_TOKEN_ENV: token, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    foreign_ready = data / "foreign.json"
    foreign = subprocess.Popen([sys.executable, "-m", "tests.support.foreign_rag_server", "--ready-file",
                                str(foreign_ready), "--token-env", FOREIGN_TOKEN_ENV, "--score", "bm25"],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [foreign]
    try:
        foreign_url = _wait_ready(foreign_ready, foreign, "foreign RAG server")["url"]
        keys = {who: f"nrk_{who}_{secrets.token_urlsafe(18)}" for who in ("alice", "bob", "root")}
        auth = {"version": 1, "api_keys": [
            {"key_id": "k-alice", "sha256": hash_key(keys["alice"]), "tenant": "acme", "user": "alice",
             "groups": ["legal"]},
            {"key_id": "k-bob", "sha256": hash_key(keys["bob"]), "tenant": "acme", "user": "bob",
             "groups": ["sales"]},
            {"key_id": "k-root", "sha256": hash_key(keys["root"]), "tenant": "acme", "user": "root",
             "groups": [], "roles": ["admin"]}]}
        auth_path = data / "auth.json"
        auth_path.write_text(json.dumps(auth))
        f = Fed(data, foreign_url, keys, data / "sources.json", data / "rag_pipeline.log")
        rag_ready = data / "rag.json"
        rag_env = {**env, "NUCLEUS_DATA_DIR": str(data), "NUCLEUS_SOURCES_FILE": str(f.sources),
                   "NUCLEUS_RAG_REQUIRE_AUTH": "1", "NUCLEUS_RAG_AUTH_CONFIG": str(auth_path),
                   "NUCLEUS_RAG_AUDIT_LOG": str(f.audit), "NUCLEUS_RAG_LOG_LEVEL": "DEBUG",
                   "NUCLEUS_RAG_RATE_LIMIT_PER_S": "0",
                   "NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET": "127.0.0.1:9", "NUCLEUS_RAG_LLM_TARGET": "127.0.0.1:9",
                   "NUCLEUS_OTEL_TRACE_DIR": str(f.traces), "OTEL_BSP_SCHEDULE_DELAY": "100",
                   "NUCLEUS_OTEL_CAPTURE_CONTENT": "true"}
        rag_env.pop(FOREIGN_TOKEN_ENV)
        rag_env["NUCLEUS_ITEST_SOURCE_TOKEN"] = token         # RAGPipeline knows the token under its own name
        f.write([f.entry("foreign", ["legal"], credential_env="NUCLEUS_ITEST_SOURCE_TOKEN")])
        log_file = open(f.log, "wb")
        rag = subprocess.Popen([sys.executable, "-m", "services.rag_pipeline.main", "--grpc-port", "0",
                                "--mcp-port", "0", "--ready-file", str(rag_ready)],
                               cwd=ROOT, env=rag_env, stdout=log_file, stderr=subprocess.STDOUT)
        procs.append(rag)
        f.mcp_url = _wait_ready(rag_ready, rag, "rag_pipeline")["mcp"]
        f.token = token
        yield f
    finally:
        def stop_processes() -> None:
            for p in reversed(procs):
                _stop(p)
        background.stop_in_background("federation-sources", stop_processes)   # while the next module runs


def entry(fed: Fed, sid: str, groups: list[str], **extra) -> dict:
    return fed.entry(sid, groups, credential_env="NUCLEUS_ITEST_SOURCE_TOKEN", **extra)


async def status(fed: Fed) -> dict:
    async with http_client(fed.mcp_url, fed.headers("root")) as client:
        return structured(await client.call_tool("rag_sources_status", {}))


async def wait_for(fed: Fed, predicate, timeout_s: float = 30.0) -> dict:
    end = time.monotonic() + timeout_s
    last: dict = {}
    while time.monotonic() < end:
        last = await status(fed)
        if predicate(last):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"condition not met; last status {last}")


def by_id(st: dict) -> dict[str, dict]:
    return {s["id"]: s for s in st["sources"]}


async def tool_names(fed: Fed, who: str) -> set[str]:
    async with http_client(fed.mcp_url, fed.headers(who)) as client:
        return {t.name for t in (await client.list_tools()).tools}


@pytest.fixture(scope="module")
async def connected(fed):
    await wait_for(fed, lambda st: by_id(st).get("foreign", {}).get("state") == "connected")
    return fed


async def test_the_probe_detects_the_contract_with_the_sources_own_credential(connected):
    foreign = by_id(await status(connected))["foreign"]
    assert foreign["contract"] == "seed000+seed002" and "rag_search" in foreign["tools"]
    assert foreign["last_error"] == ""


async def test_proxy_tools_are_listed_and_callable_only_in_the_sources_groups(connected):
    alice, bob = await tool_names(connected, "alice"), await tool_names(connected, "bob")
    assert {"foreign__rag_search", "foreign__add", "foreign__echo"} <= alice
    assert not any(name.startswith("foreign__") for name in bob)
    assert "rag_search" in bob                                       # our own tools stay
    async with http_client(connected.mcp_url, connected.headers("alice")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools["foreign__add"].input_schema["properties"]) == {"a", "b"}
        assert structured(await client.call_tool("foreign__add", {"a": 2, "b": 40}))["sum"] == 42
    async with http_client(connected.mcp_url, connected.headers("bob")) as client:
        refused = error_text(await client.call_tool("foreign__add", {"a": 2, "b": 40}))
        unknown = error_text(await client.call_tool("nosuch__add", {"a": 2, "b": 40}))
    assert refused.replace("foreign__add", "X") == unknown.replace("nosuch__add", "X")   # nothing leaks


async def test_a_forged_username_is_overwritten_with_the_verified_user(connected):
    async with http_client(connected.mcp_url, connected.headers("alice")) as client:
        echoed = structured(await client.call_tool("foreign__echo", {"username": "root", "message": "hi"}))
    assert echoed["username"] == "alice" and echoed["message"] == "hi"


async def test_a_sensitive_parameter_reaches_the_remote_but_no_log_trace_or_audit(connected):
    secret = "sens-" + secrets.token_hex(12)
    async with http_client(connected.mcp_url, connected.headers("alice")) as client:
        echoed = structured(await client.call_tool("foreign__echo", {"message": "m", "api_key": secret}))
        failed = await client.call_tool("foreign__add", {"a": "x", "b": 1, "user_token": secret})
    import hashlib
    assert echoed["api_key_sha256"] == hashlib.sha256(secret.encode()).hexdigest()[:16]   # it was passed on
    assert failed.is_error and secret not in error_text(failed)
    await asyncio.sleep(1.5)                                    # span batches are flushed every 100 ms
    audit = connected.audit.read_text()
    assert '"event":"remote"' in audit and '"resources":["foreign"]' in audit   # the calls were audited
    traces = "".join(p.read_text() for p in connected.traces.glob("*.jsonl*"))
    spans = [json.loads(line) for line in traces.splitlines() if line.strip()]
    client = [s for s in spans if s["kind"] == "CLIENT" and s["attributes"].get("nucleus.source.id") == "foreign"
              and s["attributes"].get("gen_ai.tool.name") == "echo"]
    assert client, "no CLIENT span for the remote call"
    server = [s for s in spans if s["kind"] == "SERVER" and s["trace_id"] == client[-1]["trace_id"]]
    assert server, "the remote call's span is not in the tool call's trace"
    trace_id = echoed["traceparent"].split("-")[1]              # W3C traceparent went in _meta
    assert trace_id in {s["trace_id"] for s in client}
    logs = connected.log.read_text(errors="replace")
    for name, text in (("audit", audit), ("traces", traces), ("log", logs)):
        assert secret not in text, f"the sensitive value reached the {name}"
    assert connected.token not in logs and connected.token not in traces and connected.token not in audit


async def test_source_tools_are_for_admins_only(connected):
    async with http_client(connected.mcp_url, connected.headers("alice")) as client:
        assert "admin" in error_text(await client.call_tool("rag_sources_status", {}))
        assert "admin" in error_text(await client.call_tool("rag_sources_reload", {}))


async def test_a_broken_file_keeps_the_old_config_serving(connected):
    fed = connected
    before = await status(fed)
    fed.write([entry(fed, "foreign", ["legal"]), entry(fed, "Bad-Id", ["legal"])])
    try:
        async with http_client(fed.mcp_url, fed.headers("root")) as client:
            result = structured(await client.call_tool("rag_sources_reload", {}))
        assert not result["ok"] and "sources[1]" in result["error"] and "field 'id'" in result["error"]
        assert str(fed.sources) in result["error"]
        after = await status(fed)
        assert after["version"] == before["version"] and "field 'id'" in after["last_error"]
        async with http_client(fed.mcp_url, fed.headers("alice")) as client:
            assert structured(await client.call_tool("foreign__add", {"a": 1, "b": 1}))["sum"] == 2
        fed.write("{not json")
        await wait_for(fed, lambda st: "not valid JSON" in st["last_error"])   # the watcher saw it too
    finally:
        fed.write([entry(fed, "foreign", ["legal"])])
        await wait_for(fed, lambda st: st["last_error"] == "")


async def test_the_tool_list_follows_reloads(connected):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    fed = connected
    assert "second__add" not in await tool_names(fed, "bob")
    notified = asyncio.Event()

    async def on_message(message) -> None:
        if getattr(getattr(message, "root", message), "method", "") == "notifications/tools/list_changed" \
                or "ToolListChanged" in type(getattr(message, "root", message)).__name__:
            notified.set()

    listener = Client(streamable_http_client(fed.mcp_url, http_client=create_mcp_http_client(
        headers=fed.headers("bob"))), mode="legacy", message_handler=on_message)
    async with listener:
        await listener.list_tools()                            # a session the server knows
        fed.write([entry(fed, "foreign", ["legal"]), entry(fed, "second", ["sales"])])
        await asyncio.wait_for(notified.wait(), 20)            # notifications/tools/list_changed
    try:
        await wait_for(fed, lambda st: by_id(st).get("second", {}).get("state") == "connected")
        bob = await tool_names(fed, "bob")
        assert "second__add" in bob and "foreign__add" not in bob
        fed.write([entry(fed, "foreign", ["legal"]), entry(fed, "second", ["sales"], enabled=False)])
        await wait_for(fed, lambda st: by_id(st).get("second", {}).get("state") == "locked")
        assert not any(n.startswith("second__") for n in await tool_names(fed, "bob"))
    finally:
        fed.write([entry(fed, "foreign", ["legal"])])
        await wait_for(fed, lambda st: "second" not in by_id(st))


async def test_reload_under_eight_concurrent_clients_fails_no_call(connected):
    fed = connected
    stop = asyncio.Event()
    calls, failures = [0], []

    async def client_loop(i: int) -> None:
        async with http_client(fed.mcp_url, fed.headers("alice")) as client:
            while not stop.is_set():
                result = await client.call_tool("foreign__add", {"a": i, "b": calls[0]})
                if result.is_error or result.structured_content is None:
                    failures.append(error_text(result) if result.is_error else "no content")
                calls[0] += 1

    tasks = [asyncio.create_task(client_loop(i)) for i in range(8)]
    try:
        for n in range(6):
            await asyncio.sleep(0.4)
            extra = [entry(fed, "second", ["sales"])] if n % 2 == 0 else []
            fed.write([entry(fed, "foreign", ["legal"], reputation=0.5 + n / 20), *extra])
            async with http_client(fed.mcp_url, fed.headers("root")) as client:
                assert structured(await client.call_tool("rag_sources_reload", {}))["ok"]
        await asyncio.sleep(0.4)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=False)
        fed.write([entry(fed, "foreign", ["legal"])])
    assert failures == [] and calls[0] >= 8


def nucleus(fed: Fed, capsys, *argv: str) -> tuple[int, str]:
    from cli.main import main

    capsys.readouterr()
    code = main(["--data-dir", str(fed.data), "sources", "--file", str(fed.sources), *argv])
    out = capsys.readouterr().out
    return code, " ".join(out.split())


def test_cli_registry_browse_import_probe_and_list(fed, capsys, monkeypatch):
    from tests.support.registry_server import RegistryServer, server_json

    monkeypatch.setenv("COLUMNS", "400")
    servers = [server_json("io.example/foreign-rag", url=fed.foreign_url, title="Foreign RAG"),
               server_json("io.example/npm-only", packages=True)]
    with RegistryServer(servers, page_size=1) as good, RegistryServer(servers) as down:
        down.fail = 500
        assert nucleus(fed, capsys, "registry", "add", "corp", good.url)[0] == 0
        assert nucleus(fed, capsys, "registry", "add", "broken", down.url)[0] == 0
        code, out = nucleus(fed, capsys, "browse")
        assert code == 0 and "PARTIAL" in out and "io.example/foreign-rag" in out and "registry broken failed" in out
        assert "only packages[]" in out
        code, out = nucleus(fed, capsys, "import", "io.example/npm-only", "--registry", "corp", "--slug", "npm")
        assert code == 2 and "only packages[]" in out
        try:
            code, out = nucleus(fed, capsys, "import", "io.example/foreign-rag", "--registry", "corp", "--slug",
                                "imported", "--groups", "legal", "--credential-env", "NUCLEUS_ITEST_SOURCE_TOKEN",
                                "--wait", "30")
            assert code == 0 and "imported io.example/foreign-rag" in out
            assert "probe: connected" in out and "seed000+seed002" in out, out
            code, out = nucleus(fed, capsys, "list")
            assert code == 0 and "imported" in out and "connected" in out
            code, out = nucleus(fed, capsys, "show", "imported")
            assert code == 0 and "registry:corp/io.example/foreign-rag@1.0.0" in out and "rag_search" in out
        finally:
            fed.write([entry(fed, "foreign", ["legal"])])


def test_cli_shows_a_broken_file_and_the_service_keeps_serving(fed, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    fed.write([entry(fed, "foreign", ["legal"], timeout_s="fast")])
    try:
        code, out = nucleus(fed, capsys, "reload")
        assert code == 2 and "sources[0] (id 'foreign'): field 'timeout_s'" in out
        assert "service kept configuration version" in out
        code, out = nucleus(fed, capsys, "list")
        assert code == 2 and "field 'timeout_s'" in out and "last good configuration" in out
        assert "connected" in out                              # the old configuration's status
    finally:
        fed.write([entry(fed, "foreign", ["legal"])])
    code, out = nucleus(fed, capsys, "reload")
    assert code == 0 and "service reloaded" in out


async def test_remote_client_pools_sessions_and_enforces_limits(fed, monkeypatch):
    from services.rag_pipeline.federation.remote import RemoteError, RemoteSource
    from services.rag_pipeline.federation.sources import parse_source

    monkeypatch.setenv("NUCLEUS_ITEST_SOURCE_TOKEN", fed.token)
    remote = RemoteSource(parse_source({**entry(fed, "direct", ["legal"]), "max_response_bytes": 20_000,
                                        "timeout_s": 1.0}))
    try:
        for i in range(5):
            assert (await remote.call_tool("add", {"a": i, "b": 1}, deadline_s=2)).data == {"sum": i + 1}
        assert remote.connects == 1                                      # one MCP session for every call
        with pytest.raises(RemoteError) as big:
            await remote.call_tool("big", {"n": 50_000}, deadline_s=2)
        assert big.value.kind == "oversize"
        started = time.monotonic()
        with pytest.raises(RemoteError) as slow:
            await remote.call_tool("slow", {"seconds": 5}, deadline_s=5)    # capped by timeout_s = 1
        assert slow.value.kind == "timeout" and time.monotonic() - started < 2.5
        with pytest.raises(RemoteError) as unknown:
            await remote.call_tool("no_such_tool", {}, deadline_s=2)
        assert unknown.value.kind == "tool_error"
        assert (await remote.call_tool("add", {"a": 1, "b": 1}, deadline_s=2)).data == {"sum": 2}   # reconnected
    finally:
        await remote.close()
    monkeypatch.setenv("NUCLEUS_ITEST_SOURCE_TOKEN", "not-the-token")
    wrong = RemoteSource(parse_source(entry(fed, "wrong", ["legal"])))
    with pytest.raises(RemoteError) as refused:
        await wrong.list_tools(deadline_s=5)
    assert refused.value.kind == "credential" and "not-the-token" not in str(refused.value)


async def test_a_stdio_source_gets_its_credential_in_its_environment(monkeypatch):
    from services.rag_pipeline.federation.remote import RemoteSource, detect_contract
    from services.rag_pipeline.federation.sources import parse_source

    monkeypatch.setenv("NUCLEUS_ITEST_STDIO_TOKEN", "stdio-token-value")
    remote = RemoteSource(parse_source({"id": "stdio", "command": [sys.executable, "-m", "tests.support.foreign_rag_server",
                                                                   "--stdio", "--token-env", "NUCLEUS_ITEST_STDIO_TOKEN"],
                                        "credential_env": "NUCLEUS_ITEST_STDIO_TOKEN", "timeout_s": 20}))
    try:
        assert detect_contract(await remote.list_tools(deadline_s=20)).label == "seed000+seed002"
        echoed = (await remote.call_tool("echo", {"message": "x"}, deadline_s=10)).data
        assert echoed["token_sha256"] == __import__("hashlib").sha256(b"stdio-token-value").hexdigest()[:16]
    finally:
        await remote.close()


async def test_a_tenant_admin_edits_its_sources_over_mcp_and_the_change_takes_effect(connected):
    """rag_sources_add|edit|disable|enable|remove (federation/admin.py): root, admin of acme (the
    stack's one tenant), writes the file through the tools; each change is reloaded at once and
    audited; operator-only fields and non-admins are refused."""
    fed = connected
    added = {"id": "tenant_added", "url": "https://tenant-added.example.com/mcp", "groups": ["legal"],
             "timeout_s": 1, "reputation": 0.4, "enabled": False}
    try:
        async with http_client(fed.mcp_url, fed.headers("root")) as root:
            out = structured(await root.call_tool("rag_sources_add", {"source": added}))
            assert out["reloaded"] and out["source"]["tenants"] == ["acme"] and out["action"] == "added"
            assert by_id(await status(fed))["tenant_added"]["state"] == "locked"       # in the live configuration
            refused = error_text(await root.call_tool("rag_sources_edit", {
                "id": "tenant_added", "changes": {"credential_env": "NUCLEUS_ITEST_SOURCE_TOKEN"}}))
            assert "permission_denied" in refused and "'credential_env' is operator-only" in refused
            refused = error_text(await root.call_tool("rag_sources_add", {"source": {**added, "id": "local_one",
                                                                                   "url": fed.foreign_url}}))
            assert "https://" in refused                               # the foreign server is plain http on loopback
            out = structured(await root.call_tool("rag_sources_edit", {"id": "tenant_added",
                                                                       "changes": {"reputation": 0.9}}))
            assert out["source"]["reputation"] == 0.9 and by_id(await status(fed))["tenant_added"]["reputation"] == 0.9
            assert structured(await root.call_tool("rag_sources_enable", {"id": "tenant_added"}))["reloaded"]
            assert by_id(await status(fed))["tenant_added"]["enabled"] is True
            out = structured(await root.call_tool("rag_sources_remove", {"id": "tenant_added"}))
            assert out["reloaded"] and out["source"] is None and "tenant_added" not in by_id(await status(fed))
            unknown = error_text(await root.call_tool("rag_sources_remove", {"id": "tenant_added"}))
            assert "not_found" in unknown
        async with http_client(fed.mcp_url, fed.headers("alice")) as alice:
            assert "admin role" in error_text(await alice.call_tool("rag_sources_add", {"source": added}))
    finally:
        fed.write([entry(fed, "foreign", ["legal"])])
    lines = [json.loads(line) for line in fed.audit.read_text().splitlines() if '"event":"sources"' in line]
    tools = [(r["tool"], r["decision"], r["user"]) for r in lines]
    assert ("rag_sources_add", "allow", "root") in tools and ("rag_sources_edit", "deny", "root") in tools
    assert ("rag_sources_remove", "allow", "root") in tools and ("rag_sources_add", "deny", "alice") in tools
    assert "NUCLEUS_ITEST_SOURCE_TOKEN" not in json.dumps(lines)
