"""Federation every user and tenant can trust, with real processes.

alice and bob (group eng) and carol (group sales) in tenant t1, dave (group eng) in tenant t2, each
with an API key of an authenticated RAGPipeline (stack A, over the suite's KnowledgeStore and
LlmOrchestration), federating:
  * `peruser`  — an independent seed-000 server whose resources differ per username and which
                 refuses, in-band, any resource that is not the caller's (benchmarks/peruser_rag.py);
  * `common`   — the same server as a source of both tenants (users travel tenant-qualified);
  * `hdr`      — a seed-002 server trusted with the platform headers, recording what it receives;
  * `frozen`   — a seed-000 server stopped with SIGSTOP mid-test;
  * `peer`     — a second Nucleus stack (B, the same store and model) that federates A back, trusted:
                 its hits come with their vectors and are not re-embedded;
  * `impostor` — the seed-000 server trusted as a remote Nucleus, whose model fingerprint is another
                 model's: its hits are re-embedded;
  * `hostile`  — a server answering oversized, dripping, invalid JSON, errors or prompt injection;
  * `twotool`  — a seed-000 server with only the two required tools (no synthesis, no
                 verify_document_access), whose resources can be withdrawn from a user mid-test.
Stack A asks sources at every verification (NUCLEUS_RAG_VERIFY_CACHE_TTL_S=0).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from services.knowledge_store.client import KnowledgeStoreClient
from services.rag_pipeline.federation.assertion import StackSigner
from services.rag_pipeline.federation.sources import read_status_file
from shared.audit import read_records
from shared.auth.api_keys import hash_key
from shared.records import ArtifactMeta, DocumentIn
from tests.support.mcp_clients import http_client, structured
from tests.support.processes import stop, wait_ready

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
USERS = {"alice": ("t1", ["eng"]), "bob": ("t1", ["eng"]), "carol": ("t1", ["sales"]), "dave": ("t2", ["eng"]),
         "admin1": ("t1", []), "admin2": ("t2", [])}
FROZEN_TIMEOUT_S = 1.5
HOSTILE_TIMEOUT_S = 2.0
PEER_TENANT = "peer"
MISSING = {"has_access": False, "refreshed_url": None, "access_level": None,
           "error": "Document has been deleted or does not exist"}


class Fed:
    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.url = ""                     # stack A's MCP endpoint
        self.peer_url = ""                # stack B's
        self.peer_keys: dict[str, str] = {}
        self.servers: dict[str, dict] = {}

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[who]}"}


def _server(data: Path, name: str, mode: str, env: dict) -> tuple[subprocess.Popen, Path]:
    """The per-user RAG server `name`, started (its ready file to wait on)."""
    ready = data / f"{name}.json"
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.peruser_rag", "--ready-file", str(ready),
                             "--mode", mode, "--withdrawn", str(data / f"{name}-withdrawn.json")],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, ready


def _rag(data: Path, name: str, env: dict) -> tuple[subprocess.Popen, Path]:
    """A RAGPipeline of its own, started (its ready file to wait on)."""
    ready = data / f"{name}-rag.json"
    proc = subprocess.Popen([sys.executable, "-m", "services.rag_pipeline.main", "--grpc-port", "0", "--mcp-port",
                             "0", "--ready-file", str(ready)], cwd=ROOT, env=env,
                            stdout=open(data / f"{name}.log", "wb"), stderr=subprocess.STDOUT)
    return proc, ready


def _auth(keys: dict[str, str], users: dict[str, tuple[str, list[str]]]) -> dict:
    return {"version": 1, "api_keys": [
        {"key_id": f"k-{who}", "sha256": hash_key(keys[who]), "tenant": tenant, "user": who, "groups": groups,
         **({"roles": ["admin"]} if who.startswith("admin") else {})} for who, (tenant, groups) in users.items()]}


@pytest.fixture(scope="module")
async def fed(stack, tmp_path_factory):
    data = tmp_path_factory.mktemp("federation-trust")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    procs: list[subprocess.Popen] = []
    f = Fed()
    try:
        starting = []                  # the five servers and stack B start at once; A needs their URLs
        for name, mode in (("peruser", "seed000"), ("hdr", "seed002"), ("frozen", "seed000"), ("hostile", "hostile"),
                           ("twotool", "seed000-min")):
            proc, ready = _server(data, name, mode, env)
            procs.append(proc)
            starting.append((name, proc, ready))

        async def ingest() -> None:
            client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"], ingest_timeout_s=120)
            try:
                await client.ingest(PEER_TENANT, "", [DocumentIn(
                    artifact=ArtifactMeta(artifact_id="peer-doc", title="Peer battery handbook", source_type="note",
                                          source_id="handbook", source_uri="https://peer.example/handbook"),
                    content="The peer stack's handbook: power-cycle the battery controller after a reset."),
                    DocumentIn(artifact=ArtifactMeta(
                        artifact_id="peer-eng", title="Peer engineering battery memo", source_type="note",
                        source_id="handbook", source_uri="https://peer.example/eng", visibility_groups=("eng",)),
                        content="Engineering only: the battery controller memo of the peer stack.")])
            finally:
                await client.close()

        await ingest()                 # on the suite's own loop: gRPC's asyncio side serves one loop at a time
        f.keys = {who: f"nrk_{who}_{secrets.token_urlsafe(18)}" for who in [*USERS, "stack_b"]}
        f.peer_keys = {who: f"nrk_{who}_{secrets.token_urlsafe(18)}" for who in ("stack_a", "erin")}
        a_users = {**USERS, "stack_b": ("t1", ["eng"])}
        (data / "a").mkdir()
        (data / "b").mkdir()
        (data / "a" / "auth.json").write_text(json.dumps(_auth(f.keys, a_users)))
        b_auth = _auth(f.peer_keys, {"stack_a": (PEER_TENANT, []), "erin": (PEER_TENANT, ["eng"])})
        # stack A's users come to B as signed assertions on A's key: B maps A to its tenant "peer"
        # and keeps only the groups it lists for A
        f.a_signer = StackSigner.load_or_create(data / "a", "stack-a")
        b_auth["api_keys"][0].update(peer_stack="stack-a", peer_public_key=f.a_signer.public_pem(),
                                     peer_groups=["eng"])
        (data / "b" / "auth.json").write_text(json.dumps(b_auth))
        common = {**env, "NUCLEUS_RAG_REQUIRE_AUTH": "1", "NUCLEUS_RAG_RATE_LIMIT_PER_S": "0",
                  "NUCLEUS_RAG_SHUTDOWN_GRACE_S": "1",
                  "NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET": stack["knowledge_store"]["grpc"],
                  "NUCLEUS_RAG_LLM_TARGET": stack["llm_orchestration"]["grpc"]}
        # Stack B first (A's sources name it); B federates A back, A's URL is known once A runs.
        b_sources = data / "b" / "sources.json"
        b_sources.write_text(json.dumps({"sources": []}))
        proc, b_ready = _rag(data / "b", "b", {**common, "NUCLEUS_DATA_DIR": str(data / "b"),
                                               "NUCLEUS_STACK_ID": "stack-b", "NUCLEUS_SOURCES_FILE": str(b_sources),
                                               "NUCLEUS_RAG_AUTH_CONFIG": str(data / "b" / "auth.json"),
                                               "NUCLEUS_RAG_AUDIT_LOG": str(data / "b" / "audit.jsonl"),
                                               "NUCLEUS_ITEST_KEY_FOR_A": f.keys["stack_b"]})
        procs.append(proc)
        for name, server, ready in starting:
            f.servers[name] = wait_ready(ready, server, name, 60)
        f.peer_url = wait_ready(b_ready, proc, "rag_pipeline b", 120)["mcp"]
        url = {n: r["url"] for n, r in f.servers.items()}
        a_sources = [
            {"id": "peruser", "url": url["peruser"], "tenants": ["t1"], "groups": ["eng", "sales"], "timeout_s": 10},
            {"id": "common", "url": url["peruser"], "tenants": ["t1", "t2"], "groups": ["eng"], "timeout_s": 10},
            {"id": "hdr", "url": url["hdr"], "tenants": ["t1"], "groups": ["eng", "sales"], "identity": "headers",
             "trusted": True, "timeout_s": 10},
            {"id": "frozen", "url": url["frozen"], "tenants": ["t1"], "groups": ["eng"],
             "timeout_s": FROZEN_TIMEOUT_S},
            {"id": "peer", "url": f.peer_url, "tenants": ["t1"], "groups": ["eng", "sales"], "timeout_s": 20,
             "credential_env": "NUCLEUS_ITEST_KEY_FOR_B", "identity": "assertion", "audience": "stack-b",
             "trusted": True},
            {"id": "impostor", "url": url["peruser"], "tenants": ["t1"], "groups": ["eng"], "timeout_s": 10,
             "identity": "assertion", "audience": "stack-x", "trusted": True},
            {"id": "hostile", "url": url["hostile"], "tenants": ["t1"], "groups": ["eng"], "timeout_s": HOSTILE_TIMEOUT_S,
             "max_response_bytes": 1_000_000},
            {"id": "twotool", "url": url["twotool"], "tenants": ["t1"], "groups": ["eng"], "timeout_s": 10}]
        (data / "a" / "sources.json").write_text(json.dumps({"sources": a_sources}))
        proc, a_ready = _rag(data / "a", "a", {**common, "NUCLEUS_DATA_DIR": str(data / "a"),
                                               "NUCLEUS_STACK_ID": "stack-a", "NUCLEUS_RAG_VERIFY_CACHE_TTL_S": "0",
                                               "NUCLEUS_SOURCES_FILE": str(data / "a" / "sources.json"),
                                               "NUCLEUS_RAG_AUTH_CONFIG": str(data / "a" / "auth.json"),
                                               "NUCLEUS_RAG_AUDIT_LOG": str(data / "a" / "audit.jsonl"),
                                               "NUCLEUS_ITEST_KEY_FOR_B": f.peer_keys["stack_a"]})
        procs.append(proc)
        f.url = wait_ready(a_ready, proc, "rag_pipeline a", 120)["mcp"]
        b_sources.write_text(json.dumps({"sources": [
            {"id": "back", "url": f.url, "groups": ["eng"], "timeout_s": 20, "credential_env": "NUCLEUS_ITEST_KEY_FOR_A"}]}))
        end = time.monotonic() + 30
        while time.monotonic() < end:          # B reloads its sources file on its next poll
            status = read_status_file(b_sources) or {}
            if any(s.get("id") == "back" for s in status.get("sources", [])):
                break
            time.sleep(0.1)
        f.data = data
        yield f
    finally:
        for p in reversed(procs):
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
            stop(p)


async def call(f: Fed, who: str, tool: str, args: dict, *, url: str | None = None) -> dict:
    headers = f.headers(who) if url is None else {"Authorization": f"Bearer {f.peer_keys[who]}"}
    async with http_client(url or f.url, headers) as client:
        return structured(await client.call_tool(tool, args))


async def seen(f: Fed, server: str) -> list[dict]:
    async with http_client(f.servers[server]["url"]) as client:
        return structured(await client.call_tool("seen", {}))["seen"]


def remote_ids(discovered: dict, server: str) -> set[str]:
    return {r["id"] for r in discovered["results"]["resources"] if r.get("serverId") == server}


def report(meta: dict, source: str) -> dict:
    return {s["source_id"]: s for s in meta.get("sources") or []}[source]


async def test_each_caller_discovers_its_own_remote_resources_even_right_after_another(fed):
    alice = await call(fed, "alice", "rag_discover_resources", {"username": "mallory"})
    bob = await call(fed, "bob", "rag_discover_resources", {"username": "alice"})
    carol = await call(fed, "carol", "rag_discover_resources", {"username": "alice"})
    dave = await call(fed, "dave", "rag_discover_resources", {"username": "alice"})
    assert remote_ids(alice, "peruser") == {"peruser:alice-private", "peruser:shared"}
    assert remote_ids(bob, "peruser") == {"peruser:bob-notes", "peruser:shared"}        # never alice's
    assert remote_ids(carol, "peruser") == {"peruser:shared"} and remote_ids(carol, "common") == set()
    assert remote_ids(dave, "peruser") == set()                                          # tenant t1's source
    assert remote_ids(dave, "common") == {"common:dave-t2", "common:shared"}
    users = {(s["tool"], s["username"]) for s in await seen(fed, "peruser")}
    # one user per source and tenant: plain on a one-tenant source, tenant-qualified on a shared one
    assert {("rag_discover_resources", u) for u in ("alice", "bob", "carol", "alice@t1", "bob@t1", "dave@t2")} <= users
    assert not any(u in ("mallory", "dave") for _, u in users)


async def test_each_caller_searches_with_its_own_identity_and_resources(fed):
    alice = await call(fed, "alice", "rag_get_raw_results", {"username": "x", "query": "battery controller reset",
                                                             "sources": ["peruser"]})
    bob = await call(fed, "bob", "rag_get_raw_results", {"username": "x", "query": "battery controller reset",
                                                         "sources": ["peruser"]})
    titles = lambda out: {h["title"] for h in out["results"]["hits"]}                 # noqa: E731
    assert "Alice private roadmap" in titles(alice) and "Alice private roadmap" not in titles(bob)
    assert "Bob field notes" in titles(bob)
    assert report(alice["meta_data"], "peruser")["status"] == report(bob["meta_data"], "peruser")["status"] == "ok"


async def test_a_remote_refusal_is_reported_never_ok_with_no_hits(fed):
    out = await call(fed, "alice", "rag_get_raw_results", {"username": "alice", "query": "battery",
                                                           "sources": ["peruser:bob-notes"]})
    rep = report(out["meta_data"], "peruser")
    assert rep["status"] == "refused" and rep["error_code"] == "unauthorized_source"
    assert out["meta_data"]["degraded"] is True and out["results"]["hits"] == []
    assert any(e["code"] == "unauthorized_source" and e["source"] == "peruser" for e in out["meta_data"]["source_errors"])


async def test_platform_headers_go_per_request_to_the_trusted_seed002_source(fed):
    for who in ("alice", "bob"):
        out = await call(fed, who, "rag_search", {"search_phrases": ["battery controller reset"], "sources": ["hdr"]})
        assert report({"sources": out["sources"]}, "hdr")["status"] == "ok"
    recorded = [s for s in await seen(fed, "hdr") if s["tool"] == "rag_search"]
    assert [s["x-user-id"] for s in recorded[-2:]] == ["alice", "bob"]
    assert recorded[-1]["x-session-tags"] == "[]" and recorded[-1]["authorization"] is False
    # the other sources were never given platform headers
    assert all(s["x-user-id"] is None for s in await seen(fed, "peruser"))


async def test_another_tenant_neither_sees_nor_searches_nor_administers_t1_sources(fed):
    async with http_client(fed.url, fed.headers("dave")) as client:
        with pytest.raises(MCPError) as refused:        # exactly as for a source that does not exist
            await client.call_tool("rag_search", {"search_phrases": ["battery"], "sources": ["peruser"]})
        tools = {t.name for t in (await client.list_tools()).tools}
    assert "unknown source 'peruser'; accepted: local, common" in str(refused.value)
    assert not any(t.startswith(("peruser__", "hdr__", "frozen__", "peer__")) for t in tools)
    t2 = await call(fed, "admin2", "rag_sources_status", {})
    t1 = await call(fed, "admin1", "rag_sources_status", {})
    assert {s["id"] for s in t2["sources"]} == {"common"}
    assert {s["id"] for s in t1["sources"]} == {"peruser", "common", "hdr", "frozen", "peer", "hostile", "impostor",
                                               "twotool"}


async def test_a_frozen_source_never_holds_the_answer_past_its_deadline(fed):
    pid = fed.servers["frozen"]["pid"]
    await call(fed, "alice", "rag_search", {"search_phrases": ["battery"], "sources": ["frozen"]})   # session pooled
    started = time.monotonic()              # the same search without the frozen source: what the machine takes now
    await call(fed, "alice", "rag_search", {"search_phrases": ["battery"], "sources": ["peruser"]})
    unfrozen = time.monotonic() - started
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        out = await call(fed, "alice", "rag_search", {"search_phrases": ["battery"], "sources": ["frozen", "peruser"]})
        elapsed = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    assert report({"sources": out["sources"]}, "frozen")["status"] == "timeout" and out["degraded"] is True
    assert report({"sources": out["sources"]}, "peruser")["status"] == "ok"
    assert elapsed < FROZEN_TIMEOUT_S + unfrozen + 0.5, \
        f"answered after {elapsed:.2f}s, deadline {FROZEN_TIMEOUT_S}s, {unfrozen:.2f}s without the frozen source"


async def test_two_stacks_federating_each_other_both_answer_and_the_loop_is_reported(fed):
    out = await call(fed, "alice", "rag_get_raw_results", {"username": "alice", "query": "battery controller handbook",
                                                           "sources": ["peer"]})
    rep = report(out["meta_data"], "peer")
    assert rep["status"] == "ok", rep.get("error_message")
    assert "Peer battery handbook" in {h["title"] for h in out["results"]["hits"]}
    # B, asked by a user of its own, goes to A, which goes back to B: B answers from its own store and says so
    back = await call(fed, "erin", "rag_get_raw_results", {"username": "erin", "query": "battery handbook",
                                                           "sources": ["back"]}, url=fed.peer_url)
    assert report(back["meta_data"], "back")["status"] == "ok", back["meta_data"]
    assert "federation loop" in (report(back["meta_data"], "back").get("note") or "")


async def test_every_tool_call_of_every_kind_leaves_exactly_one_tool_audit_line(fed):
    audit = fed.data / "a" / "audit.jsonl"
    async with http_client(fed.url, fed.headers("carol")) as client:
        names = sorted(t.name for t in (await client.list_tools()).tools)
        before = len(read_records(audit)) if audit.exists() else 0
        for name in [*names, "no_such_tool"]:
            try:                                # every tool, with no arguments: most refuse, all are recorded
                await client.call_tool(name, {})
            except MCPError:
                pass
    assert {"search_and_rank", "record_feedback", "rag_search", "peruser__seen"} <= set(names)
    records = [r for r in read_records(audit)[before:] if r["event"] == "tool"]
    assert sorted(r["tool"] for r in records) == sorted([*names, "no_such_tool"])
    assert {r["user"] for r in records} == {"carol"}
    assert not any(fed.keys["carol"] in json.dumps(r) for r in records)


async def test_a_federated_citation_is_verified_by_its_source_as_the_caller(fed):
    await call(fed, "alice", "rag_get_raw_results", {"username": "alice", "query": "battery recall plan",
                                                     "sources": ["peruser:alice-private"]})     # alice is returned it
    alice = await call(fed, "alice", "verify_document_access", {"segment_uid": "peruser:seg-alice-private"})
    bob = await call(fed, "bob", "verify_document_access", {"segment_uid": "peruser:seg-alice-private"})
    assert alice["has_access"] is True and "/documents/peruser%3Aseg-alice-private?" in alice["refreshed_url"]
    with httpx.Client(follow_redirects=False, timeout=10) as web:       # a Nucleus-signed redirect, user-bound
        opened = web.get(alice["refreshed_url"])
        tampered = web.get(alice["refreshed_url"].replace("peruser.example", "evil.example"))
    assert opened.status_code == 302 and opened.headers["location"] == "https://peruser.example/alice-private?fresh=1"
    assert tampered.status_code == 403 and tampered.json()["error"] == "link tampered"
    assert bob == MISSING                       # one answer for what bob may not see and what does not exist
    # dave may not use t1's source: answered exactly as for an id that does not exist
    dave = await call(fed, "dave", "verify_document_access", {"segment_uid": "peruser:seg-alice-private"})
    missing = await call(fed, "dave", "verify_document_access", {"segment_uid": "nosuch:seg-x"})
    assert dave == missing and dave["has_access"] is False
    # a remote Nucleus verifies its own entry
    out = await call(fed, "alice", "rag_search", {"search_phrases": ["peer battery handbook"], "sources": ["peer"]})
    (segment,) = [s for s in out["segments"] if s["segment_uid"].startswith("peer:")][:1]
    peer = await call(fed, "alice", "verify_document_access", {"segment_uid": segment["segment_uid"]})
    assert peer["has_access"] is True


@pytest.mark.parametrize("kind, status", [("oversize", "error"), ("badjson", "error"), ("error", "error"),
                                          ("drip", "timeout"), ("inject", "ok")])
async def test_a_hostile_remote_is_bounded_and_its_text_is_only_data(fed, kind, status):
    before = await call(fed, "admin1", "rag_sources_status", {})
    started = time.monotonic()
    out = await call(fed, "alice", "rag_search", {"search_phrases": [f"{kind} battery reset"],
                                                  "sources": ["hostile", "peruser"]})
    elapsed = time.monotonic() - started
    rep = report({"sources": out["sources"]}, "hostile")
    assert rep["status"] == status, rep
    assert report({"sources": out["sources"]}, "peruser")["status"] == "ok"      # the others answer
    assert elapsed < HOSTILE_TIMEOUT_S + 1.5
    if kind == "inject":                       # quoted as data, never followed: nothing was reloaded
        assert any("IGNORE ALL PREVIOUS INSTRUCTIONS" in s["raw_text"] for s in out["segments"])
        after = await call(fed, "admin1", "rag_sources_status", {})
        assert after["version"] == before["version"]
    else:
        assert not any(s["segment_uid"].startswith("hostile:") for s in out["segments"])


async def test_synthesis_takes_remote_sources_the_remotes_own_answer_or_one_over_the_unified_ranking(fed):
    own = await call(fed, "alice", "rag_get_synthesized_results", {"username": "alice", "query": "battery recall",
                                                                   "sources": ["peruser"]})
    assert own["meta_data"]["method"] == "remote" and "recall plan" in own["results"]["answer"]
    assert any("untrusted" in n for n in own["meta_data"]["notes"])
    assert all(c["id"].startswith("peruser:") for c in own["results"]["citations"])
    assert all("/documents/peruser%3A" in c["uri"] for c in own["results"]["citations"])    # signed here, recorded
    refused = await call(fed, "bob", "rag_get_synthesized_results", {"username": "bob", "query": "battery",
                                                                     "sources": ["peruser:alice-private"]})
    assert refused["results"]["error"]["code"] == "unauthorized_source" and refused["results"]["answer"] == ""
    both = await call(fed, "alice", "rag_get_synthesized_results", {"username": "alice", "query": "battery reset",
                                                                    "sources": ["peruser", "hdr"]})
    assert both["meta_data"]["method"] != "remote" and both["results"]["answer"]
    assert any(c["id"].startswith(("peruser:", "hdr:")) for c in both["results"]["citations"]), both["results"]


async def test_a_remote_nucleus_serves_each_user_by_a_signed_assertion_limited_to_the_groups_it_allows(fed):
    query = {"username": "x", "query": "battery controller memo handbook", "sources": ["peer"]}
    alice = await call(fed, "alice", "rag_get_raw_results", query)
    carol = await call(fed, "carol", "rag_get_raw_results", query)
    titles = lambda out: {h["title"] for h in out["results"]["hits"]}                 # noqa: E731
    assert "Peer engineering battery memo" in titles(alice)          # alice is in eng, which B allows A
    assert "Peer engineering battery memo" not in titles(carol) and "Peer battery handbook" in titles(carol)
    users = {r["user"] for r in read_records(fed.data / "b" / "audit.jsonl") if r["event"] == "tool"}
    assert {"alice@stack-a", "carol@stack-a"} <= users                 # users of stack A, never A's key alone
    # at B, an assertion signed by another key, for another audience, or on an ordinary key is refused or ignored
    other = StackSigner.load_or_create(fed.data / "other", "stack-a")
    for token in (other.sign(audience="stack-b", user="alice", groups=("eng",)),
                  fed.a_signer.sign(audience="stack-x", user="alice", groups=("eng",)), "not-a-jwt"):
        async with http_client(fed.peer_url, {"Authorization": f"Bearer {fed.peer_keys['stack_a']}",
                                              "x-nucleus-assertion": token}) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("rag_search", {"search_phrases": ["battery memo"]})
        assert "assertion" in str(refused.value)
    forged = fed.a_signer.sign(audience="stack-b", user="root", groups=("eng", "admins"))
    async with http_client(fed.peer_url, {"Authorization": f"Bearer {fed.peer_keys['erin']}",
                                          "x-nucleus-assertion": forged}) as client:
        out = structured(await client.call_tool("rag_get_raw_results", {"username": "root", "query": "battery",
                                                                        "sources": ["handbook"]}))
    assert out["meta_data"]["username"] == "erin"                      # an ordinary key: the assertion is ignored


def _sources_status(f: Fed, source: str, want: str = "") -> dict:
    """A's published status of `source` (once its `vectors` field starts with `want`, within 30 s)."""
    end = time.monotonic() + 30
    while True:
        status = {s["id"]: s["status"] for s in (read_status_file(f.data / "a" / "sources.json") or {}).get(
            "sources", [])}
        found = status.get(source, {})
        if (found.get("vectors", "").startswith(want) and found.get("last_probe")) or time.monotonic() > end:
            return found
        time.sleep(0.1)


