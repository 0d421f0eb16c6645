"""gRPC client helpers: every call has a deadline; retries are bounded and only on UNAVAILABLE.

Retries are done by gRPC itself through the channel's service config (not tenacity, so there
is exactly one retry layer): at most 3 attempts, exponential back-off, UNAVAILABLE only.
Failures come back as the `shared.errors` hierarchy via `shared.grpc_errors.from_grpc_error`.
"""
from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, TypeVar

import grpc

from shared.grpc_errors import from_grpc_error
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

CHANNEL_OPTIONS = [
    ("grpc.enable_retries", 1),
    ("grpc.service_config", _SERVICE_CONFIG),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


def aio_channel(target: str, interceptors: list[Any] | None = None) -> grpc.aio.Channel:
    """An insecure asyncio channel to one of our services, with the retry policy above.

    Every call gets a CLIENT span and carries the W3C trace context
    (shared.telemetry.client_interceptor)."""
    traced = [ClientTracingInterceptor(target), *(interceptors or [])]  # telemetry hook
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS, interceptors=traced)


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
