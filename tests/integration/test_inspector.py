"""Interop: the official MCP Inspector CLI (pinned in package.json) lists the tools of the running
RAGPipeline server and calls rag_search over streamable HTTP with a bearer key.

Skipped, with the reason, when node/npm are not installed or `npm ci` cannot install the pinned
version (e.g. offline without an npm cache)."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.integration.secure_stack import ROOT

pytestmark = pytest.mark.integration
PACKAGE = "@modelcontextprotocol/inspector"
BIN = "mcp-inspector"


def _pinned_version() -> str:
    return json.loads((ROOT / "package.json").read_text())["devDependencies"][PACKAGE]


def _installed_version() -> str | None:
    manifest = ROOT / "node_modules" / PACKAGE / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.exists() else None


@pytest.fixture(scope="module")
def npx() -> str:
    npm, npx = shutil.which("npm"), shutil.which("npx")
    if not npm or not npx or not shutil.which("node"):
        pytest.skip("node/npm/npx are not installed: the MCP Inspector CLI interop test needs them")
    if _installed_version() != _pinned_version():
        try:
            done = subprocess.run([npm, "ci", "--prefer-offline", "--no-audit", "--no-fund"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.skip("`npm ci` did not finish within 600 s (no network or npm cache?)")
        if done.returncode != 0:
            pytest.skip(f"`npm ci` could not install {PACKAGE}@{_pinned_version()}: {done.stderr.strip()[-400:]}")
    assert _installed_version() == _pinned_version()
    return npx


def _inspect(npx: str, stack, *args: str) -> dict:
    command = [npx, "--no", "--", BIN, "--cli", stack.mcp_url, "--transport", "http",
               "--header", f"Authorization: Bearer {stack.keys['alice']}", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_inspector_lists_the_rag_tools(npx, secure_corpus):
    listed = _inspect(npx, secure_corpus, "--method", "tools/list")
    tools = {t["name"]: t for t in listed["tools"]}
    assert {"rag_search", "verify_document_access", "rag_discover_resources", "rag_get_raw_results",
            "rag_get_synthesized_results", "search_and_rank"} <= set(tools)
    assert tools["rag_search"]["inputSchema"]["properties"]["search_phrases"]["maxItems"] == 5


def test_inspector_calls_rag_search(npx, secure_corpus):
    result = _inspect(npx, secure_corpus, "--method", "tools/call", "--tool-name", "rag_search",
                      "--tool-arg", 'search_phrases=["how do I reset the Pallas battery controller"]')
    assert not result.get("isError"), result
    segments = result["structuredContent"]["segments"]
    assert result["structuredContent"]["status"] == "success" and segments
    assert segments[0]["segment_uid"].startswith("pallas-battery-guide")


def test_inspector_without_a_key_is_refused(npx, secure_corpus):
    done = subprocess.run([npx, "--no", "--", BIN, "--cli", secure_corpus.mcp_url, "--transport", "http",
                           "--method", "tools/list"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "rag_search" not in done.stdout
