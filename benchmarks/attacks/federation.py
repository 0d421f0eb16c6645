"""Family (f): federation — the secure stack federating independent RAG MCP servers whose answers
depend on who asks (benchmarks/peruser_rag.py), itself, and hostile remotes.

    cross-user      eng and sec (acme) discover and search a per-user seed-000 server one right
                    after the other: each sees only its own resources; the server only ever
                    hears the verified users
    cross-tenant    gina (globex) neither lists, searches, proxies nor verifies acme's sources
    forged identity a `username` argument, an `x-user-id` header from a caller that is not a
                    trusted platform, and a proxy call's `username` never reach a remote as sent
    refusals        a resource that is not the caller's is asked for and reported `refused`
    cycles          a source that is the stack itself answers, with the loop reported
    vectors         a caller that is not a verified peer stack asks for its hits' vectors (`_meta`
                    io.nucleus/vectors) with the stack's fingerprint, or a wrong one: hits, no vectors
    destinations    link-local and cloud-metadata sources are refused before any connection
    hostile remotes oversized, dripping, invalid JSON and failing answers are bounded and
                    reported; prompt-injection text is returned as data and nothing is done
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.attacks.tally import Family
from benchmarks.secure_stack import SecureStack

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_TIMEOUT_S = 2.0


def _start(mode: str, folder: Path) -> tuple[subprocess.Popen, dict]:
    ready = folder / f"{mode}.json"
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.peruser_rag", "--ready-file", str(ready),
                             "--mode", mode], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if ready.exists():
            return proc, json.loads(ready.read_text())
        if proc.poll() is not None:
            raise RuntimeError(f"peruser_rag --mode {mode} exited with {proc.returncode}")
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError(f"peruser_rag --mode {mode} not ready")


class _Mcp:
    """The official MCP client as one caller of the stack."""

    def __init__(self, stack: SecureStack, who: str, **headers: str) -> None:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        self._client = Client(streamable_http_client(stack.mcp_url, http_client=create_mcp_http_client(
            headers=stack.headers(who, **headers))))

    async def __aenter__(self) -> "_Mcp":
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._client.__aexit__(*exc)

    async def call(self, tool: str, args: dict) -> tuple[bool, Any]:
        """(ok, structured content or the error text)."""
        from mcp.shared.exceptions import MCPError

        try:
            result = await self._client.call_tool(tool, args)
        except MCPError as err:
            return False, str(err)
        if result.is_error:
            return False, " ".join(getattr(c, "text", "") for c in result.content)
        return True, result.structured_content

    async def raw(self, tool: str, args: dict, meta: dict) -> Any:
        """The whole tool result (its `_meta` included) of a call carrying `meta`."""
        return await self._client.call_tool(tool, args, meta=meta)

    async def tools(self) -> set[str]:
        return {t.name for t in (await self._client.list_tools()).tools}


def _reports(out: Any) -> dict[str, dict]:
    rows = (out.get("sources") or (out.get("meta_data") or {}).get("sources") or []) if isinstance(out, dict) else []
    return {r["source_id"]: r for r in rows}


def _remote_ids(out: Any, server: str) -> set[str]:
    resources = ((out or {}).get("results") or {}).get("resources", []) if isinstance(out, dict) else []
    return {r["id"] for r in resources if r.get("serverId") == server}


def _server_ids(out: Any) -> list:
    """The server ids of a discovery answer's resources, sorted (for a check's detail)."""
    return sorted({r.get("serverId") for r in ((out or {}).get("results") or {}).get("resources", [])})


async def _seen(url: str) -> list[dict]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with Client(streamable_http_client(url)) as client:
        return (await client.call_tool("seen", {})).structured_content["seen"]


async def _run(fam: Family, stack: SecureStack, urls: dict[str, str]) -> None:
    # -- cross-user
    fam.section = "cross-user"
    async with _Mcp(stack, "eng") as eng, _Mcp(stack, "sec") as sec:
        ok_e, d_eng = await eng.call("rag_discover_resources", {"username": "sec"})
        ok_s, d_sec = await sec.call("rag_discover_resources", {"username": "eng"})
        fam.check("each caller discovers its own remote resources", ok_e and ok_s
                  and _remote_ids(d_eng, "peruser") == {"peruser:eng-private", "peruser:shared"}
                  and _remote_ids(d_sec, "peruser") == {"peruser:sec-private", "peruser:shared"},
                  f"eng {sorted(_remote_ids(d_eng, 'peruser'))}, sec {sorted(_remote_ids(d_sec, 'peruser'))}", calls=2)
        ok_e, r_eng = await eng.call("rag_get_raw_results", {"username": "sec", "query": "battery controller",
                                                             "sources": ["peruser"]})
        titles = {h.get("title") for h in ((r_eng or {}).get("results") or {}).get("hits", [])} if ok_e else set()
        fam.check("a search goes out as its caller only", ok_e and "eng private notes" in titles
                  and "sec private notes" not in titles, f"titles {sorted(t for t in titles if t)}")
        # -- refusals
        fam.section = "refusals"
        ok, refused = await eng.call("rag_get_raw_results", {"username": "eng", "query": "battery",
                                                             "sources": ["peruser:sec-private"]})
        rep = _reports(refused).get("peruser", {})
        fam.check("another user's resource is asked for and reported refused", ok
                  and rep.get("status") == "refused" and rep.get("error_code") == "unauthorized_source",
                  f"report {rep}", refused=1)
        # -- forged identity
        fam.section = "forged identity"
        # a proxy call naming another user: the remote hears the verified user (checked below)
        await eng.call("peruser__rag_get_raw_results", {"username": "sec", "query": "battery",
                                                        "sources": ["sec-private"]})
    async with _Mcp(stack, "eng", **{"x-user-id": "sec", "x-session-tags": '["admin"]'}) as forged:
        await forged.call("rag_search", {"search_phrases": ["battery"], "sources": ["hdr"]})
    seen = await _seen(urls["peruser"])
    users = {s.get("username") for s in seen}
    fam.check("the remote only ever hears verified users", users <= {"eng", "sec"} and {"eng", "sec"} <= users,
              f"usernames heard {sorted(u for u in users if u)}", calls=len(seen))
    hdr = [s for s in await _seen(urls["hdr"]) if s["tool"] == "rag_search"]
    fam.check("a caller's own x-user-id never reaches a trusted-header source",
              bool(hdr) and all(s.get("x-user-id") == "eng" for s in hdr),
              f"x-user-id heard {[s.get('x-user-id') for s in hdr]}")
    # -- cross-tenant
    fam.section = "cross-tenant"
    async with _Mcp(stack, "gina") as gina:
        ok, found = await gina.call("rag_discover_resources", {"username": "eng"})
        fam.check("another tenant discovers none of the tenant's sources", ok
                  and not any(_remote_ids(found, s) for s in ("peruser", "hdr", "hostile", "self")),
                  f"servers {_server_ids(found)}")
        ok, out = await gina.call("rag_search", {"search_phrases": ["battery"], "sources": ["peruser"]})
        fam.check("another tenant cannot search the tenant's source", not ok and "unknown source" in str(out),
                  str(out)[:200], refused=1)
        names = await gina.tools()
        fam.check("another tenant lists none of the tenant's proxy tools",
                  not any(n.startswith(("peruser__", "hdr__", "hostile__", "self__")) for n in names),
                  f"{len(names)} tools")
        ok, out = await gina.call("peruser__seen", {})
        fam.check("another tenant cannot call the tenant's proxy tools", not ok, str(out)[:200], refused=1)
        ok1, a = await gina.call("verify_document_access", {"segment_uid": "peruser:seg-shared"})
        ok2, b = await gina.call("verify_document_access", {"segment_uid": "nosuch:seg-shared"})
        fam.check("another tenant's verification looks like a missing document", ok1 and ok2 and a == b
                  and not a.get("has_access"), f"{a} vs {b}", calls=2)
    # -- cycles, destinations, hostile remotes
    async with _Mcp(stack, "eng") as eng:
        fam.section = "cycles"
        ok, out = await eng.call("rag_get_raw_results", {"username": "eng", "query": "battery",
                                                         "sources": ["self"]})
        rep = _reports(out).get("self", {})
        fam.check("a stack federating itself answers and reports the loop",
                  ok and rep.get("status") == "ok" and "federation loop" in (rep.get("note") or ""), f"report {rep}")
        fam.section = "vectors"
        ok, fp = await eng.call("nucleus_model_fingerprint", {})
        digest = fp.get("digest", "") if ok and isinstance(fp, dict) else ""
        _, found = await eng.call("rag_discover_resources", {"username": "eng"})
        local = sorted(_remote_ids(found, "local"))            # the stack's own resources
        for label, asked in (("this stack's own", digest), ("a wrong", "0" * 32)):
            got = await eng.raw("rag_get_raw_results", {"username": "eng", "query": "battery", "sources": local},
                                {"io.nucleus/vectors": {"fingerprint": asked}})
            hits = ((got.structured_content or {}).get("results") or {}).get("hits", []) if not got.is_error else []
            sent = (got.meta or {}).get("io.nucleus/vectors")
            error = " ".join(getattr(c, "text", "") for c in got.content)[:200] if got.is_error else ""
            fam.check(f"a caller that is not a peer stack, asking vectors with {label} fingerprint, gets hits "
                      "and no vectors", bool(digest) and bool(hits) and sent is None,
                      f"{len(hits)} hits, vectors {'sent' if sent else 'none'}{', ' + error if error else ''}"
                      f"{'' if digest else ', no fingerprint: ' + str(fp)[:200]}", calls=2, refused=1)
        fam.section = "destinations"
        for sid in ("metadata", "linklocal"):
            ok, out = await eng.call("rag_search", {"search_phrases": ["battery"], "sources": [sid]})
            rep = _reports(out).get(sid, {})
            fam.check(f"a {sid} destination is refused before connecting", ok and rep.get("status") == "error"
                      and "allow_private_network" in (rep.get("error_message") or ""), f"report {rep}", refused=1)
        fam.section = "hostile remotes"
        for kind, status in (("oversize", "error"), ("badjson", "error"), ("error", "error"), ("drip", "timeout"),
                             ("inject", "ok")):
            started = time.monotonic()
            ok, out = await eng.call("rag_search", {"search_phrases": [f"{kind} battery"], "sources": ["hostile"]})
            took = time.monotonic() - started
            rep = _reports(out).get("hostile", {})
            passed = ok and rep.get("status") == status and took < HOSTILE_TIMEOUT_S + 3.0
            if kind == "inject":
                segments = (out or {}).get("segments", []) if ok else []
                passed = passed and any("IGNORE ALL PREVIOUS" in s.get("raw_text", "") for s in segments)
            fam.check(f"a hostile remote ({kind}) is bounded and reported {status}", passed,
                      f"report {rep}, {took:.1f}s")


def run(fam: Family, stack: SecureStack) -> None:
    data_dir = stack.auth_config.parent
    path = data_dir / "sources.json"
    before = path.read_text() if path.is_file() else None
    with tempfile.TemporaryDirectory(prefix="nucleus-federation-attack-") as tmp:
        procs: list[subprocess.Popen] = []
        try:
            urls = {}
            for name, mode in (("peruser", "seed000"), ("hdr", "seed002"), ("hostile", "hostile")):
                proc, ready = _start(mode, Path(tmp))
                procs.append(proc)
                urls[name] = ready["url"]
            secret = data_dir / "secrets" / "acme" / "self"
            secret.parent.mkdir(parents=True, exist_ok=True)
            secret.write_text(stack.keys["eng"])
            secret.chmod(0o600)
            sources = [
                {"id": "peruser", "url": urls["peruser"], "tenants": ["acme"], "groups": ["engineering", "legal"]},
                {"id": "hdr", "url": urls["hdr"], "tenants": ["acme"], "groups": ["engineering"],
                 "identity": "headers", "trusted": True},
                {"id": "hostile", "url": urls["hostile"], "tenants": ["acme"], "groups": ["engineering"],
                 "timeout_s": HOSTILE_TIMEOUT_S, "max_response_bytes": 1_000_000},
                {"id": "self", "url": stack.mcp_url, "tenants": ["acme"], "groups": ["engineering"],
                 "credential_secret": "self", "timeout_s": 20},
                {"id": "metadata", "url": "http://169.254.169.254/mcp", "tenants": ["acme"], "groups": ["engineering"]},
                {"id": "linklocal", "url": "http://169.254.10.1:8080/mcp", "tenants": ["acme"],
                 "groups": ["engineering"]}]
            ids = {s["id"] for s in sources}
            _write_sources(path, json.dumps({"sources": sources}))
            _wait_loaded(path, lambda loaded: loaded >= ids)
            asyncio.run(_run(fam, stack, urls))
            # The stack's own sources again: a running stack (`--use-running`) is attacked again later.
            _write_sources(path, before or json.dumps({"sources": []}))
            _wait_loaded(path, lambda loaded: not loaded & ids)
        finally:
            for p in procs:
                p.kill()
                p.wait(5)


def _write_sources(path: Path, text: str) -> None:
    tmp_file = path.with_suffix(".tmp")
    tmp_file.write_text(text)
    os.replace(tmp_file, path)


def _wait_loaded(path: Path, loaded: Callable[[set[str]], bool], timeout_s: float = 30.0) -> None:
    """Until the running RAGPipeline has loaded the sources file: `loaded` is true of the source ids
    of its published status."""
    status = path.with_name(path.name + ".status.json")
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if loaded({s["id"] for s in json.loads(status.read_text()).get("sources", [])}):
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the RAGPipeline did not load {path} within {timeout_s}s")
