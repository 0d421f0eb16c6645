"""Security of the RAGPipeline MCP server as a real process with auth on: bad credentials get
HTTP 401 and no data; identity comes only from the verified credential; tenants, groups,
source rules and session tags hold in every tool; signed links refuse tampering and expiry;
Host validation; and no secret reaches the audit trail or the logs."""
from __future__ import annotations

import base64
import json
import time
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from mcp.shared.exceptions import MCPError

from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from shared.audit import read_records
from shared.signing import LinkSigner
from tests.integration.secure_stack import AUDIENCE, GLOBEX_CANARY, ISSUER, LEGAL_CANARY, SECURITY_TEAM_DOCS
from tests.support.mcp_clients import http_client, structured

pytestmark = pytest.mark.integration
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "itest", "version": "0"}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
QUERIES = ["current travel hotel expense limits", "how do I reset the Pallas battery controller",
           "security incident reporting and response severity"]


def _artifact(uid: str) -> str:
    return uid.rsplit("#", 1)[0]


def _post(stack, headers: dict[str, str] | None = None, body: dict | None = None) -> httpx.Response:
    return httpx.post(stack.mcp_url, json=body or INITIALIZE, headers={**MCP_HEADERS, **(headers or {})}, timeout=30)


async def _search(stack, who: str = "alice", phrases=None, **headers) -> list[dict]:
    async with http_client(stack.mcp_url, stack.headers(who, **headers)) as client:
        result = await client.call_tool("rag_search", {"search_phrases": phrases or QUERIES[:1], "max_segments": 20})
    return structured(result)["segments"]


def _b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


# ---------------------------------------------------------------------------- credentials
def test_no_token_is_401_with_a_bearer_challenge_and_no_data(secure_corpus):
    response = _post(secure_corpus)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"] == "invalid_token"
    assert "nucleus" not in response.text and "serverInfo" not in response.text


def _bad_tokens(stack) -> dict[str, str]:
    now = int(time.time())
    return {
        "unknown api key": "nrk_unknown_0123456789abcdefghijklmnopqrstu",
        "expired jwt": stack.jwt(exp=now - 3600),
        "wrong audience": stack.jwt(aud="https://another-server.example/mcp"),
        "wrong issuer": stack.jwt(iss="https://evil-idp.example"),
        "bad hs256 signature": stack.jwt(key="x" * 64),
        "rs256 signed by another key": stack.jwt(alg="RS256", key=stack.other_rsa_private_pem),
        "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}."
                    f"{_b64({'iss': ISSUER, 'aud': AUDIENCE, 'sub': 'mallory', 'tenant': 'acme', 'exp': now + 600})}.",
        "unexpected algorithm": stack.jwt(alg="HS512", key=stack.hs_secret * 2),
        "no tenant claim": stack.jwt(tenant=None),
        "key of another server with the right prefix": "nrk_" + "A" * 43,
    }


@pytest.mark.parametrize("case", ["unknown api key", "expired jwt", "wrong audience", "wrong issuer",
                                  "bad hs256 signature", "rs256 signed by another key", "alg none",
                                  "unexpected algorithm", "no tenant claim",
                                  "key of another server with the right prefix"])
def test_bad_tokens_are_401(secure_corpus, case):
    token = _bad_tokens(secure_corpus)[case]
    response = _post(secure_corpus, {"Authorization": f"Bearer {token}"})
    assert response.status_code == 401, response.text
    assert "serverInfo" not in response.text


def test_non_bearer_authorization_is_401(secure_corpus):
    key = secure_corpus.keys["alice"]
    for header in (f"Basic {key}", key, "Bearer", f"Token {key}"):
        assert _post(secure_corpus, {"Authorization": header}).status_code == 401


@pytest.mark.parametrize("alg", ["HS256", "RS256"])
async def test_a_valid_jwt_gets_the_tenant_and_groups_of_its_claims(secure_corpus, alg):
    token = secure_corpus.jwt(alg=alg, groups=["security-team"])
    async with http_client(secure_corpus.mcp_url, {"Authorization": f"Bearer {token}"}) as client:
        body = structured(await client.call_tool("rag_get_raw_results", {
            "username": "someone-else", "query": QUERIES[2], "sources": ["security"], "top_k": 10}))
    assert body["meta_data"]["username"] == "carol"
    assert SECURITY_TEAM_DOCS & {_artifact(h["id"]) for h in body["results"]["hits"]}


