"""An independent RAG MCP server (official MCP SDK, not Nucleus code) for federation tests.

    python -m tests.support.foreign_rag_server --ready-file R [--corpus docs.jsonl]
        [--score bm25|distance] [--token-env FOREIGN_TOKEN] [--port 0]

Speaks seed 002 (`rag_search`) and the seed-000 trio over streamable HTTP at /mcp, with its
own scores on a foreign scale: `bm25` = raw Okapi BM25 (unbounded, higher is better),
`distance` = 1 / (1 + BM25) (in (0, 1], LOWER is better). Each segment carries `score` and
`score_kind`. The corpus is a JSONL file of {"id", "title", "text"} (default: a few built-in
documents). With `--token-env NAME` every request needs `Authorization: Bearer $NAME`
(HTTP 401 otherwise), so a successful call proves which credential was sent.

Extra tools for the proxy tests: `echo` (returns the arguments it received, sensitive ones
only as a SHA-256 prefix), `slow` (sleeps), `big` (returns N bytes), `add`.
The ready file gets {"url": "http://127.0.0.1:<port>/mcp"} once it serves.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from benchmarks.foreign_rag import ForeignDoc, ForeignIndex, serve_app

SENSITIVE = ("user_token", "api_key", "bearer", "oauth_token", "capability_token")
BUILTIN = [
    {"id": "f1", "title": "Aspirin and platelets", "text": "Aspirin irreversibly inhibits cyclooxygenase in "
     "platelets, reducing thromboxane A2 and platelet aggregation for the platelet's lifetime."},
    {"id": "f2", "title": "Statins", "text": "Statins inhibit HMG-CoA reductase and lower LDL cholesterol; "
     "they reduce cardiovascular events in high-risk patients."},
    {"id": "f3", "title": "Vitamin D", "text": "Vitamin D supplementation did not reduce fractures in "
     "community-dwelling older adults without deficiency."},
    {"id": "f4", "title": "Sleep and memory", "text": "Slow-wave sleep supports the consolidation of "
     "declarative memory; sleep deprivation impairs hippocampal encoding."},
]
STDIO_TOKEN_ENV = [""]


def build_server(docs: list[dict[str, str]], score_kind: str) -> Any:

    index = ForeignIndex([ForeignDoc(d["id"], d.get("title", ""), d["text"]) for d in docs], score_kind)
    by_id = {d["id"]: d for d in docs}
    mcp = MCPServer("foreign-rag")

    def scored(query: str, k: int) -> list[tuple[dict[str, str], float]]:
        """The best k documents with their score on this server's scale (benchmarks.foreign_rag)."""
        return [(by_id[doc.id], s) for doc, s in index.search(query, k)]

    @mcp.tool(name="rag_search", description="Searches the knowledge base (foreign scores).")
    async def rag_search(search_phrases: list[str], max_segments: int = 8) -> dict[str, Any]:
        best: dict[str, tuple[dict[str, str], float]] = {}
        for phrase in search_phrases[:5]:
            for doc, s in scored(phrase, max_segments):
                prev = best.get(doc["id"])
                better = prev is None or (s > prev[1] if score_kind == "bm25" else s < prev[1])
                if better:
                    best[doc["id"]] = (doc, s)
        ranked = sorted(best.values(), key=lambda x: -x[1] if score_kind == "bm25" else x[1])[:max_segments]
        return {"status": "success", "segments": [
            {"segment_uid": d["id"], "source_file_name": d.get("title", d["id"]) + ".txt", "source_file_type": "text",
             "headline": d.get("title"), "raw_text": d["text"], "source_url": f"https://foreign.example/{d['id']}",
             "score": s, "score_kind": score_kind} for d, s in ranked]}

    @mcp.tool(name="rag_discover_resources", description="The foreign server's one resource.")
    async def rag_discover_resources(username: str = "", user_token: str | None = None) -> dict[str, Any]:
        return {"results": {"resources": [{"id": "foreign", "name": "Foreign corpus", "sourceType": "text",
                                           "authRequired": False, "authMode": "none"}]},
                "meta_data": {"username": username}}

    @mcp.tool(name="rag_get_raw_results", description="Raw hits with foreign scores.")
    async def rag_get_raw_results(query: str, username: str = "", sources: list[str] | None = None,
                                  top_k: int = 8, user_token: str | None = None) -> dict[str, Any]:
        return {"results": {"hits": [
            {"id": d["id"], "score": s, "snippet": d["text"][:300], "chunk": d["text"], "title": d.get("title"),
             "uri": f"https://foreign.example/{d['id']}", "resourceId": "foreign"} for d, s in scored(query, top_k)]},
            "meta_data": {"score_kind": score_kind}}

    @mcp.tool(name="rag_get_synthesized_results", description="Concatenated passages (no model).")
    async def rag_get_synthesized_results(query: str, username: str = "", top_k: int = 3,
                                          user_token: str | None = None) -> dict[str, Any]:
        hits = scored(query, top_k)
        return {"results": {"answer": " ".join(d["text"] for d, _ in hits),
                            "citations": [{"id": d["id"]} for d, _ in hits]}}

    @mcp.tool(name="echo", description="Returns the arguments it received (sensitive ones hashed).")
    async def echo(ctx: Context, username: str = "", message: str = "", api_key: str | None = None,
                   user_token: str | None = None) -> dict[str, Any]:
        meta = ctx.request_context.meta or {}
        received = {"username": username, "message": message, "traceparent": meta.get("traceparent", "")}
        if STDIO_TOKEN_ENV[0]:          # over stdio the credential arrives in the environment
            token = os.environ.get(STDIO_TOKEN_ENV[0], "")
            received["token_sha256"] = hashlib.sha256(token.encode()).hexdigest()[:16]
        for name, value in (("api_key", api_key), ("user_token", user_token)):
            if value is not None:
                received[name + "_sha256"] = hashlib.sha256(value.encode()).hexdigest()[:16]
        return received

    @mcp.tool(name="add", description="Adds two integers.")
    async def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @mcp.tool(name="slow", description="Sleeps, then answers.")
    async def slow(seconds: float = 5.0) -> dict[str, float]:
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    @mcp.tool(name="big", description="Returns a string of n bytes.")
    async def big(n: int = 1000) -> dict[str, str]:
        return {"data": "x" * n}

    return mcp


def _auth_wrap(app: Any, token: str | None) -> Any:
    if not token:
        return app

    async def guarded(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
                return
        await app(scope, receive, send)
    return guarded


def load_corpus(path: Path | None) -> list[dict[str, str]]:
    if path is None:
        return BUILTIN
    docs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                docs.append({"id": str(d.get("id", d.get("_id"))), "title": d.get("title", ""), "text": d["text"]})
    return docs


async def serve(args: argparse.Namespace) -> None:
    mcp = build_server(load_corpus(args.corpus), args.score)
    app = _auth_wrap(mcp.streamable_http_app(host="127.0.0.1"),
                     os.environ.get(args.token_env) if args.token_env else None)
    await serve_app(app, port=args.port, ready_file=Path(args.ready_file) if args.ready_file else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file")
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--score", choices=("bm25", "distance"), default="bm25")
    parser.add_argument("--token-env", help="require Authorization: Bearer $TOKEN_ENV")
    parser.add_argument("--stdio", action="store_true", help="serve over stdio instead of HTTP")
    args = parser.parse_args()
    if args.stdio:
        STDIO_TOKEN_ENV[0] = args.token_env or ""
        build_server(load_corpus(args.corpus), args.score).run("stdio")
        return
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
