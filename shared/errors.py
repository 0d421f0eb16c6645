"""The one error hierarchy of Nucleus RAG. No transport is known here.

    NucleusError
    ├── InvalidArgument      bad input; names the field and what is accepted
    ├── NotFound             unknown tenant / artifact / profile
    ├── AlreadyExists
    ├── Unauthenticated      no or bad credentials
    ├── PermissionDenied     authenticated, but not allowed (e.g. unauthorized_source)
    ├── ResourceExhausted    rate limited / over quota
    │   └── StorageFull      no space left in the data directory (names it and its free space)
    ├── FailedPrecondition   the system is not in a state that allows the call, and retrying
    │                        will not help until an operator acts (read-only data directory,
    │                        corrupted tenant store); names the path
    ├── Unavailable          a dependency is down or its circuit breaker is open
    ├── Unimplemented        the call exists but this configuration does not serve it (e.g.
    │                        an embedded-only KnowledgeStore call on the Qdrant backend)
    ├── DeadlineExceeded     a dependency did not answer in time
    └── UpstreamFailed       a dependency answered with garbage (e.g. malformed LLM JSON)

Cores raise these. Each adapter translates exactly once, in its own module:

    gRPC status, and back on the client side   shared.grpc_errors (grpc_status, from_grpc_error)
    MCP tool error / JSON-RPC code             shared.mcp_errors
    CLI exit code                              `exit_code` on each class, used by the operator CLI:
                                               1 internal, 2 invalid argument, 3 not found / exists,
                                               4 unauthenticated / denied, 5 exhausted / storage full,
                                               6 unavailable / deadline / upstream, 7 failed
                                               precondition, 9 unimplemented (docs/OPERATIONS.md)

Below the hierarchy, the ranges every integer from a caller must lie in before it reaches SQLite or
protobuf:

    INT32_MAX       protobuf int32 fields (top_k, version, chunk_index, max_chars, ...)
    INT64_MAX       protobuf int64 and SQLite INTEGER
    MAX_UNIX_TIME   the last second of year 9999: the largest time a date bound may name
    check_int()     InvalidArgument naming the field and the accepted range, never an
                    OverflowError / ValueError from a driver deep inside a call

MCP tool inputs declare the same bounds in their schemas (`Field(ge=..., le=...)`); the cores
check again, because gRPC requests and Python callers do not pass through those schemas.
"""
from __future__ import annotations

import math


class NucleusError(Exception):
    """Base of every error the cores raise on purpose."""

    kind: str = "internal"
    exit_code: int = 1

    def __init_subclass__(cls, *, kind: str | None = None, exit_code: int | None = None, **rest) -> None:
        """`class NotFound(NucleusError, kind="not_found", exit_code=3)`: a subclass's kind and CLI
        exit code, each its base's when not given."""
        super().__init_subclass__(**rest)
        if kind is not None:
            cls.kind = kind
        if exit_code is not None:
            cls.exit_code = exit_code

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class InvalidArgument(NucleusError, kind="invalid_argument", exit_code=2):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}", field=field)


class NotFound(NucleusError, kind="not_found", exit_code=3):
    pass


class AlreadyExists(NucleusError, kind="already_exists", exit_code=3):
    pass


class Unauthenticated(NucleusError, kind="unauthenticated", exit_code=4):
    pass


class PermissionDenied(NucleusError, kind="permission_denied", exit_code=4):
    pass


class ResourceExhausted(NucleusError, kind="rate_limited", exit_code=5):
    def __init__(self, message: str, *, field: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s      # when known: how long until a retry can succeed


def retry_after_seconds(wait_s: float) -> int:
    """A Retry-After value (HTTP's, gRPC's `retry-after` metadata, MCP's `data.retry_after`):
    whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_s))


class StorageFull(ResourceExhausted, kind="storage_full", exit_code=5):
    pass


class FailedPrecondition(NucleusError, kind="failed_precondition", exit_code=7):
    pass


class Unavailable(NucleusError, kind="unavailable", exit_code=6):
    def __init__(self, message: str, *, field: str | None = None, retries_spent: bool = False) -> None:
        super().__init__(message, field=field)
        # True: the service already retried the dependency as often as its policy allows (or its
        # breaker is open); a client must not retry on top (gRPC: server pushback, grpc_errors.py).
        self.retries_spent = retries_spent


class Unimplemented(NucleusError, kind="unimplemented", exit_code=9):
    """Exit code 9, not 2 (invalid arguments): the same call elsewhere may be served."""


class DeadlineExceeded(NucleusError, kind="deadline_exceeded", exit_code=6):
    pass


class UpstreamFailed(NucleusError, kind="upstream_failed", exit_code=6):
    pass


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_UNIX_TIME = 253_402_300_799          # 9999-12-31T23:59:59Z


def shown(value: object) -> str:
    """`value` for an error message, short even for a huge integer (no 4300-digit reprs)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {len(str(abs(value))) if abs(value) < 10**4000 else 'more than 4000'} digits"
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def check_int(field: str, value: object, lo: int, hi: int) -> int:
    """`value` if it is an int (not a bool) in lo..hi; InvalidArgument naming `field` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(field, f"must be an integer in {lo}..{hi}, got {shown(value)}")
    return value


def check_unix_time(field: str, value: object) -> int:
    """A unix time in seconds, 0 (= open / unknown) to MAX_UNIX_TIME."""
    return check_int(field, value, 0, MAX_UNIX_TIME)