async def test_user_token_expired_is_token_expired_and_never_echoed(secure_corpus):
    expired = secure_corpus.jwt(exp=int(time.time()) - 3600)
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("platform")) as client:
        result = await client.call_tool("rag_get_raw_results", {
            "username": "x", "query": "hotel limits", "sources": ["hr-policies"], "user_token": expired})
        valid = await client.call_tool("rag_discover_resources", {
            "username": "x", "user_token": secure_corpus.jwt(groups=["legal"])})
        foreign = await client.call_tool("rag_discover_resources", {
            "username": "x", "user_token": secure_corpus.keys["gina"]})
    body = structured(result)
    assert body["results"]["error"]["code"] == "token_expired" and not body["results"]["hits"]
    assert expired not in json.dumps(body) and expired not in result.content[0].text
    assert structured(valid)["meta_data"]["username"] == "carol"
    assert "legal" in {r["id"] for r in structured(valid)["results"]["resources"]}
    assert structured(foreign)["results"]["error"]["code"] == "unauthorized_user"


# ---------------------------------------------------------------------------- identity
async def test_forged_username_argument_is_overwritten_by_the_authenticated_user(secure_corpus):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        body = structured(await client.call_tool("rag_get_raw_results", {
            "username": "sec", "query": QUERIES[2], "sources": ["security"], "top_k": 20}))
    assert body["meta_data"]["username"] == "alice"
    assert not SECURITY_TEAM_DOCS & {_artifact(h["id"]) for h in body["results"]["hits"]}
    assert any("overwritten" in n for n in body["meta_data"]["notes"])


async def test_forged_x_user_id_from_an_ordinary_key_is_ignored_and_audited(secure_corpus):
    forged = await _search(secure_corpus, "alice", ["travel exceptions approvals restricted"],
                           **{"x-user-id": "hr-hank@acme.test", "x-session-tags": '["department:sales"]'})
    assert "hr-travel-exceptions-2026" not in {_artifact(s["segment_uid"]) for s in forged}
    assert len({_artifact(s["segment_uid"]) for s in forged}) > 1, "session tags from alice were not applied"
    records = [r for r in read_records(secure_corpus.audit_log) if r["tool"] == "rag_search" and r["user"] == "alice"]
    assert any("ignored x-user-id,x-session-tags" in " ".join(r["notes"]) for r in records)


async def test_trusted_platform_acts_for_the_user_in_x_user_id(secure_corpus):
    query = ["travel exceptions approvals restricted"]
    as_hank = await _search(secure_corpus, "platform", query, **{"x-user-id": "hr-hank@acme.test"})
    as_other = await _search(secure_corpus, "platform", query, **{"x-user-id": "zed@acme.test"})
    assert "hr-travel-exceptions-2026" in {_artifact(s["segment_uid"]) for s in as_hank}
    assert "hr-travel-exceptions-2026" not in {_artifact(s["segment_uid"]) for s in as_other}
    records = [r for r in read_records(secure_corpus.audit_log) if r["user"] == "hr-hank@acme.test"]
    assert records and all(r["acting_for"] and r["key_id"] == "k-platform" for r in records)
    link = next(s["source_url"] for s in as_hank if _artifact(s["segment_uid"]) == "hr-travel-exceptions-2026")
    assert parse_qs(urlsplit(link).query)["u"] == ["hr-hank@acme.test"]


async def test_session_tags_of_a_trusted_platform_restrict_results(secure_corpus):
    query = ["hotel expense limits for travel"]
    sales = await _search(secure_corpus, "platform", query,
                          **{"x-user-id": "sam@acme.test", "x-session-tags": '["department:sales", "Q4"]'})
    untagged = await _search(secure_corpus, "platform", query, **{"x-user-id": "sam@acme.test"})
    assert {_artifact(s["segment_uid"]) for s in sales} == {"sales-travel-playbook"}
    assert len({_artifact(s["segment_uid"]) for s in untagged}) > 2
    async with http_client(secure_corpus.mcp_url,
                           secure_corpus.headers("platform", **{"x-session-tags": "department:sales"})) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("rag_search", {"search_phrases": query})
    assert err.value.code == -32602 and "x-session-tags" in err.value.message


