"""shared.grpc_client: the channel retries UNAVAILABLE only for the methods named idempotent.
A real grpc.aio server on 127.0.0.1 whose methods fail their first attempt."""
from __future__ import annotations

from collections import Counter

import grpc
import pytest

from shared.errors import Unavailable
from shared.grpc_client import aio_channel, call, method_name, service_config


async def test_only_methods_named_idempotent_are_retried():
    attempts: Counter[str] = Counter()

    def failing_once(name: str):
        async def handler(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            attempts[name] += 1
            if attempts[name] == 1:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
            return request
        return grpc.unary_unary_rpc_method_handler(handler)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.v1.T", {"Read": failing_once("Read"), "Write": failing_once("Write")}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        target = f"127.0.0.1:{port}"
        async with aio_channel(target, idempotent={method_name("t.v1.T", "Read")}) as channel:
            assert await call(channel.unary_unary("/t.v1.T/Read"), b"r", timeout=10, service="T") == b"r"
            with pytest.raises(Unavailable, match="restarting"):
                await call(channel.unary_unary("/t.v1.T/Write"), b"w", timeout=10, service="T")
        assert attempts == {"Read": 2, "Write": 1}
        async with aio_channel(target) as channel:                 # no idempotent set: nothing is retried
            attempts.clear()
            with pytest.raises(Unavailable):
                await call(channel.unary_unary("/t.v1.T/Read"), b"r", timeout=10, service="T")
        assert attempts == {"Read": 1}
    finally:
        await server.stop(None)


def test_an_idempotent_name_that_is_not_a_full_method_name_is_refused():
    with pytest.raises(ValueError, match="'GetEntries' is not a full gRPC method name: expected '/package.Service/Method'"):
        service_config({"GetEntries"})
