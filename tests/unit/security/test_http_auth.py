"""The RAGPipeline HTTP app as `main.build` wires it: the SDK's bearer middleware answers 401
before any tool runs, RFC 9728 metadata names our JWT issuer, the public host is allowed."""
from __future__ import annotations

import httpx
import pytest

from services.rag_pipeline.main import build
from shared.service_runner import _transport_security
from shared.settings import RagPipelineSettings

from tests.support.auth_material import ALICE_KEY, ISSUER

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _app(config_file, tmp_path, **overrides):
    settings = RagPipelineSettings(knowledge_store_target="127.0.0.1:1", llm_target="127.0.0.1:1",
                                   audit_log=tmp_path / "audit.jsonl", link_secret="s" * 32, require_auth=True,
                                   auth_config=config_file, **overrides)
    spec = build(settings, stdio=False)
    app = spec.mcp_server.streamable_http_app(host="0.0.0.0",
                                              transport_security=_transport_security("0.0.0.0", spec.allowed_hosts))
    return spec, app


async def test_missing_or_bad_bearer_is_401_before_any_tool(config_file, tmp_path):
    spec, app = _app(config_file, tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:8063") as client:
        for headers in ({}, {"Authorization": "Bearer nrk_nope_0123456789abcdefghijklmnopqrs"},
                        {"Authorization": f"Basic {ALICE_KEY}"}):
            response = await client.post("/mcp", json=INIT, headers={**HEADERS, **headers})
            assert response.status_code == 401, headers
            assert response.headers["www-authenticate"].startswith("Bearer ")
    await spec.close()


async def test_public_base_url_adds_its_host_and_rfc9728_metadata_for_jwt(config_file, tmp_path):
    spec, app = _app(config_file, tmp_path, public_base_url="https://rag.example.test")
    assert "rag.example.test:*" in spec.allowed_hosts and "rag.example.test" in spec.allowed_hosts
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="https://rag.example.test") as client:
        challenge = (await client.post("/mcp", json=INIT, headers=HEADERS)).headers["www-authenticate"]
        metadata = (await client.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert "resource_metadata=" in challenge
    assert metadata["resource"] == "https://rag.example.test/mcp"
    assert [s.rstrip("/") for s in metadata["authorization_servers"]] == [ISSUER]
    await spec.close()


def test_require_auth_without_a_config_refuses_to_start(tmp_path):
    settings = RagPipelineSettings(require_auth=True, audit_log=tmp_path / "a.jsonl")
    with pytest.raises(SystemExit) as err:
        build(settings, stdio=False)
    assert "NUCLEUS_RAG_AUTH_CONFIG" in str(err.value)


def test_a_broken_auth_config_refuses_to_start_naming_the_file(tmp_path):
    broken = tmp_path / "auth.json"
    broken.write_text('{"api_keys": [{"key_id": "k"}]}')
    settings = RagPipelineSettings(require_auth=True, auth_config=broken, audit_log=tmp_path / "a.jsonl")
    with pytest.raises(SystemExit) as err:
        build(settings, stdio=False)
    assert str(broken) in str(err.value) and "sha256" in str(err.value)


async def test_bound_beyond_localhost_a_foreign_host_is_still_refused(config_file, tmp_path):
    spec, app = _app(config_file, tmp_path, public_base_url="https://rag.example.test")
    auth = {**HEADERS, "Authorization": f"Bearer {ALICE_KEY}"}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://evil.example") as client:
            assert (await client.post("/mcp", json=INIT, headers=auth)).status_code == 421
            ok = await client.post("/mcp", json=INIT, headers={**auth, "Host": "rag.example.test"})
            assert ok.status_code == 200
            bad_origin = await client.post("/mcp", json=INIT, headers={**auth, "Host": "rag.example.test",
                                                                        "Origin": "https://evil.example"})
            assert bad_origin.status_code == 403
    await spec.close()