# ---------------------------------------------------------------------------- tenants, groups, sources
@pytest.mark.parametrize("query", QUERIES)
async def test_foreign_tenant_canaries_never_appear(secure_corpus, query):
    acme = json.dumps(await _search(secure_corpus, "alice", [query]))
    globex = await _search(secure_corpus, "gina", [query])
    assert GLOBEX_CANARY not in acme
    assert {_artifact(s["segment_uid"]) for s in globex} <= {"globex-travel"}
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("gina")) as client:
        raw = structured(await client.call_tool("rag_get_raw_results", {
            "username": "alice", "query": query, "sources": ["product-docs", "hr-policies"]}))
        probe = structured(await client.call_tool("verify_document_access",
                                                  {"segment_uid": "travel-policy-2026-update#0"}))
        resources = structured(await client.call_tool("rag_discover_resources", {"username": "alice"}))
    assert {_artifact(h["id"]) for h in raw["results"]["hits"]} <= {"globex-travel"}
    assert {e["source"] for e in raw["meta_data"]["source_errors"]} == {"hr-policies"}
    assert probe["has_access"] is False
    assert {r["id"] for r in resources["results"]["resources"]} == {"product-docs"}


async def test_alice_cannot_open_a_globex_segment(secure_corpus):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        probe = structured(await client.call_tool("verify_document_access", {"segment_uid": "globex-travel#0"}))
    assert probe == {"has_access": False, "refreshed_url": None, "access_level": None,
                     "error": "Document has been deleted or does not exist"}


async def test_group_restricted_documents_reach_only_members(secure_corpus):
    alice = await _search(secure_corpus, "alice", [QUERIES[2]])
    sec = await _search(secure_corpus, "sec", [QUERIES[2]])
    assert not SECURITY_TEAM_DOCS & {_artifact(s["segment_uid"]) for s in alice}
    assert SECURITY_TEAM_DOCS & {_artifact(s["segment_uid"]) for s in sec}
    alice_legal = json.dumps(await _search(secure_corpus, "alice", ["hotel expense settlement court"]))
    sec_legal = json.dumps(await _search(secure_corpus, "sec", ["hotel expense settlement court"]))
    assert LEGAL_CANARY not in alice_legal and LEGAL_CANARY in sec_legal


async def test_a_source_rule_hides_a_whole_source_from_non_members(secure_corpus):
    query = ["E214 localization recovery field notes wiki"]
    alice = {_artifact(s["segment_uid"]) for s in await _search(secure_corpus, "alice", query)}
    eng = {_artifact(s["segment_uid"]) for s in await _search(secure_corpus, "eng", query)}
    assert "wiki-e214-localization-recovery" not in alice
    assert "wiki-e214-localization-recovery" in eng
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        raw = structured(await client.call_tool("rag_get_raw_results", {
            "username": "alice", "query": query[0], "sources": ["engineering-wiki"]}))
        probe = structured(await client.call_tool("verify_document_access",
                                                  {"segment_uid": "wiki-e214-localization-recovery#0"}))
        ranked = structured(await client.call_tool("search_and_rank", {
            "user_query_text": query[0], "top_k_final_rank": 20,
            "filters": {"source_ids": ["engineering-wiki"]}}))
    assert raw["results"]["error"]["code"] == "unauthorized_source"
    assert probe["has_access"] is False
    assert ranked["results"] == []


async def test_synthesis_never_sees_hidden_passages(secure_corpus):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        body = structured(await client.call_tool("rag_get_synthesized_results", {
            "username": "sec", "query": "hotel expense settlement court", "top_k": 20}))
    assert LEGAL_CANARY not in json.dumps(body) and GLOBEX_CANARY not in json.dumps(body)


