"""gRPC client helpers: every call has a deadline; retries are bounded and only on UNAVAILABLE.

Retries are done by gRPC itself through the channel's service config (not tenacity, so there
is exactly one retry layer): at most 3 attempts, exponential back-off, UNAVAILABLE only.
Failures come back as the `shared.errors` hierarchy via `shared.grpc_errors.from_grpc_error`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import grpc

from shared.grpc_errors import from_grpc_error
from shared.tls import channel_credentials
from shared.telemetry.client_interceptor import ClientTracingInterceptor  # telemetry hook

T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_SERVICE_CONFIG = json.dumps({
    "methodConfig": [{
        "name": [{}],  # every method of every service on the channel
        "retryPolicy": {
            "maxAttempts": 3,
            "initialBackoff": "0.05s",
            "maxBackoff": "0.5s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }]
})

_TRANSPORT_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # A service that was restarted (cli/supervisor.py) is reconnected to within ~2 s, not after
    # gRPC's default reconnect back-off, which grows to 120 s while the service is down.
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]
CHANNEL_OPTIONS = [("grpc.enable_retries", 1), ("grpc.service_config", _SERVICE_CONFIG), *_TRANSPORT_OPTIONS]
_NO_RETRY_OPTIONS = [("grpc.enable_retries", 0), *_TRANSPORT_OPTIONS]


def aio_channel(target: str, interceptors: list[Any] | None = None, *,
                tls_ca_file: Path | None = None, retries: bool = True) -> grpc.aio.Channel:
    """An asyncio channel to one of our services, with the retry policy above (`retries=False`:
    none, for a call the service behind retries itself, e.g. a chat completion): TLS verified
    against `tls_ca_file` when given, else plaintext (the 127.0.0.1 development stack).

    Every call gets a CLIENT span and carries the W3C trace context
    (shared.telemetry.client_interceptor)."""
    traced = [ClientTracingInterceptor(target), *(interceptors or [])]  # telemetry hook
    options = CHANNEL_OPTIONS if retries else _NO_RETRY_OPTIONS
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


__all__ = ["aio_channel", "call", "CHANNEL_OPTIONS"]
