"""MCP registries: cursor paging, version pinning at import, registries that need a token
(federation/registry.py against tests/support/registry_server.py, and through the CLI)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from services.rag_pipeline.federation.registry import (
    Registry,
    RegistryClient,
    RegistryError,
    add_registry,
    load_registries,
    registries_path,
)
from services.rag_pipeline.federation.sources import SourcesFileError, load_sources
from tests.support.registry_server import RegistryServer, server_json

SERVERS = [server_json(f"io.example/search-{i}", url=f"https://search{i}.example.com/mcp") for i in range(7)]
VERSIONS = [server_json("io.example/pinned", url=f"https://pinned.example.com/v{v}/mcp", version=v)
            for v in ("1.0.0", "1.1.0", "2.0.0")]


def test_browse_pages_one_registry_with_its_cursor() -> None:
    with RegistryServer(SERVERS, page_size=10) as reg:
        registry = Registry("r", reg.url)
        client = RegistryClient()
        seen: list[str] = []
        cursor = ""
        for _ in range(5):
            result = client.browse([registry], limit=3, cursor=cursor)
            assert not result.partial and len(result.servers) <= 3
            seen.extend(s.name for s in result.servers)
            cursor = result.next_cursors.get("r", "")
            if not cursor:
                break
        assert seen == [f"io.example/search-{i}" for i in range(7)]          # every server once, in order
        with pytest.raises(RegistryError, match="a cursor belongs to one registry"):
            client.browse([registry, Registry("s", reg.url)], cursor="abc")


@pytest.mark.parametrize("endpoint", [True, False])
def test_import_pins_a_version(tmp_path: Path, endpoint: bool) -> None:
    with RegistryServer(VERSIONS, page_size=2, versions_endpoint=endpoint) as reg:
        client = RegistryClient()
        registry = Registry("r", reg.url)
        assert client.find(registry, "io.example/pinned").version == "2.0.0"            # latest by default
        pinned = client.find(registry, "io.example/pinned", version="1.1.0")
        assert (pinned.version, pinned.remotes[0].url) == ("1.1.0", "https://pinned.example.com/v1.1.0/mcp")
        assert any("/versions/1.1.0" in r for r in reg.requests)                         # the endpoint was asked
        with pytest.raises(RegistryError, match=r"no version '9\.9\.9'.*versions listed: 1\.0\.0, 1\.1\.0, 2\.0\.0"):
            client.find(registry, "io.example/pinned", version="9.9.9")
        with pytest.raises(RegistryError, match="--version must be"):
            client.find(registry, "io.example/pinned", version="../../etc")


def test_a_registry_token_comes_from_env_or_file_goes_as_bearer_and_is_never_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    token = "reg-token-5f3a9c"
    sources = tmp_path / "sources.json"
    path = registries_path(sources)
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.delenv("NUCLEUS_RAG_AUDIT_LOG", raising=False)
    with RegistryServer(VERSIONS, token=token, versions_endpoint=True) as reg:

        def nucleus(*argv: str) -> tuple[int, str]:
            capsys.readouterr()
            code = main(["--data-dir", str(tmp_path), "sources", "--file", str(sources), *argv])
            captured = capsys.readouterr()
            return code, " ".join((captured.out + captured.err).split())

        monkeypatch.delenv("CORP_REGISTRY_TOKEN", raising=False)
        code, out = nucleus("registry", "add", "corp", reg.url, "--credential-env", "CORP_REGISTRY_TOKEN")
        assert code == 0 and "token from env CORP_REGISTRY_TOKEN (MISSING)" in out
        code, out = nucleus("browse", "--registry", "corp")
        assert code == 3 and "its token is missing (env CORP_REGISTRY_TOKEN" in out
        monkeypatch.setenv("CORP_REGISTRY_TOKEN", "wrong-token")
        code, out = nucleus("browse", "--registry", "corp")
        assert code == 3 and "HTTP 401" in out and "its token was refused" in out and "wrong-token" not in out
        monkeypatch.setenv("CORP_REGISTRY_TOKEN", token)
        code, out = nucleus("browse", "--registry", "corp", "--limit", "2")
        assert code == 0 and "io.example/pinned" in out and "next cursor" in out and "--cursor" in out
        cursor = out.split("--cursor ")[-1].split()[0]
        code, out = nucleus("browse", "--registry", "corp", "--limit", "2", "--cursor", cursor)
        assert code == 0 and "2.0.0" in out and "next cursor" not in out
        code, out = nucleus("registry", "list")
        assert code == 0 and "env CORP_REGISTRY_TOKEN (present)" in out
        code, out = nucleus("import", "io.example/pinned", "--registry", "corp", "--slug", "pinned",
                            "--version", "1.0.0", "--wait", "0")
        assert code == 0 and "imported io.example/pinned 1.0.0" in out
        assert all(a == f"Bearer {token}" for a in reg.authorizations[-3:])
        code, out = nucleus("import", "io.example/pinned", "--registry", "corp", "--slug", "pinned", "--wait", "0")
        assert code == 2 and "already exists" in out
        (tmp_path / "corp.token").write_text(token + "\n")
        code, out = nucleus("registry", "add", "corp", reg.url, "--credential-file", "corp.token")
        monkeypatch.delenv("CORP_REGISTRY_TOKEN")
        assert code == 0 and nucleus("browse", "--registry", "corp")[0] == 0          # read from the file
    source = load_sources(sources)[0]
    assert source.origin == "registry:corp/io.example/pinned@1.0.0" and source.url.endswith("/v1.0.0/mcp")
    assert token not in path.read_text() and "credential_file" in path.read_text()
    audit = (tmp_path / "audit.jsonl").read_text()
    assert "nucleus sources import" in audit and token not in audit


def test_a_registry_entry_never_holds_a_token(tmp_path: Path) -> None:
    path = registries_path(tmp_path / "sources.json")
    with pytest.raises(SourcesFileError, match="field 'credential_env'.*not the token itself"):
        add_registry(path, "corp", "https://reg.example.com", credential_env="abc-123.token")
    path.write_text(json.dumps({"registries": [{"name": "corp", "url": "https://reg.example.com",
                                                "token": "s3cr3t"}]}))
    with pytest.raises(SourcesFileError, match="field 'token': a token is never written here") as caught:
        load_registries(path)
    assert "s3cr3t" not in str(caught.value)
