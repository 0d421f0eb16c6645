"""A real HTTP server on loopback serving MCP Registry API answers, for registry tests.

    with RegistryServer(servers, api="v0.1", page_size=2) as reg:
        reg.url                       # "http://127.0.0.1:<port>"
        reg.fail = 500                # answer every request with this status (0 = normal)
        reg.requests                  # every path + query received

`servers` are server.json objects; with api="v0.1" the listing is the official frozen shape
({"servers": [{"server": {...}, "_meta": {"io.modelcontextprotocol.registry/official":
{...}}}], "metadata": {"nextCursor", "count"}}) at /v0.1/servers (404 at /v0/servers);
with api="v0" the older flat shape at /v0/servers only (404 at /v0.1). `search` filters by
a case-insensitive substring of the name, `limit` and the opaque `cursor` page through.
Several versions of one name may be listed (the last one is `isLatest`); with
`versions_endpoint=True` a version is also served at `/<api>/servers/<name>/versions/<version>`.
With `token="..."` every request needs `Authorization: Bearer <token>` (else 401);
`reg.authorizations` records what each request carried.
"""
from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

OFFICIAL = "io.modelcontextprotocol.registry/official"


def server_json(name: str, *, url: str | None = None, packages: bool = False, remote_type: str = "streamable-http",
                version: str = "1.0.0", title: str = "", description: str = "") -> dict[str, Any]:
    """A server.json as published in the registry."""
    out: dict[str, Any] = {"$schema": "https://static.modelcontextprotocol.io/schemas/2025-10-17/server.schema.json",
                           "name": name, "version": version, "description": description or f"{name} server",
                           "title": title or name.split("/")[-1],
                           "icons": [{"src": "https://example.com/icon.png", "mimeType": "image/png"}]}
    if url:
        out["remotes"] = [{"type": remote_type, "url": url,
                           "headers": [{"name": "Authorization", "isRequired": True, "isSecret": True}]}]
    if packages:
        out["packages"] = [{"registryType": "npm", "identifier": f"@example/{name.split('/')[-1]}",
                            "version": version, "transport": {"type": "stdio"}}]
    return out


class RegistryServer:
    def __init__(self, servers: list[dict[str, Any]], *, api: str = "v0.1", page_size: int = 30,
                 token: str = "", versions_endpoint: bool = False) -> None:
        self.servers, self.api, self.page_size = servers, api, page_size
        self.token, self.versions_endpoint = token, versions_endpoint
        self.fail = 0
        self.requests: list[str] = []
        self.authorizations: list[str] = []
        owner = self

        def latest(s: dict[str, Any]) -> bool:
            return s is [x for x in owner.servers if x["name"] == s["name"]][-1]

        def official(s: dict[str, Any]) -> dict[str, Any]:
            return {OFFICIAL: {"status": "active", "publishedAt": "2026-01-02T03:04:05Z",
                               "updatedAt": "2026-02-03T04:05:06Z", "isLatest": latest(s)}}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:  # noqa: N802
                owner.requests.append(self.path)
                owner.authorizations.append(self.headers.get("Authorization", ""))
                if owner.fail:
                    return self._send(owner.fail, {"error": "registry is down"})
                if owner.token and self.headers.get("Authorization", "") != f"Bearer {owner.token}":
                    return self._send(401, {"error": "a valid bearer token is required"})
                parts = urlsplit(self.path)
                prefix = f"/{owner.api}/servers/"
                if owner.versions_endpoint and parts.path.startswith(prefix) and "/versions/" in parts.path:
                    name, _, version = parts.path[len(prefix):].partition("/versions/")
                    name, version = unquote(name), unquote(version)
                    for s in owner.servers:
                        if s["name"] == name and s.get("version") == version:
                            return self._send(200, {"server": s, "_meta": official(s)})
                    return self._send(404, {"error": "no such version"})
                if parts.path.rstrip("/") != f"/{owner.api}/servers":
                    return self._send(404, {"error": "not found"})
                q = {k: v[0] for k, v in parse_qs(parts.query).items()}
                found = [s for s in owner.servers if q.get("search", "").lower() in s["name"].lower()]
                start = int(base64.urlsafe_b64decode(q["cursor"]).decode()) if q.get("cursor") else 0
                limit = min(int(q.get("limit", owner.page_size)), owner.page_size)
                page = found[start:start + limit]
                nxt = start + limit
                cursor = base64.urlsafe_b64encode(str(nxt).encode()).decode() if nxt < len(found) else None
                if owner.api == "v0.1":
                    body: dict[str, Any] = {"servers": [{"server": s, "_meta": official(s)} for s in page],
                                            "metadata": {"count": len(page)}}
                    if cursor:
                        body["metadata"]["nextCursor"] = cursor
                else:
                    flat = []
                    for s in page:
                        item = {k: v for k, v in s.items() if k not in ("remotes", "version")}
                        item["version_detail"] = {"version": s.get("version", ""), "is_latest": latest(s)}
                        item["remotes"] = [{"transport_type": r["type"], "url": r["url"]} for r in s.get("remotes", [])]
                        flat.append(item)
                    body = {"servers": flat, "metadata": {"count": len(flat)}}
                    if cursor:
                        body["metadata"]["next_cursor"] = cursor
                return self._send(200, body)

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "RegistryServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