# ---------------------------------------------------------------------------- signed links
def _with(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


async def test_tampered_and_expired_links_are_refused(secure_corpus):
    segment = (await _search(secure_corpus, "alice", ["battery controller reset"]))[0]
    url = segment["source_url"]
    assert httpx.get(url, timeout=30).status_code == 200
    for change in ({"u": "sec"}, {"g": "security-team"}, {"t": "globex"}, {"exp": str(int(time.time()) + 10**6)},
                   {"sig": "A" * 43}):
        response = httpx.get(_with(url, **change), timeout=30)
        assert response.status_code == 403 and response.json()["error"] == "link tampered", change
    other_entry = url.replace(segment["segment_uid"].replace("#", "%23"), "hr-travel-exceptions-2026%230")
    assert httpx.get(other_entry, timeout=30).status_code == 403
    past = LinkSigner(secure_corpus.link_secret.encode(), secure_corpus.base_url, 60, now=lambda: time.time() - 3600)
    expired = httpx.get(past.sign(segment["segment_uid"], "acme", "alice"), timeout=30)
    assert expired.status_code == 403 and expired.json()["error"] == "link expired"
    assert httpx.get(url.split("?")[0], timeout=30).status_code == 403


async def test_links_recheck_access_and_existence_when_opened(secure_corpus):
    signer = LinkSigner(secure_corpus.link_secret.encode(), secure_corpus.base_url, 600)
    no_groups = httpx.get(signer.sign("hr-travel-exceptions-2026#0", "acme", "alice"), timeout=30)
    # the store itself hides an entry outside the user's groups: one answer for hidden and deleted
    assert no_groups.status_code == 403 and no_groups.json()["error"] == "forbidden"
    ks = KnowledgeStoreClient(secure_corpus.addresses["knowledge_store"]["grpc"],
                              interceptors=secure_corpus.operator("knowledge_store"))
    try:
        await ks.ingest("acme", "", [DocumentIn(ArtifactMeta(artifact_id="short-lived", title="Short lived",
                                                             source_id="hr-policies", source_type="policy"),
                                                "# Short lived\n\nThe zebra quartz travel memo expires soon.")])
        segment = next(s for s in await _search(secure_corpus, "alice", ["zebra quartz travel memo"])
                       if _artifact(s["segment_uid"]) == "short-lived")
        assert httpx.get(segment["source_url"], timeout=30).status_code == 200
        await ks.delete("acme", ["short-lived"])
    finally:
        await ks.close()
    gone = httpx.get(segment["source_url"], timeout=30)
    assert gone.status_code == 403 and gone.json() == no_groups.json()
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        probe = structured(await client.call_tool("verify_document_access", {"segment_uid": segment["segment_uid"]}))
    assert probe["has_access"] is False and "deleted" in probe["error"]


# ---------------------------------------------------------------------------- transport, audit, logs
def test_a_bad_host_header_is_refused_even_with_a_valid_token(secure_corpus):
    headers = {**secure_corpus.headers("alice"), "Host": "evil.example:8063"}
    assert _post(secure_corpus, headers).status_code == 421
    origin = {**secure_corpus.headers("alice"), "Origin": "http://evil.example"}
    assert _post(secure_corpus, origin).status_code == 403
    assert _post(secure_corpus, secure_corpus.headers("alice")).status_code == 200


async def test_audit_trail_records_decisions_and_never_secrets(secure_corpus):
    async with http_client(secure_corpus.mcp_url, secure_corpus.headers("alice")) as client:
        await client.call_tool("rag_get_raw_results", {"username": "alice", "query": "hotel limits",
                                                       "sources": ["legal"]})
        segments = structured(await client.call_tool("rag_search", {"search_phrases": ["hotel limits"]}))["segments"]
    httpx.get(segments[0]["source_url"], timeout=30)
    _post(secure_corpus, {"Authorization": "Bearer nrk_wrong_key_0123456789abcdefghijklmno"})
    records = read_records(secure_corpus.audit_log)
    denied = [r for r in records if r["tool"] == "rag_get_raw_results" and r["decision"] == "deny"]
    assert any(r["user"] == "alice" and r["resources"] == ["legal"] and "unauthorized_source" in r["reason"]
               for r in denied)
    assert any(r["event"] == "document" and r["decision"] == "allow" and segments[0]["segment_uid"] in r["entries"]
               for r in records)
    assert any(r["event"] == "auth" and r["reason"] == "unknown_key" for r in records)
    assert {"ts", "tenant", "user", "key_id", "tool", "resources", "entries", "decision", "reason"} <= set(records[0])
    text = secure_corpus.audit_log.read_text()
    logs = "".join(p.read_text(errors="replace") for p in secure_corpus.log_dir.glob("*.log"))
    for secret in secure_corpus.secrets():
        assert secret not in text and secret not in logs
    sig = parse_qs(urlsplit(segments[0]["source_url"]).query)["sig"][0]
    assert sig not in text and sig not in logs
    assert "eyJ" not in text
