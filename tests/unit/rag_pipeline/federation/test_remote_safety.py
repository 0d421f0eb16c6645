"""Remote calls: URL rules, address checks, contract detection, error classification."""
from __future__ import annotations

import asyncio

import pytest

from services.rag_pipeline.federation.remote import (
    RemoteError,
    RemoteSource,
    ToolInfo,
    check_destination,
    check_url_syntax,
    detect_contract,
)
from services.rag_pipeline.federation.sources import parse_source


@pytest.mark.parametrize("url,ok", [
    ("https://rag.example.com/mcp", True),
    ("http://127.0.0.1:8063/mcp", True),
    ("file:///etc/passwd", False),
    ("gopher://x/", False),
    ("https:///mcp", False),
    ("https://u:p@rag.example.com/mcp", False),
    ("https://rag.example.com:99999/mcp", False),
])
def test_url_syntax(url: str, ok: bool) -> None:
    assert (check_url_syntax(url) is None) is ok


def source(url: str, **extra: object):
    return parse_source({"id": "s", "url": url, **extra})


@pytest.mark.parametrize("url,why", [
    ("http://169.254.169.254/latest/meta-data", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://169.254.10.1:8080/mcp", "link-local"),
    ("http://[fe80::1]/mcp", "link-local"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://0.0.0.0:80/mcp", "unspecified"),
])
def test_forbidden_destinations_are_refused(url: str, why: str) -> None:
    with pytest.raises(RemoteError) as info:
        asyncio.run(check_destination(source(url)))
    assert info.value.kind == "refused" and why in info.value.message and "allow_private_network" in str(info.value)


def test_loopback_is_allowed_and_private_network_flag_lifts_the_refusal() -> None:
    assert asyncio.run(check_destination(source("http://127.0.0.1:1/mcp"))) == ["127.0.0.1"]
    assert "127.0.0.1" in asyncio.run(check_destination(source("http://localhost:1/mcp")))
    assert asyncio.run(check_destination(source("http://169.254.169.254/", allow_private_network=True))) == []


def test_a_refused_destination_is_never_connected() -> None:
    remote = RemoteSource(source("http://169.254.169.254/mcp"))
    with pytest.raises(RemoteError) as info:
        asyncio.run(remote.call_tool("rag_search", {"search_phrases": ["q"]}, deadline_s=1))
    assert info.value.kind == "refused" and remote.connects == 0


def test_a_missing_credential_is_reported_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NUCLEUS_TEST_ABSENT_TOKEN", raising=False)
    remote = RemoteSource(source("http://127.0.0.1:9/mcp", credential_env="NUCLEUS_TEST_ABSENT_TOKEN"))
    with pytest.raises(RemoteError) as info:
        asyncio.run(remote.list_tools(deadline_s=2))
    assert info.value.kind == "credential" and "NUCLEUS_TEST_ABSENT_TOKEN" in info.value.message


def test_a_dead_port_is_a_connection_error_within_the_deadline() -> None:
    remote = RemoteSource(source("http://127.0.0.1:9/mcp", timeout_s=2))
    with pytest.raises(RemoteError) as info:
        asyncio.run(remote.call_tool("x", {}, deadline_s=2))
    assert info.value.kind in ("connection", "timeout") and info.value.source_id == "s"


def test_error_messages_are_redacted() -> None:
    err = RemoteError("s", "protocol", "failed with Authorization: Bearer abcdefghijkl123")
    assert "abcdefghijkl123" not in str(err)


def test_contract_detection() -> None:
    trio = ["rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results"]
    assert detect_contract([ToolInfo(n) for n in trio]).label == "seed000"
    assert detect_contract(["rag_search", *trio]).label == "seed000+seed002"
    both = detect_contract(["rag_search", "rag_get_raw_results"])
    assert both.seed002 and not both.seed000 and both.partial000 == ("rag_get_raw_results",)
    none = detect_contract(["add", "echo"])
    assert not none.is_rag and none.label == "tools"


def test_seed000_needs_only_its_two_required_tools_and_synthesis_is_optional() -> None:
    two = detect_contract(["rag_discover_resources", "rag_get_raw_results"])
    assert two.seed000 and two.is_rag and not two.synthesis and two.label == "seed000" and two.partial000 == ()
    trio = detect_contract(["rag_discover_resources", "rag_get_raw_results", "rag_get_synthesized_results"])
    assert trio.seed000 and trio.synthesis
    lone = detect_contract(["rag_get_raw_results", "rag_get_synthesized_results"])
    assert not lone.is_rag and not lone.synthesis
    assert lone.partial000 == ("rag_get_raw_results", "rag_get_synthesized_results")


def test_the_pool_keeps_a_session_across_metadata_changes_and_retires_old_connections() -> None:
    from services.rag_pipeline.federation.remote import RemotePool

    async def run() -> None:
        pool = RemotePool()
        first = pool.get(source("http://127.0.0.1:1/mcp"))
        same = pool.get(source("http://127.0.0.1:1/mcp", reputation=0.9, timeout_s=2, groups=["x"]))
        assert same is first and first.source.reputation == 0.9        # limits / metadata follow
        moved = source("http://127.0.0.1:2/mcp")
        other = pool.get(moved)
        assert other is not first
        assert pool.get(source("http://127.0.0.1:1/mcp")) is first    # an older snapshot keeps its session
        pool.retain((moved,))
        await asyncio.sleep(0.05)
        assert pool.get(moved) is other and pool.get(source("http://127.0.0.1:1/mcp")) is not first
        await pool.close()

    asyncio.run(run())
