"""Federation trust: per-caller answers and caches, identity to remotes per request, tenant-scoped
sources, refusals surfaced, filters on remote hits (fail closed), the loop guard, the pinned
address."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from services.rag_pipeline.federation import remote_transport as remote_mod
from services.rag_pipeline.federation.fanout import (
    Federation,
    McpRemoteSearch,
    RemoteQuery,
    RemoteRefused,
    hits_from_raw_results,
    hits_from_segments,
)
from services.rag_pipeline.federation.filters import apply, for_remotes, seed000_filters
from services.rag_pipeline.federation.hits import OK, REFUSED, Caller, RemoteHit
from services.rag_pipeline.federation.identity import (
    FEDERATION_META,
    INCOMING_PATH,
    MAX_HOPS,
    loop_reason,
    outgoing,
    path_from_meta,
)
from services.rag_pipeline.federation.remote import RemoteResult, ToolInfo
from services.rag_pipeline.federation.sources import (
    Source,
    SourcesConfig,
    SourcesFileError,
    SourcesRegistry,
    parse_source,
)
from shared.identity import ADMIN, Principal
from shared.records import SearchFilters

URL = "http://127.0.0.1:9/mcp"
SEED000 = [ToolInfo(n, "", {"type": "object", "properties": {"username": {}, "query": {}, "sources": {},
                                                               "filters": {}}})
           for n in ("rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results")]
RESOURCES = {"alice": ["alice-private", "shared"], "bob": ["bob-notes", "shared"], "alice@t1": ["shared"]}
ALICE, BOB = Caller("t1", "alice", ("eng",)), Caller("t1", "bob", ("eng",))


@dataclass
class FakeRemote:
    """A remote that answers per the `username` argument and records every call."""
    tools: list[ToolInfo] = field(default_factory=lambda: list(SEED000))
    calls: list[tuple[str, dict, dict | None, dict | None]] = field(default_factory=list)

    async def list_tools(self, *, deadline_s: float | None = None, refresh: bool = False) -> list[ToolInfo]:
        return self.tools

    async def call_tool(self, name: str, arguments: dict, *, deadline_s: float, headers: dict | None = None,
                        meta: dict | None = None) -> RemoteResult:
        self.calls.append((name, dict(arguments), headers, meta))
        user = arguments.get("username", "")
        if name == "rag_discover_resources":
            data = {"results": {"resources": [{"id": r} for r in RESOURCES.get(user, [])]}}
        else:
            mine = RESOURCES.get(user, [])
            foreign = [s for s in arguments["sources"] if s not in mine]
            data = ({"results": {"hits": [], "error": {"code": "unauthorized_source", "message": "not yours\x1b[31m"}}}
                    if foreign else {"results": {"hits": [{"id": f"seg-{r}", "chunk": f"text of {r}",
                                                           "timestamp": "2025-05-01T00:00:00Z", "resourceId": r}
                                                          for r in arguments["sources"]]}})
        return RemoteResult(source_id="s", tool=name, data=data)


class FakePool:
    def __init__(self, remote: FakeRemote) -> None:
        self.remote = remote

    def get(self, source: Source) -> FakeRemote:
        return self.remote


def source(**fields: Any) -> Source:
    fields = {"id": "peruser", "url": URL, "groups": frozenset({"eng"}), "tenants": frozenset({"t1"}), **fields}
    return Source(**fields)


# ---------------------------------------------------------------------------- identity per request
def test_the_user_travels_as_the_source_says_and_is_tenant_qualified_on_a_shared_source():
    one = source()
    shared = source(tenants=frozenset({"t1", "t2"}))
    assert outgoing(one, ALICE).username == "alice" and outgoing(one, ALICE).headers == {}
    assert outgoing(shared, ALICE).username == "alice@t1"
    assert outgoing(source(identity="none"), ALICE).username == ""
    trusted = source(identity="headers", trusted=True)
    sent = outgoing(trusted, Caller("t1", "bob", ("eng",), ("region:north",)), path=("stack-x",), stack_id="me")
    assert sent.headers == {"x-user-id": "bob", "x-session-tags": json.dumps(["region:north"])}
    assert sent.meta == {FEDERATION_META: {"path": ["stack-x", "me"]}}
    # an untrusted source never gets platform headers, even if its object says headers
    assert outgoing(source(identity="headers", trusted=False), ALICE).headers == {}


def test_headers_identity_needs_the_operators_trust_and_no_header_can_be_reserved():
    base = {"id": "s", "url": URL, "groups": ["eng"], "tenants": ["t1"]}
    with pytest.raises(SourcesFileError) as err:
        parse_source({**base, "identity": "headers"})
    assert err.value.field_name == "identity" and "trusted" in str(err.value)
    assert parse_source({**base, "identity": "headers", "trusted": True}).trusted
    for bad in ({"header_env": {"x-user-id": "X"}}, {"header_env": {"Authorization": "X"}},
                {"credential_header": "x-session-tags"}, {"header_env": {"X-Org": "not an env name"}}):
        with pytest.raises(SourcesFileError):
            parse_source({**base, **bad})


def test_non_bearer_credentials_and_a_tenants_own_secret(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NUCLEUS_TEST_ORG", "org-7")
    s = parse_source({"id": "s", "url": URL, "tenants": ["t1"], "credential_header": "X-Api-Key",
                      "header_env": {"X-Org": "NUCLEUS_TEST_ORG"}})
    assert s.auth_headers("k-1") == {"X-Api-Key": "k-1", "X-Org": "org-7"}
    (tmp_path / "secrets" / "t1").mkdir(parents=True)
    (tmp_path / "secrets" / "t1" / "wiki").write_text("tenant-secret\n")
    own = parse_source({"id": "w", "url": URL, "tenants": ["t1"], "credential_secret": "wiki"},
                       base_dir=str(tmp_path))
    assert own.credential() == "tenant-secret" and own.auth_headers(own.credential()) == {
        "Authorization": "Bearer tenant-secret"}
    with pytest.raises(SourcesFileError) as err:
        parse_source({"id": "w", "url": URL, "tenants": ["t1", "t2"], "credential_secret": "wiki"})
    assert err.value.field_name == "credential_secret"


# ---------------------------------------------------------------------------- tenants
def test_a_stack_of_several_tenants_needs_every_source_to_name_its_tenants(tmp_path: Path):
    path = tmp_path / "sources.json"
    path.write_text(json.dumps({"sources": [{"id": "wiki", "url": URL, "groups": ["eng"]}]}))
    several = SourcesRegistry(path, stack_tenants=("t1", "t2"), publish_status=False)
    assert several.current().sources == () and "field 'tenants'" in several.last_error
    one = SourcesRegistry(path, stack_tenants=("t1",), publish_status=False)
    config = one.current()
    assert [s.id for s in config.visible_to(Principal("t1", "alice", ("eng",)))] == ["wiki"]
    assert config.visible_to(Principal("t2", "dave", ("eng",))) == []


def test_an_admin_manages_only_its_own_tenants_sources():
    a, both = source(id="a"), source(id="both", tenants=frozenset({"t1", "t2"}))
    b = source(id="b", tenants=frozenset({"t2"}))
    config = SourcesConfig((a, both, b))
    assert [s.id for s in config.of_tenant(Principal("t1", "root", roles=(ADMIN,)))] == ["a", "both"]
    assert [s.id for s in config.visible_to(Principal("t2", "root", roles=(ADMIN,)))] == ["both", "b"]
    assert config.visible(Principal("t2", "dave", ("eng",)), "a") is None


# ---------------------------------------------------------------------------- per-caller answers
async def test_resources_are_asked_and_cached_per_caller_never_shared():
    remote = FakeRemote()
    search = McpRemoteSearch(FakePool(remote), stack_id="me")
    s = source()
    assert [r["id"] for r in await search.discover(s, ALICE, 2.0)] == ["alice-private", "shared"]
    assert [r["id"] for r in await search.discover(s, BOB, 2.0)] == ["bob-notes", "shared"]
    assert [r["id"] for r in await search.discover(s, ALICE, 2.0)] == ["alice-private", "shared"]   # cached
    asked = [c[1]["username"] for c in remote.calls if c[0] == "rag_discover_resources"]
    assert asked == ["alice", "bob"]
    hits = await search(s, RemoteQuery("q", ("q",), 5, BOB), 2.0)
    assert {h.id for h in hits} == {"seg-bob-notes", "seg-shared"}
    assert remote.calls[-1][1]["username"] == "bob" and remote.calls[-1][1]["sources"] == ["bob-notes", "shared"]
    # another group set is another caller
    await search.discover(s, Caller("t1", "alice", ("eng", "hr")), 2.0)
    assert [c[1]["username"] for c in remote.calls if c[0] == "rag_discover_resources"] == ["alice", "bob", "alice"]


async def test_a_named_resource_is_asked_for_and_the_refusal_reported_never_ok_with_no_hits():
    remote = FakeRemote()
    fed = Federation(lambda: SourcesConfig((source(),)), McpRemoteSearch(FakePool(remote)))
    query = RemoteQuery("q", ("q",), 5, ALICE, resources=(("peruser", ("bob-notes",)),))
    hits, reports = await fed.gather(fed.plan(["peruser"], Principal("t1", "alice", ("eng",))), query, 2.0)
    assert hits == [] and remote.calls[-1][1]["sources"] == ["bob-notes"]
    (report,) = reports
    assert report.status == REFUSED and report.failed and report.code == "unauthorized_source"
    assert "\x1b" not in report.error and report.error.startswith("not yours")


def test_in_band_errors_of_both_contracts_are_refusals_or_errors_by_code():
    with pytest.raises(RemoteRefused) as refused:
        hits_from_raw_results("s", {"results": {"hits": [], "error": "token_expired"}})
    assert refused.value.status == REFUSED and refused.value.code == "token_expired"
    with pytest.raises(RemoteRefused) as failed:
        hits_from_raw_results("s", {"results": {"error": {"code": "backend_unavailable", "message": "down"}}})
    assert failed.value.status == "error"
    with pytest.raises(RemoteRefused) as seg:
        hits_from_segments("s", {"status": "error", "code": "unauthorized_user", "error": "no user"})
    assert seg.value.status == REFUSED
    assert hits_from_segments("s", {"status": "success", "segments": []}) == []


# ---------------------------------------------------------------------------- filters
def hit(i: int, **fields: Any) -> RemoteHit:
    return RemoteHit("src", f"h{i}", f"text {i}", **fields)


def test_every_filter_applies_to_remote_hits_and_a_missing_field_fails_closed():
    may = 1_746_057_600                                     # 2025-05-01
    hits = [hit(1, timestamp_unix=may, tags=("ops",), source_type="wiki"), hit(2, timestamp_unix=0, tags=("ops",)),
            hit(3, timestamp_unix=may, tags=None), hit(4, timestamp_unix=may - 10**8, tags=("ops",))]
    f = for_remotes(SearchFilters(date_from_unix=may - 86_400, tags=("ops",), visibility_groups=("eng",),
                                  enforce_visibility=True, source_ids=("local-wiki",)))
    assert f is not None and f.source_ids == () and not f.enforce_visibility
    kept, dropped = apply(f, hits)
    assert [h.id for h in kept] == ["h1"] and dropped == 3
    assert apply(for_remotes(SearchFilters(source_types=("wiki",))), hits)[0] == [hits[0]]
    assert [h.id for h in apply(for_remotes(SearchFilters(artifact_ids=("src:h2",))), hits)[0]] == ["h2"]
    assert for_remotes(SearchFilters(visibility_groups=("eng",), enforce_visibility=True)) is None
    assert seed000_filters(f) == {"date_from": "2025-04-30T00:00:00Z", "tags": ["ops"]}


async def test_the_fan_out_passes_filters_to_the_remote_and_counts_what_it_drops():
    remote = FakeRemote()
    fed = Federation(lambda: SourcesConfig((source(),)), McpRemoteSearch(FakePool(remote)))
    f = for_remotes(SearchFilters(date_from_unix=1_700_000_000, tags=("ops",)))
    hits, (report,) = await fed.gather(fed.plan([], Principal("t1", "alice", ("eng",))),
                                       RemoteQuery("q", ("q",), 5, ALICE, filters=f), 2.0)
    assert remote.calls[-1][1]["filters"] == {"date_from": "2023-11-14T22:13:20Z", "tags": ["ops"]}
    assert hits == [] and report.status == OK and report.filtered == 2       # the remote gave no tags


# ---------------------------------------------------------------------------- loops
def test_the_path_is_read_bounded_and_a_stack_on_it_does_not_federate_again():
    assert path_from_meta({FEDERATION_META: {"path": ["a", "b", 7, "bad id!"]}}) == ("a", "b")
    assert path_from_meta(None) == () and path_from_meta({FEDERATION_META: "x"}) == ()
    assert loop_reason(("a", "b"), "b").startswith("federation loop")
    assert loop_reason(tuple(f"s{i}" for i in range(MAX_HOPS)), "me").startswith("federation loop guard")
    assert loop_reason(("a",), "b") == ""


async def test_a_query_that_came_back_goes_to_no_remote_and_says_why():
    fed = Federation(lambda: SourcesConfig((source(),)), McpRemoteSearch(FakePool(FakeRemote())), stack_id="me")
    alice = Principal("t1", "alice", ("eng",))
    token = INCOMING_PATH.set(("other", "me"))
    try:
        assert fed.plan([], alice).remotes == () and "federation loop" in fed.plan([], alice).loop
        named = fed.plan(["peruser", "local"], alice)
        assert named.local and named.remotes == () and named.skipped[0].note.startswith("federation loop")
    finally:
        INCOMING_PATH.reset(token)
    assert [s.id for s in fed.plan([], alice).remotes] == ["peruser"]


# ---------------------------------------------------------------------------- pinned address, per-request headers
async def test_requests_go_to_the_checked_address_with_the_host_kept_for_tls_and_this_calls_headers():
    seen: list[httpx2.Request] = []

    class Inner:
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            seen.append(request)
            return httpx2.Response(200, json={})

    conn = remote_mod._Connection(source(), pinned="10.1.2.3")
    transport = remote_mod._LimitedTransport(1024, conn, "10.1.2.3")
    transport._inner = Inner()
    token = remote_mod._REQUEST_HEADERS.set({"x-user-id": "alice"})
    try:
        await transport.handle_async_request(httpx2.Request("POST", "https://rag.example.com:8443/mcp"))
    finally:
        remote_mod._REQUEST_HEADERS.reset(token)
    await transport.handle_async_request(httpx2.Request("POST", "https://rag.example.com:8443/mcp"))
    first, second = seen
    assert first.url.host == "10.1.2.3" and first.url.port == 8443
    assert first.headers["Host"] == "rag.example.com:8443" and first.extensions["sni_hostname"] == "rag.example.com"
    assert first.headers["x-user-id"] == "alice" and "x-user-id" not in second.headers   # per request only


def test_a_remote_nucleus_gets_a_signed_assertion_of_the_user_for_its_audience(tmp_path: Path):
    from services.rag_pipeline.federation.assertion import StackSigner
    from shared.auth.peer import verify_assertion

    signer = StackSigner.load_or_create(tmp_path, "stack-a")
    with pytest.raises(SourcesFileError) as err:
        parse_source({"id": "peer", "url": URL, "tenants": ["t1"], "identity": "assertion"})
    assert err.value.field_name == "audience"
    peer = parse_source({"id": "peer", "url": URL, "tenants": ["t1"], "identity": "assertion", "audience": "stack-b"})
    sent = outgoing(peer, ALICE, signer=signer)
    claims = verify_assertion(sent.headers["x-nucleus-assertion"], public_pem=signer.public_pem(), issuer="stack-a",
                              audience="stack-b")
    assert (claims["sub"], claims["groups"], claims["src_tenant"]) == ("alice", ["eng"], "t1")
    assert "roles" not in claims and sent.username == "alice"


def test_a_federated_results_link_is_a_signed_user_bound_redirect():
    from shared.signing import LinkRejected, LinkSigner

    signer = LinkSigner(b"k" * 32, "https://nucleus.example", 600)
    link = signer.sign_redirect("peruser:seg-1", "https://remote.example/doc?x=1", "t1", "alice", ("eng",))
    claims = signer.verify_link(link, "alice")
    assert (claims.entry_id, claims.target) == ("peruser:seg-1", "https://remote.example/doc?x=1")
    assert signer.verify_link(signer.sign("e1", "t1", "alice"), "alice").target == ""     # local links unchanged
    for bad in (link.replace("remote.example", "evil.example"), link.replace("&to=", "&tx=")):
        with pytest.raises(LinkRejected):
            signer.verify_link(bad, "alice")
    with pytest.raises(LinkRejected):
        signer.verify_link(link, "bob")
    with pytest.raises(ValueError):
        signer.sign_redirect("peruser:seg-1", "javascript:alert(1)", "t1", "alice")
