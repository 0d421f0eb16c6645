"""How the attack suite talks to the stack, as any process on the same host could: plain gRPC
calls with chosen metadata, MCP spoken as raw JSON-RPC over HTTP (so malformed requests and
exact error codes are visible), and tokens made the way an attacker would try them.

    Grpc(address).call(service, method, request, token)    -> Answer (code, response, details)
    grpc_methods(service)                                   -> every method of a service, from its descriptor
    McpHttp(url, headers).initialize() / .request() / .tool() / .raw()
    Forge(identity_dir)                                     -> service tokens, valid or broken on purpose
"""
from __future__ import annotations

import base64
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import message_factory
from google.protobuf.json_format import MessageToJson

from nucleus.v1 import knowledge_store_pb2, llm_orchestration_pb2, rag_pipeline_pb2
from shared.auth.service_identity import ServiceSigner, key_file, list_keys

SERVICES = {"knowledge_store": (knowledge_store_pb2, "KnowledgeStore"),
            "llm_orchestration": (llm_orchestration_pb2, "LlmOrchestration"),
            "rag_pipeline": (rag_pipeline_pb2, "RagPipeline")}
PROTOCOL = "2025-06-18"
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
MAX_RATE_LIMIT_RETRIES = 4
_SDK_PREFIX = re.compile(r"^Error executing tool [^:]*: ")
_KIND = re.compile(r"^([a-z_]+): ")


def _seconds(retry_after: Any) -> float:
    """How long to wait before a retry: the server's retry-after, 1 s if unreadable, at most 10 s."""
    try:
        return min(10.0, max(0.1, float(retry_after)))
    except (TypeError, ValueError):
        return 1.0


# ---------------------------------------------------------------------------- gRPC
@dataclass
class Answer:
    code: grpc.StatusCode
    response: Any = None
    details: str = ""
    retry_after: str = ""

    @property
    def ok(self) -> bool:
        return self.code == grpc.StatusCode.OK

    def text(self) -> str:
        return MessageToJson(self.response) if self.response is not None else self.details


def grpc_methods(service: str) -> list[tuple[str, type, type]]:
    """(method, request class, response class) of every method of `service`."""
    module, name = SERVICES[service]
    desc = module.DESCRIPTOR.services_by_name[name]
    return [(m.name, message_factory.GetMessageClass(m.input_type), message_factory.GetMessageClass(m.output_type))
            for m in desc.methods]


class Grpc:
    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        self.channel = grpc.insecure_channel(address)
        self.timeout_s = timeout_s
        self._responses = {s: {m: resp for m, _, resp in grpc_methods(s)} for s in SERVICES}

    def call(self, service: str, method: str, request: Any, authorization: str | None = None,
             extra: dict[str, str] | None = None, *, retry: bool = True) -> Answer:
        """One unary call; `authorization` is the whole metadata value (e.g. "Bearer x"), None sends none.
        A rate-limited call is retried after its retry-after (a few times)."""
        _, name = SERVICES[service]
        fn = self.channel.unary_unary(f"/nucleus.v1.{name}/{method}",
                                      request_serializer=type(request).SerializeToString,
                                      response_deserializer=self._responses[service][method].FromString)
        metadata = [(k.lower(), v) for k, v in (extra or {}).items()]
        if authorization is not None:
            metadata.append(("authorization", authorization))
        for attempt in range(MAX_RATE_LIMIT_RETRIES + 1):
            try:
                return Answer(grpc.StatusCode.OK, fn(request, timeout=self.timeout_s, metadata=metadata or None))
            except grpc.RpcError as err:
                trailing = dict(err.trailing_metadata() or ())
                answer = Answer(err.code(), None, err.details() or "", str(trailing.get("retry-after", "")))
                if answer.code != grpc.StatusCode.RESOURCE_EXHAUSTED or attempt == MAX_RATE_LIMIT_RETRIES or not retry:
                    return answer
                time.sleep(_seconds(answer.retry_after))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.channel.close()


