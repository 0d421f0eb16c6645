"""shared.keepalive: our channels' pings and our servers' policy agree. Real grpc.aio servers
and channels on 127.0.0.1 with the product's options, the keepalive interval scaled to 1 s
(gRPC core sends at most one ping a second without data, so a smaller scale is not honoured).
Each case runs beside gRPC's default server policy, which cuts the same traffic: that is what
makes the case able to fail, and how long it waits."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from shared import keepalive
from shared.errors import Unavailable
from shared.grpc_client import call, channel_options

INTERVAL_MS = 1_000
BOUND_S = 30.0        # gRPC's default policy closes the connection within a few intervals


def _client_options() -> list[tuple[str, object]]:
    """The product's channel options with the keepalive interval scaled down."""
    return list((dict(channel_options()) | dict(keepalive.client_options(INTERVAL_MS))).items())


@contextlib.asynccontextmanager
async def _served(server_options: list[tuple[str, int]], hold: asyncio.Event) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to a real server whose /t.T/Hold sends nothing until `hold` is set (b"wait")
    or answers at once, with the caller's address (its connection) either way."""
    async def hold_call(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if request == b"wait":
            await asyncio.wait_for(hold.wait(), BOUND_S)
        return context.peer().encode()

    server = grpc.aio.server(options=server_options)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.T", {"Hold": grpc.unary_unary_rpc_method_handler(hold_call)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=_client_options()) as channel:
            yield channel
    finally:
        await server.stop(None)


async def _hold(channel: grpc.aio.Channel, request: bytes) -> str:
    return (await call(channel.unary_unary("/t.T/Hold"), request, timeout=BOUND_S, service="KnowledgeStore")).decode()


async def test_a_call_that_sends_nothing_for_many_keepalive_intervals_completes():
    released = asyncio.Event()
    async with _served(keepalive.server_options(INTERVAL_MS), released) as ours, \
            _served([], released) as grpc_default:
        held = asyncio.create_task(_hold(ours, b"wait"))
        with pytest.raises(Unavailable) as caught:       # pings on a silent call: third strike, GOAWAY
            await _hold(grpc_default, b"wait")
        released.set()                                   # ours has been silent as long
        assert (await held).startswith("ipv4:127.0.0.1:")
    assert str(caught.value).startswith("the connection to the KnowledgeStore was closed by the server: ")
    assert "too many pings" in str(caught.value).lower()


async def test_an_idle_channel_keeps_its_connection_past_what_the_default_policy_tolerates():
    never = asyncio.Event()
    async with _served(keepalive.server_options(INTERVAL_MS), never) as ours, \
            _served([], never) as grpc_default:
        first = {ch: await _hold(ch, b"") for ch in (ours, grpc_default)}
        # idle pings: gRPC's default policy (no pings without calls) sends GOAWAY at the third
        await asyncio.wait_for(grpc_default.wait_for_state_change(grpc.ChannelConnectivity.READY), BOUND_S)
        assert ours.get_state() == grpc.ChannelConnectivity.READY
        assert await _hold(ours, b"") == first[ours]                # the same connection answers
        assert await _hold(grpc_default, b"") != first[grpc_default]  # a new connection had to be made


def test_every_service_server_and_channel_carries_the_policy():
    from shared.service_runner import SERVER_OPTIONS

    assert set(keepalive.server_options()) <= set(SERVER_OPTIONS)
    assert set(keepalive.client_options()) <= set(channel_options())
