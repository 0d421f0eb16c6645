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
"""
from __future__ import annotations

import math


class NucleusError(Exception):
    """Base of every error the cores raise on purpose."""

    kind: str = "internal"
    exit_code: int = 1

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class InvalidArgument(NucleusError):
    kind = "invalid_argument"
    exit_code = 2

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}", field=field)


class NotFound(NucleusError):
    kind = "not_found"
    exit_code = 3


class AlreadyExists(NucleusError):
    kind = "already_exists"
    exit_code = 3


class Unauthenticated(NucleusError):
    kind = "unauthenticated"
    exit_code = 4


class PermissionDenied(NucleusError):
    kind = "permission_denied"
    exit_code = 4


class ResourceExhausted(NucleusError):
    kind = "rate_limited"
    exit_code = 5

    def __init__(self, message: str, *, field: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s      # when known: how long until a retry can succeed


def retry_after_seconds(wait_s: float) -> int:
    """A Retry-After value (HTTP's, gRPC's `retry-after` metadata, MCP's `data.retry_after`):
    whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_s))


class StorageFull(ResourceExhausted):
    kind = "storage_full"
    exit_code = 5


class FailedPrecondition(NucleusError):
    kind = "failed_precondition"
    exit_code = 7


class Unavailable(NucleusError):
    kind = "unavailable"
    exit_code = 6

    def __init__(self, message: str, *, field: str | None = None, retries_spent: bool = False) -> None:
        super().__init__(message, field=field)
        # True: the service already retried the dependency as often as its policy allows (or its
        # breaker is open); a client must not retry on top (gRPC: server pushback, grpc_errors.py).
        self.retries_spent = retries_spent


class Unimplemented(NucleusError):
    kind = "unimplemented"
    exit_code = 9           # not 2 (invalid arguments): the same call elsewhere may be served


class DeadlineExceeded(NucleusError):
    kind = "deadline_exceeded"
    exit_code = 6


class UpstreamFailed(NucleusError):
    kind = "upstream_failed"
    exit_code = 6