# ---------------------------------------------------------------------------- MCP over HTTP
def rpc_message(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC message of a response (plain JSON or the first SSE `data:` line), if any."""
    ctype = response.headers.get("content-type", "")
    try:
        if ctype.startswith("application/json"):
            body = response.json()
            return body if isinstance(body, dict) else None
        for line in response.text.splitlines():
            if line.startswith("data: "):
                return json.loads(line[len("data: "):])
    except ValueError:
        return None
    return None


@dataclass
class ToolAnswer:
    status: int
    message: dict[str, Any] | None

    @property
    def rpc_error(self) -> dict[str, Any] | None:
        error = (self.message or {}).get("error")
        return error if isinstance(error, dict) else None      # an HTTP 401 body has error: "invalid_token"

    @property
    def result(self) -> dict[str, Any]:
        result = (self.message or {}).get("result")
        return result if isinstance(result, dict) else {}

    @property
    def is_error(self) -> bool:
        return bool(self.result.get("isError"))

    @property
    def structured(self) -> dict[str, Any] | None:
        return self.result.get("structuredContent")

    @property
    def text(self) -> str:
        if self.rpc_error:
            return str(self.rpc_error.get("message", ""))
        return " ".join(c.get("text", "") for c in self.result.get("content", []) if isinstance(c, dict))

    @property
    def error_kind(self) -> str:
        """The kind of a tool error ("permission_denied", ...): the text's "<kind>: " prefix, after
        the SDK's "Error executing tool <name>: " if any; "validation" for the SDK's own argument
        validation; "unhandled" otherwise; "" when the call did not end in a tool error."""
        if not self.is_error:
            return ""
        text = _SDK_PREFIX.sub("", self.text, count=1)
        match = _KIND.match(text)
        if match:
            return match.group(1)
        return "validation" if "validation error" in text else "unhandled"

    def describe(self) -> str:
        if self.status != 200:
            return f"HTTP {self.status}"
        if self.rpc_error:
            message = " ".join(str(self.rpc_error.get("message", "")).split())
            return f"JSON-RPC {self.rpc_error.get('code')} {message[:160]}"
        return f"tool error: {' '.join(self.text.split())[:160]}" if self.is_error else "served"


class McpHttp:
    """One MCP session (or attempt at one) over streamable HTTP, request by request."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
        self.url = url
        self.headers = {**MCP_HEADERS, **(headers or {})}
        self.client = httpx.Client(timeout=timeout_s, follow_redirects=False)
        self._id = 0

    def raw(self, method: str = "POST", body: Any = None, headers: dict[str, str] | None = None,
            url: str | None = None) -> httpx.Response:
        return self.client.request(method, url or self.url, headers={**self.headers, **(headers or {})},
                                   content=None if body is None else json.dumps(body).encode())

    def open_stream(self) -> int:
        """GET the endpoint's event stream and hang up at once: the HTTP status it answered with."""
        with self.client.stream("GET", self.url, headers={**self.headers, "Accept": "text/event-stream"}) as r:
            return r.status_code

    def request(self, method: str, params: Any) -> ToolAnswer:
        self._id += 1
        response = self.raw(body={"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        session = response.headers.get("mcp-session-id")
        if session and response.status_code == 200:
            self.headers.update({"mcp-session-id": session, "mcp-protocol-version": PROTOCOL})
        return ToolAnswer(response.status_code, rpc_message(response))

    def initialize(self) -> ToolAnswer:
        answer = self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                             "clientInfo": {"name": "nucleus-attack", "version": "1"}})
        if answer.status == 200 and "result" in (answer.message or {}):
            self.raw(body={"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def tool(self, name: Any, arguments: Any = None, *, retry: bool = True) -> ToolAnswer:
        """tools/call; a rate-limited call (-32029) is retried after its retry_after (a few times)."""
        params = {"name": name} if arguments is None else {"name": name, "arguments": arguments}
        for attempt in range(MAX_RATE_LIMIT_RETRIES + 1):
            answer = self.request("tools/call", params)
            err = answer.rpc_error
            if not err or err.get("code") != -32029 or attempt == MAX_RATE_LIMIT_RETRIES or not retry:
                return answer
            time.sleep(_seconds((err.get("data") or {}).get("retry_after")))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> McpHttp:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------------- tokens
def _b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _private_key(identity_dir: Path, name: str) -> Ed25519PrivateKey:
    _, _, pem = key_file(identity_dir, name).read_bytes().partition(b"\n")
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return key


class Forge:
    """Tokens for the stack's ports: valid ones (the positive controls) and broken ones."""

    def __init__(self, identity_dir: Path) -> None:
        self.identity_dir = identity_dir
        self.kids = {e["principal"]: e["kid"] for e in list_keys(identity_dir)}
        self._foreign = Ed25519PrivateKey.generate()        # a key outside the trust bundle

    def token(self, signer: str, audience: str, *, tenant: str = "", age_s: float = 0.0) -> str:
        """A token signed with `signer`'s real key, as if issued `age_s` seconds ago."""
        signed = ServiceSigner.load(self.identity_dir, signer, now=lambda: time.time() - age_s)
        return signed.token(audience, tenant=tenant)

    def claims(self, issuer: str, audience: str, **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": issuer, "sub": issuer, "aud": audience, "iat": now, "exp": now + 300, **extra}

    def foreign(self, issuer: str, audience: str, *, kid: str | None = None) -> str:
        """Signed by a key outside the bundle, naming `kid` (default: an unknown one)."""
        return jwt.encode(self.claims(issuer, audience), self._foreign, algorithm="EdDSA",
                          headers={"kid": kid or f"{issuer}-{secrets.token_hex(4)}"})

    def wrong_issuer(self, key_owner: str, issuer: str, audience: str) -> str:
        """Signed with `key_owner`'s real key but claiming to be `issuer`."""
        return jwt.encode(self.claims(issuer, audience), _private_key(self.identity_dir, key_owner),
                          algorithm="EdDSA", headers={"kid": self.kids[key_owner]})

    def alg_none(self, issuer: str, audience: str) -> str:
        return f"{_b64({'alg': 'none', 'typ': 'JWT', 'kid': self.kids[issuer]})}.{_b64(self.claims(issuer, audience))}."

    def tampered(self, token: str, **changes: Any) -> str:
        """`token` with its claims changed and its signature kept."""
        head, payload, sig = token.split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims.update(changes)
        return f"{head}.{_b64(claims)}.{sig}"


__all__ = ["Answer", "Forge", "Grpc", "McpHttp", "SERVICES", "ToolAnswer", "grpc_methods", "rpc_message"]
