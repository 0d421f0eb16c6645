"""MCP registries: parsing v0.1 and v0 listings, cursor pagination, refusals, partial results."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.rag_pipeline.federation.registry import (
    OFFICIAL_META,
    Registry,
    RegistryClient,
    RegistryError,
    add_registry,
    import_server,
    load_registries,
    parse_listing,
    registries_path,
    source_from_server,
)
from services.rag_pipeline.federation.sources import SourcesFileError, load_sources
from tests.support.registry_server import RegistryServer, server_json

SERVERS = [server_json(f"io.example/search-{i}", url=f"https://search{i}.example.com/mcp") for i in range(5)] + [
    server_json("io.example/npm-only", packages=True),
    server_json("io.example/sse-only", url="https://sse.example.com/sse", remote_type="sse"),
    server_json("io.example/templated", url="https://{tenant}.example.com/mcp"),
]


def test_parse_a_v01_page() -> None:
    data = {"servers": [{"server": server_json("io.example/a", url="https://a.example/mcp", title="A search"),
                         "_meta": {OFFICIAL_META: {"status": "active", "updatedAt": "2026-02-03T04:05:06Z",
                                                   "isLatest": True}}}],
            "metadata": {"nextCursor": "abc", "count": 1}}
    servers, cursor = parse_listing("official", data)
    s = servers[0]
    assert (s.name, s.version, s.title, s.status, s.updated_at, cursor) == (
        "io.example/a", "1.0.0", "A search", "active", "2026-02-03T04:05:06Z", "abc")
    assert s.icon == "https://example.com/icon.png" and s.remotes[0].type == "streamable-http"
    assert s.needs_secret_header() == ["Authorization"] and s.is_latest is True
    with pytest.raises(RegistryError, match="not a server list"):
        parse_listing("official", {"items": []})


def test_importability_and_reasons() -> None:
    by_name = {s.name: s for s in parse_listing("r", {"servers": [{"server": s} for s in SERVERS]})[0]}
    assert by_name["io.example/search-0"].importable()[0].url == "https://search0.example.com/mcp"
    remote, why = by_name["io.example/npm-only"].importable()
    assert remote is None and "only packages[]" in why and "npm:@example/npm-only" in why
    assert "only sse" in by_name["io.example/sse-only"].importable()[1]
    assert "template" in by_name["io.example/templated"].importable()[1]
    with pytest.raises(RegistryError, match="cannot be imported: only packages"):
        source_from_server(by_name["io.example/npm-only"], slug="npm", groups=[])
    with pytest.raises(SourcesFileError, match="lower-case"):
        source_from_server(by_name["io.example/search-0"], slug="Bad-Slug", groups=[])


@pytest.mark.parametrize("api", ["v0.1", "v0"])
def test_browse_follows_cursors_on_both_api_versions(api: str) -> None:
    with RegistryServer(SERVERS, api=api, page_size=2) as reg:
        result = RegistryClient().browse([Registry("r", reg.url)], search="search", limit=30)
        assert sorted(s.name for s in result.servers) == [f"io.example/search-{i}" for i in range(5)]
        assert not result.partial
        cursors = [r for r in reg.requests if "cursor=" in r]
        assert len(cursors) == 2                                # 5 servers, pages of 2
        assert all(s.version == "1.0.0" for s in result.servers)
        if api == "v0":
            assert any(r.startswith("/v0.1/") for r in reg.requests)   # v0.1 tried first, then v0


def test_one_registry_failing_gives_partial_results_marked_with_it() -> None:
    with RegistryServer(SERVERS, page_size=10) as good, RegistryServer(SERVERS) as bad:
        bad.fail = 503
        result = RegistryClient().browse([Registry("good", good.url), Registry("bad", bad.url)], limit=3)
    assert result.partial and set(result.errors) == {"bad"} and "503" in result.errors["bad"]
    assert len(result.servers) == 3 and {s.registry for s in result.servers} == {"good"}
    dead = RegistryClient(timeout_s=2).browse([Registry("dead", "http://127.0.0.1:9")])
    assert "cannot be reached" in dead.errors["dead"] and dead.servers == []


def test_find_and_import_into_the_sources_file(tmp_path: Path) -> None:
    sources = tmp_path / "sources.json"
    with RegistryServer(SERVERS, page_size=2) as reg:
        client = RegistryClient()
        server = client.find(Registry("r", reg.url), "io.example/search-3")
        with pytest.raises(RegistryError, match="no server named"):
            client.find(Registry("r", reg.url), "io.example/absent")
    source = import_server(sources, server, slug="search3", groups=["legal"], credential_env="SEARCH3_TOKEN")
    assert source.url == "https://search3.example.com/mcp" and source.origin == "registry:r/io.example/search-3@1.0.0"
    loaded = load_sources(sources)
    assert [s.id for s in loaded] == ["search3"] and loaded[0].groups == frozenset({"legal"})
    with pytest.raises(SourcesFileError, match="already exists"):
        import_server(sources, server, slug="search3", groups=[])
    assert len(json.loads(sources.read_text())["sources"]) == 1


def test_registries_file(tmp_path: Path) -> None:
    path = registries_path(tmp_path / "sources.json")
    assert load_registries(path) == []
    add_registry(path, "official", "https://registry.modelcontextprotocol.io/")
    add_registry(path, "corp", "http://127.0.0.1:8080")
    add_registry(path, "official", "https://registry.example.org")          # replaced
    assert [(r.name, r.url) for r in load_registries(path)] == [("corp", "http://127.0.0.1:8080"),
                                                                ("official", "https://registry.example.org")]
    with pytest.raises(SourcesFileError, match="field 'url'"):
        add_registry(path, "x", "ftp://registry.example.org")
    with pytest.raises(SourcesFileError, match="field 'name'"):
        add_registry(path, "Bad Name", "https://registry.example.org")
    path.write_text('{"registries": [{"name": "ok", "url": "file:///etc"}]}')
    with pytest.raises(SourcesFileError, match=r"registries\[0\]: field 'url'"):
        load_registries(path)
