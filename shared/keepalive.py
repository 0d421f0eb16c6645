"""gRPC keepalive: what our clients send and what our servers permit, defined together so they
agree (constants, not settings: nothing here is a user's choice).

    client  pings every KEEPALIVE_TIME_MS (30 s), with or without a call in flight, without a
            cap on pings between data frames; an unacknowledged ping closes the connection
            after KEEPALIVE_TIMEOUT_MS (20 s)
    server  accepts a ping without data every KEEPALIVE_TIME_MS / 2 (15 s): a client pinging
            at its own pace never earns a strike; a peer pinging faster gets GOAWAY
            "too_many_pings" at its third strike (gRPC's default of 2 strikes, stated here);
            pings its clients every 2 x KEEPALIVE_TIME_MS (60 s), so a client that vanished
            mid-call is noticed (and its call cancelled) within about 80 s

gRPC's server default (one ping without data per 5 minutes, none without a call) is what cut
long calls that send nothing while they run, such as a large ingest ("Too many pings").
`client_options` / `server_options` take the interval so a test can run the same policy at
a smaller scale (doc/keepalive.md of grpc/grpc names every argument).
"""
from __future__ import annotations

KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 20_000
MAX_PING_STRIKES = 2


def client_options(time_ms: int = KEEPALIVE_TIME_MS) -> list[tuple[str, int]]:
    """A channel's keepalive arguments: a ping every `time_ms`, calls in flight or not."""
    return [
        ("grpc.keepalive_time_ms", time_ms),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def server_options(time_ms: int = KEEPALIVE_TIME_MS) -> list[tuple[str, int]]:
    """A server's keepalive policy permitting what `client_options(time_ms)` sends (half the
    interval, so a ping delayed on the way and the next one on time is no strike), and its own
    pings every 2 x `time_ms` to find clients that are gone."""
    return [
        ("grpc.keepalive_permit_without_calls", 1),
        # GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS; its string has no "recv"
        ("grpc.http2.min_ping_interval_without_data_ms", time_ms // 2),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.keepalive_time_ms", 2 * time_ms),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.http2.max_pings_without_data", 0),
    ]


__all__ = ["KEEPALIVE_TIME_MS", "KEEPALIVE_TIMEOUT_MS", "MAX_PING_STRIKES", "client_options", "server_options"]