def _set_peer_trusted(f: Fed, trusted: bool) -> None:
    """Edit A's sources file (atomically) and wait until A serves the new version."""
    path = f.data / "a" / "sources.json"
    before = (read_status_file(path) or {}).get("version")
    config = json.loads(path.read_text())
    for source in config["sources"]:
        if source["id"] == "peer":
            source["trusted"] = trusted
    path.with_suffix(".tmp").write_text(json.dumps(config))
    os.replace(path.with_suffix(".tmp"), path)
    end = time.monotonic() + 30
    while (read_status_file(path) or {}).get("version") == before and time.monotonic() < end:
        time.sleep(0.1)


def _dense(out: dict, source: str) -> dict[str, tuple[float, str]]:
    return {r["persona_knowledge_entry_id"]: (r["explanation"]["dense_cosine"], r["explanation"]["dense_source"])
            for r in out["results"] if r["source_id"] == source}


async def test_a_trusted_peer_with_the_same_model_sends_vectors_and_its_hits_are_not_re_embedded(fed):
    assert _sources_status(fed, "peer", "matched")["vectors"] == "matched"
    args = {"user_query_text": "peer battery controller handbook memo", "sources": ["peer"], "top_k_final_rank": 5}
    carried = await call(fed, "alice", "search_and_rank", args)
    with_vectors = _dense(carried, "peer")
    assert len(with_vectors) == 2 and {s for _, s in with_vectors.values()} == {"vectors"}, carried["results"]
    assert "remote_embedded=0" in carried["debug_information"]            # no model call for the remote hits
    assert "remote_vectors=2" in carried["debug_information"]
    assert "remote_terms=2" in carried["debug_information"]               # BM25 from B's stored terms
    _set_peer_trusted(fed, False)                                          # untrusted: today's re-scoring
    try:
        rescored_out = await call(fed, "alice", "search_and_rank", args)
        rescored = _dense(rescored_out, "peer")
    finally:
        _set_peer_trusted(fed, True)
    assert rescored.keys() == with_vectors.keys() and {s for _, s in rescored.values()} == {"rescored"}
    assert "remote_terms=0" in rescored_out["debug_information"]
    for key, (dense, _) in with_vectors.items():                          # the same cosine, within fp16
        assert dense == pytest.approx(rescored[key][0], abs=2e-3), key
    # B sends vectors only to a verified peer stack: erin, a user of B's own, asking with B's
    # fingerprint, gets the hits and no vectors
    async with http_client(fed.peer_url, {"Authorization": f"Bearer {fed.peer_keys['erin']}"}) as client:
        digest = structured(await client.call_tool("nucleus_model_fingerprint", {}))["digest"]
        plain = await client.call_tool("rag_get_raw_results", {"username": "erin", "query": "battery handbook",
                                                               "sources": ["handbook"]},
                                       meta={"io.nucleus/vectors": {"fingerprint": digest}})
    assert structured(plain)["results"]["hits"] and not (plain.meta or {}).get("io.nucleus/vectors")


