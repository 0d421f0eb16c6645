"""A real HTTP server on loopback that speaks enough of the OpenAI API for our tests.

    with FakeOpenAI(dimension=8) as srv:
        srv.base_url                     # "http://127.0.0.1:<port>/v1"
        srv.fail_next("429", 1, retry_after=0)
        srv.reply_next('{"alternatives": ["x"]}')   # content of the next chat completion
        srv.reply_tool_calls_next([("rag_search", '{"search_phrases": ["x"]}')])   # next: tool calls
        ...
        srv.requests                     # every request received: path, headers, body

Endpoints
- POST /v1/embeddings: deterministic, *unnormalised* vectors derived from a hash of each
  text (so the client must normalise), `dimensions` honoured, `encoding_format` "float" or
  "base64".
- POST /v1/chat/completions: recognises the task by the first line of the system prompt
  ("Task: expand-query" / "Task: rerank" / "Task: synthesize-answer") and answers with
  plausible content: alternatives, 0–10 scores by word overlap, or an answer citing the
  passage ids it was shown (plus one made-up id, which the client must drop).

Scripted turns (`reply_next`, `reply_tool_calls_next`) are consumed in order by chat
completions: a text reply, or an assistant message with `tool_calls` (finish_reason
"tool_calls"; arguments sent verbatim, so a test can send malformed JSON). A request with
`"stream": true` is answered as server-sent events (`chat.completion.chunk`s: the content in
a few deltas, each tool call in one delta, then `data: [DONE]`).

Failure queue (`fail_next(kind, n)`), consumed one per request before normal handling:
    "429" / "500" / "503"  status with an OpenAI-style error body (Retry-After if given)
    "400" / "401"          non-retryable client errors (401 echoes the key in its message)
    "hang"                 accept the request and never answer (until `hang_s` or close)
    "bad_body"             HTTP 200, Content-Type JSON, body that is not JSON
    "bad_content"          a valid chat completion whose content is not the JSON asked for
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

FAILURE_KINDS = ("429", "500", "503", "400", "401", "hang", "bad_body", "bad_content")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]           # lower-cased names
    body: Any                         # parsed JSON, or the raw text if it was not JSON
    raw: str
    failure: str | None = None        # the scripted failure applied to it, if any


@dataclass(frozen=True)
class ToolCallReply:
    """A scripted assistant turn that calls tools: (name, raw JSON arguments) pairs."""
    calls: tuple[tuple[str, str], ...]


@dataclass
class _Failure:
    kind: str
    retry_after: float | None


@dataclass
class _State:
    dimension: int
    hang_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    failures: deque[_Failure] = field(default_factory=deque)
    replies: deque[str | ToolCallReply] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)


def fake_vector(text: str, dimension: int) -> np.ndarray:
    """The unnormalised float32 vector the fake returns for `text`."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(dimension) * 3.0).astype(np.float32)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def _chat_content(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
    user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
    task = system.splitlines()[0].strip().lower() if system else ""
    if task.startswith("task: expand-query"):
        query = json.loads(user)["query"]
        return json.dumps({"alternatives": [f"{query} explained", f"what is known about {query}",
                                            f"{query} evidence"]})
    if task.startswith("task: rerank"):
        payload = json.loads(user)
        q = _words(payload["query"])
        scores = []
        for cand in payload["candidates"]:
            overlap = len(q & _words(cand["text"])) / max(1, len(q))
            scores.append({"id": cand["id"], "score": round(10 * overlap, 2)})
        return json.dumps({"scores": scores})
    if task.startswith("task: synthesize-answer"):
        ids = re.findall(r"^\[([^\]\n]+)\]", user, flags=re.MULTILINE)
        parts = [f"Passage {pid} is relevant to the question [{pid}]." for pid in ids]
        parts.append("An unsupported aside [not-a-passage].")
        return " ".join(parts)
    return "I am a fake model."


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:   # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", errors="replace")
        try:
            body: Any = json.loads(raw)
        except json.JSONDecodeError:
            body = raw
        with state.lock:
            failure = state.failures.popleft() if state.failures else None
            reply = None
            if failure is None and self.path.endswith("/chat/completions") and state.replies:
                reply = state.replies.popleft()
            state.requests.append(RecordedRequest(
                method="POST", path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body, raw=raw, failure=failure.kind if failure else None))
        try:
            if failure is not None:
                self._fail(failure, body)
            elif self.path.endswith("/embeddings"):
                self._embeddings(body)
            elif self.path.endswith("/chat/completions"):
                self._chat(body, reply)
            else:
                self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        except (BrokenPipeError, ConnectionResetError):
            pass   # the client gave up (e.g. its timeout fired)

    # -- responses -------------------------------------------------------------------------

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None,
              raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, failure: _Failure, body: Any) -> None:
        kind = failure.kind
        if kind == "hang":
            self.server.state.closing.wait(self.server.state.hang_s)
            self.close_connection = True
            return
        if kind == "bad_body":
            self._json(200, None, raw=b'{"id": "chatcmpl-broken", "choices": [')
            return
        if kind == "bad_content":
            model = body.get("model", "") if isinstance(body, dict) else ""
            self._json(200, _completion(model, "Sure! Here are some thoughts, not JSON."))
            return
        headers = {}
        if failure.retry_after is not None:
            headers["Retry-After"] = f"{failure.retry_after:g}"
        messages = {"429": ("Rate limit reached", "rate_limit_exceeded"),
                    "500": ("The server had an error", "server_error"),
                    "503": ("The engine is overloaded", "server_error"),
                    "400": ("Invalid request", "invalid_request_error"),
                    "401": ("Incorrect API key provided", "invalid_request_error")}
        message, err_type = messages[kind]
        if kind == "401":   # like real providers, echo (part of) the key back — clients must redact
            message = f"{message}: {self.headers.get('Authorization', '').removeprefix('Bearer ')}"
        self._json(int(kind), {"error": {"message": message, "type": err_type, "code": None}},
                   headers=headers)

    def _embeddings(self, body: dict[str, Any]) -> None:
        inputs = body["input"]
        if isinstance(inputs, str):
            inputs = [inputs]
        dimension = int(body.get("dimensions") or self.server.state.dimension)
        data = []
        for i, text in enumerate(inputs):
            vec = fake_vector(text, dimension)
            if body.get("encoding_format") == "base64":
                embedding: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode()
            else:
                embedding = [float(x) for x in vec]
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        self._json(200, {"object": "list", "data": data, "model": body.get("model", ""),
                         "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    def _chat(self, body: dict[str, Any], reply: str | ToolCallReply | None) -> None:
        model = body.get("model", "")
        calls = reply.calls if isinstance(reply, ToolCallReply) else ()
        content = "" if calls else (reply if reply is not None else _chat_content(body))
        tool_calls = [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
                      for i, (name, args) in enumerate(calls)]
        if body.get("stream"):
            self._stream(model, content, tool_calls, usage=bool((body.get("stream_options") or {}).get("include_usage")))
            return
        completion = _completion(model, content)
        if tool_calls:
            completion["choices"][0]["message"].update(content=None, tool_calls=tool_calls)
            completion["choices"][0]["finish_reason"] = "tool_calls"
        self._json(200, completion)

    def _stream(self, model: str, content: str, tool_calls: list[dict[str, Any]], *, usage: bool = False) -> None:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                       "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(payload)}\n\n".encode()

        parts = [chunk({"role": "assistant", "content": ""})]
        step = max(1, len(content) // 3)
        parts += [chunk({"content": content[i:i + step]}) for i in range(0, len(content), step)]
        parts += [chunk({"tool_calls": [{"index": i, **call}]}) for i, call in enumerate(tool_calls)]
        parts.append(chunk({}, "tool_calls" if tool_calls else "stop"))
        if usage:        # stream_options.include_usage: a last chunk without choices, with the usage
            parts.append(("data: " + json.dumps({
                "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": max(1, len(content.split())),
                                         "total_tokens": 7 + max(1, len(content.split()))}}) + "\n\n").encode())
        parts.append(b"data: [DONE]\n\n")
        data = b"".join(parts)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class FakeOpenAI:
    """An OpenAI-compatible HTTP server on 127.0.0.1:<ephemeral> in a background thread."""

    def __init__(self, *, dimension: int = 16, hang_s: float = 30.0) -> None:
        self._state = _State(dimension=dimension, hang_s=hang_s)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeOpenAI:
        self._server = _Server(self._state)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._state.closing.set()           # release hanging handlers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._server is not None, "use FakeOpenAI as a context manager"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    def fail_next(self, kind: str, n: int = 1, *, retry_after: float | None = None) -> None:
        """The next `n` requests fail as `kind` (see FAILURE_KINDS)."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}; expected one of {FAILURE_KINDS}")
        with self._state.lock:
            self._state.failures.extend(_Failure(kind, retry_after) for _ in range(n))

    def reply_next(self, *contents: str) -> None:
        """The next chat completions answer with these contents, in order."""
        with self._state.lock:
            self._state.replies.extend(contents)

    def reply_tool_calls_next(self, *turns: list[tuple[str, str]]) -> None:
        """The next chat completions call tools: one turn per list of (name, raw JSON arguments)."""
        with self._state.lock:
            self._state.replies.extend(ToolCallReply(tuple(calls)) for calls in turns)

    def clear(self) -> None:
        """Forget recorded requests and any unconsumed failures / replies."""
        with self._state.lock:
            self._state.requests.clear()
            self._state.failures.clear()
            self._state.replies.clear()


def main() -> None:
    """Serve on 127.0.0.1 until interrupted (for trying `nucleus chat` where no real
    OpenAI-compatible server is reachable): `python -m tests.support.fake_openai --script S.json`,
    S.json a list of turns, each a string (a reply) or a list of [tool name, JSON arguments]."""
    import argparse

    parser = argparse.ArgumentParser(description="loopback OpenAI-compatible test server")
    parser.add_argument("--script", default="", help="JSON list of scripted turns")
    args = parser.parse_args()
    with FakeOpenAI() as server:
        if args.script:
            with open(args.script) as f:
                for turn in json.load(f):
                    if isinstance(turn, str):
                        server.reply_next(turn)
                    else:
                        server.reply_tool_calls_next([(name, arguments) for name, arguments in turn])
        print(server.base_url, flush=True)
        try:
            server._state.closing.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
