"""A real HTTP server on loopback speaking the de-facto `/rerank` API, for our tests.

    with FakeRerank() as srv:
        srv.base_url                     # "http://127.0.0.1:<port>"
        srv.fail_next("429", 1, retry_after=0)
        srv.requests                     # every request received: path, headers, body

POST /rerank answers in the shape of what it was sent: `documents` (Cohere / Jina / vLLM) →
{"results": [{"index", "relevance_score"}], best first}; `texts` (Hugging Face TEI) →
[{"index", "score"}]. The score of a document is the share of the query's words it contains
(deterministic, in [0, 1]) — or what `scorer(query, document)` says; `logits=True` answers
log-odds instead (the client must squash).

Failure queue (`fail_next(kind, n)`), consumed one per request before normal handling:
    "429" / "500" / "503"  that status (Retry-After if given)
    "401"                  a non-retryable client error that echoes the key it was sent
    "hang"                 never answer (until `hang_s` or close)
    "bad_body"             HTTP 200 with a body that is not JSON
    "bad_shape"            HTTP 200 JSON without the scores of every document
"""
from __future__ import annotations

import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAILURE_KINDS = ("429", "500", "503", "401", "hang", "bad_body", "bad_shape")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any
    failure: str | None


def overlap_score(query: str, document: str) -> float:
    q = set(_WORD.findall(query.lower()))
    d = set(_WORD.findall(document.lower()))
    return len(q & d) / len(q) if q else 0.0


class FakeRerank:
    def __init__(self, *, hang_s: float = 5.0, logits: bool = False,
                 scorer: Callable[[str, str], float] | None = None) -> None:
        self.hang_s = hang_s
        self.logits = logits
        self.scorer = scorer or overlap_score
        self.requests: list[RecordedRequest] = []
        self._failures: deque[tuple[str, float | None]] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length).decode("utf-8", "replace")
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                with server._lock:
                    failure = server._failures.popleft() if server._failures else None
                    server.requests.append(RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                           body, failure[0] if failure else None))
                if failure is not None:
                    return self._fail(*failure)
                if self.path != "/rerank" or not isinstance(body, dict):
                    return self._send(404, {"error": "not found"})
                docs = body.get("documents", body.get("texts"))
                scores = [server.scorer(body.get("query", ""), d) for d in docs]
                if server.logits:
                    scores = [math.log((s + 0.01) / (1.01 - s)) for s in scores]
                order = sorted(range(len(docs)), key=lambda i: -scores[i])
                if "texts" in body:
                    return self._send(200, [{"index": i, "score": scores[i]} for i in order])
                return self._send(200, {"results": [{"index": i, "relevance_score": scores[i]} for i in order]})

            def _fail(self, kind: str, retry_after: float | None) -> None:
                if kind == "hang":
                    server._closing.wait(server.hang_s)
                    return
                if kind == "bad_body":
                    return self._send(200, "{not json", raw=True)
                if kind == "bad_shape":
                    return self._send(200, {"results": [{"index": 0, "relevance_score": 0.5}]})
                if kind == "401":
                    key = self.headers.get("authorization", "")
                    return self._send(401, {"error": f"invalid key {key}"})
                headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                return self._send(int(kind), {"error": f"fake {kind}"}, headers=headers)

            def _send(self, status: int, payload: Any, *, raw: bool = False,
                      headers: dict[str, str] | None = None) -> None:
                data = (payload if raw else json.dumps(payload)).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def fail_next(self, kind: str, n: int = 1, *, retry_after: float | None = None) -> None:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}; one of {FAILURE_KINDS}")
        with self._lock:
            self._failures.extend([(kind, retry_after)] * n)

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self.requests.clear()

    def __enter__(self) -> "FakeRerank":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        time.sleep(0)
