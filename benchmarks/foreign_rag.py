"""A small, independent RAG MCP server that scores on a foreign scale: what a federation meets.

It is not Nucleus: its own tokenizer (lower-cased words, no stemming, no stopwords), its own
BM25 parameters (k1 = 0.9, b = 0.4) over the documents it holds, no embeddings. It speaks
seed 000's trio (`rag_discover_resources`, `rag_get_raw_results`, `rag_get_synthesized_results`)
and seed 002's `rag_search`, over streamable HTTP, with the official MCP SDK. Its hits carry

    --scale bm25       the raw BM25 score (unbounded, higher is better), or
    --scale distance   1 / (1 + BM25): lower is better, as a vector store's distance.

    python -m benchmarks.foreign_rag --corpus docs.jsonl --scale bm25 --ready-file ready.json

`docs.jsonl`: one {"id", "title", "text"} per line. The ready file gets {"url": ".../mcp"}
once the server listens (port 0 = an ephemeral port). An optional `--token` makes every
request need `Authorization: Bearer <token>`. Used by `benchmarks/federate.py` and the
federation tests.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESOURCE_ID = "foreign-docs"
_WORD = re.compile(r"[a-z0-9]+")
K1, B = 0.9, 0.4


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class ForeignDoc:
    id: str
    title: str
    text: str


class ForeignIndex:
    """BM25 over whole documents with a foreign analyser (module docstring)."""

    def __init__(self, docs: list[ForeignDoc], scale: str = "bm25") -> None:
        if scale not in ("bm25", "distance"):
            raise ValueError(f"scale must be 'bm25' or 'distance', got {scale!r}")
        self.docs, self.scale = docs, scale
        self._tf = [Counter(tokens(f"{d.title} {d.text}")) for d in docs]
        self._len = [sum(c.values()) for c in self._tf]
        self._avgdl = (sum(self._len) / len(docs)) if docs else 1.0
        df: Counter[str] = Counter()
        for c in self._tf:
            df.update(c.keys())
        n = len(docs)
        self._idf = {t: math.log((n - f + 0.5) / (f + 0.5) + 1.0) for t, f in df.items()}

    def search(self, query: str, k: int) -> list[tuple[ForeignDoc, float]]:
        """The best k documents and their score on this server's scale, best first."""
        terms = set(tokens(query))
        scored = []
        for i, tf in enumerate(self._tf):
            s = 0.0
            for t in terms:
                f = tf.get(t, 0)
                if f:
                    s += self._idf[t] * f * (K1 + 1) / (f + K1 * (1 - B + B * self._len[i] / self._avgdl))
            if s > 0:
                scored.append((s, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        out = []
        for s, i in scored[:k]:
            out.append((self.docs[i], s if self.scale == "bm25" else 1.0 / (1.0 + s)))
        return out


def build_server(index: ForeignIndex, *, name: str = "foreign-rag") -> Any:
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer(name)

    @mcp.tool(name="rag_discover_resources", description="The resources of this server.")
    async def rag_discover_resources(username: str = "", filters: dict | None = None) -> dict[str, Any]:
        return {"results": {"resources": [{"id": RESOURCE_ID, "name": "Foreign documents", "sourceType": "docs",
                                           "authRequired": False, "authMode": "none",
                                           "counts": {"docs": len(index.docs)}}]},
                "meta_data": {"provider": name}}

    @mcp.tool(name="rag_get_raw_results", description=f"Raw hits, scored on this server's own scale ({index.scale}).")
    async def rag_get_raw_results(query: str, sources: list[str] | None = None, top_k: int = 8,
                                  username: str = "") -> dict[str, Any]:
        if sources and RESOURCE_ID not in sources:
            return {"results": {"hits": []}, "meta_data": {"provider": name}}
        hits = [{"id": d.id, "score": round(score, 6), "chunk": d.text, "snippet": d.text[:200], "title": d.title,
                 "resourceId": RESOURCE_ID, "provenance": {"artifact_id": d.id}}
                for d, score in index.search(query, max(1, min(top_k, 50)))]
        return {"results": {"hits": hits}, "meta_data": {"provider": name, "scale": index.scale}}

    @mcp.tool(name="rag_get_synthesized_results", description="The best passage, quoted.")
    async def rag_get_synthesized_results(query: str, sources: list[str] | None = None, top_k: int = 8,
                                          username: str = "") -> dict[str, Any]:
        best = index.search(query, 1)
        return {"results": {"answer": best[0][0].text[:500] if best else "", "citations": []}}

    @mcp.tool(name="rag_search", description="Segments for 1-5 search phrases (no scores).")
    async def rag_search(search_phrases: list[str], max_segments: int = 8) -> dict[str, Any]:
        found = index.search(" ".join(search_phrases), max(1, min(max_segments, 20)))
        return {"status": "success", "segments": [
            {"segment_uid": d.id, "source_file_name": d.title or d.id, "source_file_type": "txt", "headline": d.title,
             "raw_text": d.text} for d, _ in found]}

    return mcp


def load_docs(path: Path) -> list[ForeignDoc]:
    docs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            raw = json.loads(line)
            docs.append(ForeignDoc(str(raw["id"]), str(raw.get("title", "")), str(raw.get("text", ""))))
    return docs


async def serve(index: ForeignIndex, *, host: str = "127.0.0.1", port: int = 0, ready_file: Path | None = None,
                token: str = "") -> None:
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import JSONResponse

    app = build_server(index).streamable_http_app(host=host)
    if token:
        async def check(request, call_next):
            if request.headers.get("authorization", "") != f"Bearer {token}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            return await call_next(request)
        app.add_middleware(BaseHTTPMiddleware, dispatch=check)
    await serve_app(app, host=host, port=port, ready_file=ready_file)


async def serve_app(app: Any, *, host: str = "127.0.0.1", port: int = 0, ready_file: Path | None = None,
                    ready: dict[str, Any] | None = None) -> None:
    """Serve an MCP server's ASGI `app` on host:port (0 = any free port) until cancelled; once it
    serves, `ready_file` gets {"url": "http://host:port/mcp", "port", **ready} (written atomically)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if ready_file is not None and not task.done():
        ready_file = Path(ready_file)
        tmp = ready_file.with_name(ready_file.name + ".tmp")
        tmp.write_text(json.dumps({"url": f"http://{host}:{bound}/mcp", "port": bound, **(ready or {})}))
        tmp.replace(ready_file)
    await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="JSONL of {id, title, text}")
    parser.add_argument("--scale", choices=("bm25", "distance"), default="bm25")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--token", default="", help="require this bearer token")
    args = parser.parse_args()
    index = ForeignIndex(load_docs(args.corpus), args.scale)
    asyncio.run(serve(index, host=args.host, port=args.port, ready_file=args.ready_file, token=args.token))


if __name__ == "__main__":
    main()
