"""gRPC client helpers: every call has a deadline; only idempotent calls are retried, bounded,
on UNAVAILABLE only.

Retries are done by gRPC itself through the channel's service config (not tenacity, so there
is exactly one retry layer): the methods a caller names idempotent (`aio_channel(idempotent=)`,
full names as `method_name` builds them) get at most 3 attempts, exponential back-off,
UNAVAILABLE only; every other method gets no retry policy, so a call that may have changed
something on the server (an ingest, a feedback vote) is never sent twice by the channel. A
channel given no idempotent set retries nothing. Either way gRPC's transparent retry still
resends a call that never reached the server (gRFC A6).

Keepalive is `shared.keepalive`'s (what the servers in `shared.service_runner` permit).
Failures come back as the `shared.errors` hierarchy via `shared.grpc_errors.from_grpc_error`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import grpc

from shared import keepalive
from shared.grpc_errors import from_grpc_error
from shared.tls import channel_credentials
from shared.telemetry.client_interceptor import ClientTracingInterceptor  # telemetry hook

T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_RETRY_POLICY = {
    "maxAttempts": 3,
    "initialBackoff": "0.05s",
    "maxBackoff": "0.5s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}
_METHOD_NAME = re.compile(r"/([\w.]+)/(\w+)")   # /package.Service/Method

_TRANSPORT_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    *keepalive.client_options(),
    # A service that was restarted (cli/supervisor.py) is reconnected to within ~2 s, not after
    # gRPC's default reconnect back-off, which grows to 120 s while the service is down.
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def method_name(service: str, method: str) -> str:
    """The full name of `method` of `service` ("nucleus.v1.KnowledgeStore", "GetEntries" ->
    "/nucleus.v1.KnowledgeStore/GetEntries"), as `aio_channel(idempotent=)` takes it."""
    return f"/{service}/{method}"


def service_config(idempotent: Collection[str]) -> str:
    """The channel's service config (JSON): the retry policy above for each method named in
    `idempotent` ("/package.Service/Method"), none for any other."""
    names = []
    for full in sorted(set(idempotent)):
        match = _METHOD_NAME.fullmatch(full)
        if match is None:
            raise ValueError(f"idempotent method {full!r} is not a full gRPC method name: "
                             "expected '/package.Service/Method', e.g. '/nucleus.v1.KnowledgeStore/GetEntries'")
        names.append({"service": match[1], "method": match[2]})
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": _RETRY_POLICY}] if names else []})


def channel_options(idempotent: Collection[str] = ()) -> list[tuple[str, Any]]:
    """Every option of a channel to one of our services: message limits, keepalive, reconnect
    back-off and the retry policy for the `idempotent` methods."""
    return [("grpc.enable_retries", 1), ("grpc.service_config", service_config(idempotent)), *_TRANSPORT_OPTIONS]


def aio_channel(target: str, interceptors: list[Any] | None = None, *,
                tls_ca_file: Path | None = None, idempotent: Collection[str] = ()) -> grpc.aio.Channel:
    """An asyncio channel to one of our services retrying the `idempotent` methods (module
    docstring; none when not given): TLS verified against `tls_ca_file` when given, else
    plaintext (the 127.0.0.1 development stack).

    Every call gets a CLIENT span and carries the W3C trace context
    (shared.telemetry.client_interceptor)."""
    traced = [ClientTracingInterceptor(target), *(interceptors or [])]  # telemetry hook
    options = channel_options(idempotent)
    if tls_ca_file is not None:
        return grpc.aio.secure_channel(target, channel_credentials(tls_ca_file), options=options,
                                       interceptors=traced)
    return grpc.aio.insecure_channel(target, options=options, interceptors=traced)


async def call(
    method: Callable[..., Awaitable[T]] | Any,
    request: Any,
    *,
    timeout: float,
    service: str,
    metadata: tuple[tuple[str, str], ...] | None = None,
) -> T:
    """Invoke one unary-unary aio stub method with a deadline; translate failures once."""
    try:
        return await method(request, timeout=timeout, metadata=metadata)
    except grpc.RpcError as err:  # grpc.aio.AioRpcError subclasses it
        raise from_grpc_error(err, service=service) from None


__all__ = ["aio_channel", "call", "channel_options", "method_name", "service_config", "MAX_MESSAGE_BYTES"]