async def test_a_trusted_source_with_another_models_fingerprint_is_re_embedded(fed):
    status = _sources_status(fed, "impostor", "mismatch")
    assert status["vectors"].startswith("mismatch: another embedding model"), status
    out = await call(fed, "alice", "search_and_rank", {"user_query_text": "battery controller reset",
                                                       "sources": ["impostor"], "top_k_final_rank": 5})
    dense = _dense(out, "impostor")
    assert dense and {s for _, s in dense.values()} == {"rescored"}
    assert "remote_vectors=0" in out["debug_information"]
    asked = [s for s in await seen(fed, "peruser") if s["tool"] == "rag_get_raw_results"]
    assert asked and not any(s["vectors_asked"] for s in asked)           # never asked for its vectors


async def test_a_two_tool_seed000_server_is_searched_and_its_hits_join_the_unified_ranking(fed):
    status = _sources_status(fed, "twotool")
    assert status["state"] == "connected" and status["contract"] == "seed000", status
    out = await call(fed, "alice", "search_and_rank", {"user_query_text": "battery controller recall plan handbook",
                                                       "sources": ["twotool", "peer"], "top_k_final_rank": 10})
    sources = [r["source_id"] for r in out["results"]]
    assert {"twotool", "peer"} <= set(sources), out["results"]          # one ranking over both
    scores = [r["overall_rank_score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True)
    assert {_dense(out, "twotool")[k][1] for k in _dense(out, "twotool")} == {"rescored"}   # on the local scale
    assert "twotool:seg-alice-private" in {r["persona_knowledge_entry_id"] for r in out["results"]}
    # each result carries its signed link; a federated one was recorded as returned to alice, so it verifies
    (hit,) = [r for r in out["results"] if r["persona_knowledge_entry_id"] == "twotool:seg-alice-private"]
    assert "/documents/twotool%3Aseg-alice-private?" in hit["uri"], hit
    verified = await call(fed, "alice", "verify_document_access", {"segment_uid": "twotool:seg-alice-private"})
    assert verified["has_access"] is True, verified
    # no synthesis tool there: the answer is synthesized here, over the unified ranking
    synth = await call(fed, "alice", "rag_get_synthesized_results", {"username": "alice", "query": "battery recall",
                                                                     "sources": ["twotool"]})
    assert synth["meta_data"]["method"] != "remote" and synth["results"]["answer"]
    assert synth["results"]["citations"] and all(c["id"].startswith("twotool:") for c in synth["results"]["citations"])


async def test_a_federated_hit_verifies_for_its_user_until_the_remote_withdraws_that_users_resource(fed):
    withdrawn = fed.data / "twotool-withdrawn.json"
    out = await call(fed, "alice", "rag_search", {"search_phrases": ["battery controller recall plan"],
                                                  "sources": ["twotool"]})
    uids = {s["segment_uid"] for s in out["segments"]}
    assert {"twotool:seg-alice-private", "twotool:seg-shared"} <= uids
    try:
        ok = await call(fed, "alice", "verify_document_access", {"segment_uid": "twotool:seg-alice-private"})
        assert ok["has_access"] is True and ok["access_level"] == "view", ok
        with httpx.Client(follow_redirects=False, timeout=10) as web:       # the signed redirect to the remote
            opened = web.get(ok["refreshed_url"])
        assert opened.status_code == 302 and opened.headers["location"] == "https://peruser.example/alice-private"
        assert await call(fed, "bob", "verify_document_access", {"segment_uid": "twotool:seg-alice-private"}) == MISSING
        withdrawn.write_text(json.dumps({"alice": ["alice-private"]}))      # the remote takes it from alice
        gone = await call(fed, "alice", "verify_document_access", {"segment_uid": "twotool:seg-alice-private"})
        kept = await call(fed, "alice", "verify_document_access", {"segment_uid": "twotool:seg-shared"})
    finally:
        withdrawn.write_text("{}")
    assert gone == MISSING
    assert kept["has_access"] is True


async def test_a_forged_federated_uid_naming_one_of_the_callers_own_resources_is_refused(fed):
    forged = "twotool:seg-bob-notes"        # bob's own resource, in the remote's id format, never returned to bob
    refused = await call(fed, "bob", "verify_document_access", {"segment_uid": forged})
    nosuch = await call(fed, "bob", "verify_document_access", {"segment_uid": "twotool:seg-no-such"})
    assert refused == nosuch == MISSING
    raw = await call(fed, "bob", "rag_get_raw_results", {"username": "bob", "query": "bob field notes battery",
                                                         "sources": ["twotool"]})
    assert forged in {h["id"] for h in raw["results"]["hits"]}
    # the same uid, once it was returned to bob, verifies: the refusal came from the record alone
    assert (await call(fed, "bob", "verify_document_access", {"segment_uid": forged}))["has_access"] is True
