"""What a call to a remote source costs: pooled sessions, proxy tools, concurrency.

    python -m lab.federation_calls [--calls 200] [--clients 8]

Starts a small MCP server (official SDK, bearer token required) standing for a remote source,
and a RAGPipeline whose sources file lists it (authentication off: the local principal, an
admin, sees every source), then measures:

    direct        an MCP client session calling the remote's `search` tool itself, on a negotiated
                  2026-07-28 session ("auto") and on a 2025-11-25 handshake session ("legacy")
    pooled        federation/remote.py RemoteSource: the pooled session the fan-out uses
    new session   a fresh RemoteSource (connect + handshake) for every call: what pooling saves
    proxy         an MCP client calling `bench__search` on RAGPipeline (proxy tool → remote), both modes
    proxy x N     N clients calling the proxy tool at once: calls per second and p50

`search` answers 8 segments of ~600 characters (a typical rag_search answer). Figures are
per call, in milliseconds.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV = "NUCLEUS_BENCH_REMOTE_TOKEN"
TEXT = ("Slow-wave sleep supports the consolidation of declarative memory, and sleep deprivation impairs "
        "hippocampal encoding of new information; the effect is dose dependent. ") * 4


def serve(ready_file: str) -> None:
    """The remote source: `search` (8 segments) and `add`, bearer token required."""
    import logging

    import uvicorn
    from mcp.server.mcpserver import MCPServer

    logging.getLogger("mcp").setLevel(logging.WARNING)

    mcp = MCPServer("bench-remote")

    @mcp.tool(name="search", description="8 fixed segments")
    async def search(query: str) -> dict[str, Any]:
        return {"status": "success", "segments": [
            {"segment_uid": f"s{i}", "raw_text": TEXT[: 600], "headline": f"{query} {i}", "score": 10.0 - i}
            for i in range(8)]}

    app = mcp.streamable_http_app(host="127.0.0.1")
    token = os.environ[TOKEN_ENV]

    async def guarded(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope.get("headers") or []).get(b"authorization", b"") != \
                f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(guarded, log_level="warning", lifespan="on", access_log=False))

    async def run() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        Path(ready_file).write_text(json.dumps({"url": f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"}))
        await task

    asyncio.run(run())


def _wait(path: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> dict:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text())
        if proc.poll() is not None:
            raise SystemExit(f"a benchmark process exited with {proc.returncode}")
        time.sleep(0.05)
    raise SystemExit(f"not ready in {timeout_s}s")


def _ms(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


async def _timed(call, n: int) -> list[float]:
    for _ in range(5):
        await call()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t)
    return out


async def measure(remote_url: str, rag_url: str, token: str, calls: int, clients: int) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from services.rag_pipeline.federation.remote import RemoteSource
    from services.rag_pipeline.federation.sources import parse_source

    os.environ[TOKEN_ENV] = token
    source = parse_source({"id": "bench", "url": remote_url, "credential_env": TOKEN_ENV, "timeout_s": 10})
    args = {"query": "sleep memory"}
    out: dict[str, Any] = {}

    def client(url: str, headers: dict[str, str], mode: str = "legacy") -> Client:
        return Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)), mode=mode)

    for mode, label in (("auto", "direct 2026"), ("legacy", "direct 2025")):
        async with client(remote_url, {"Authorization": f"Bearer {token}"}, mode) as c:
            out[label] = _ms(await _timed(lambda: c.call_tool("search", args), calls))
    pooled = RemoteSource(source)
    out["pooled"] = _ms(await _timed(lambda: pooled.call_tool("search", args, deadline_s=10), calls))
    out["pooled_sessions"] = pooled.connects
    await pooled.close()

    async def fresh() -> None:
        remote = RemoteSource(source)
        try:
            await remote.call_tool("search", args, deadline_s=10)
        finally:
            await remote.close()
    out["new session"] = _ms(await _timed(fresh, max(20, calls // 5)))
    for mode, label in (("auto", "proxy 2026"), ("legacy", "proxy 2025")):
        async with client(rag_url, {}, mode) as c:
            out[label] = _ms(await _timed(lambda: c.call_tool("bench__search", args), calls))

    latencies: list[float] = []

    async def one_client() -> None:
        async with client(rag_url, {}) as c:
            await c.call_tool("bench__search", args)
            for _ in range(max(1, calls // clients)):
                t = time.perf_counter()
                result = await c.call_tool("bench__search", args)
                latencies.append(time.perf_counter() - t)
                assert not result.is_error
    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    wall = time.perf_counter() - started
    out[f"proxy x {clients}"] = _ms(latencies)
    out["proxy_calls_per_s"] = len(latencies) / wall
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="nucleus-federation-bench-") as tmp:
        data = Path(tmp)
        env = {**os.environ, TOKEN_ENV: token, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        procs = [subprocess.Popen([sys.executable, "-m", "lab.federation_calls", "--serve",
                                   str(data / "remote.json")], cwd=ROOT, env=env)]
        try:
            remote_url = _wait(data / "remote.json", procs[0])["url"]
            sources = data / "sources.json"
            sources.write_text(json.dumps({"sources": [{"id": "bench", "kind": "tools", "url": remote_url,
                                                        "credential_env": TOKEN_ENV, "timeout_s": 10}]}))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "services.rag_pipeline.main", "--grpc-port", "0", "--mcp-port", "0",
                 "--ready-file", str(data / "rag.json")], cwd=ROOT, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**env, "NUCLEUS_DATA_DIR": str(data), "NUCLEUS_SOURCES_FILE": str(sources),
                     "NUCLEUS_RAG_RATE_LIMIT_PER_S": "0", "NUCLEUS_RAG_KNOWLEDGE_STORE_TARGET": "127.0.0.1:9",
                     "NUCLEUS_RAG_LLM_TARGET": "127.0.0.1:9", "NUCLEUS_OTEL_TRACE_FILE": "false",
                     "NUCLEUS_OTEL_METRICS_FILE": "false", "NUCLEUS_RAG_LOG_LEVEL": "WARNING"}))
            rag_url = _wait(data / "rag.json", procs[1])["mcp"]
            status = Path(str(sources) + ".status.json")
            end = time.monotonic() + 60
            while time.monotonic() < end:
                st = json.loads(status.read_text()) if status.exists() else {}
                if any(s.get("status", {}).get("state") == "connected" for s in st.get("sources", [])):
                    break
                time.sleep(0.1)
            figures = asyncio.run(measure(remote_url, rag_url, token, args.calls, args.clients))
        finally:
            for p in reversed(procs):
                p.terminate()
                p.wait(10)
    print(f"remote calls, {args.calls} per row (ms):")
    for name, value in figures.items():
        if isinstance(value, tuple):
            print(f"  {name:<14} p50 {value[0]:7.2f}   p95 {value[1]:7.2f}")
    print(f"  pooled: {figures['pooled_sessions']} MCP session(s) for {args.calls + 5} calls")
    print(f"  proxy x {args.clients}: {figures['proxy_calls_per_s']:.0f} calls/s")
    print(f"  proxy overhead (p50, 2025-11-25 sessions): "
          f"{figures['proxy 2025'][0] - figures['direct 2025'][0]:.2f} ms")


if __name__ == "__main__":
    main()
