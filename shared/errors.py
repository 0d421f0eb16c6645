"""The one error hierarchy of Nucleus RAG, and its translations.

    NucleusError
    ├── InvalidArgument      bad input; names the field and what is accepted
    ├── NotFound             unknown tenant / artifact / profile
    ├── AlreadyExists
    ├── Unauthenticated      no or bad credentials
    ├── PermissionDenied     authenticated, but not allowed (e.g. unauthorized_source)
    ├── ResourceExhausted    rate limited / over quota
    ├── Unavailable          a dependency is down or its circuit breaker is open
    ├── DeadlineExceeded     a dependency did not answer in time
    └── UpstreamFailed       a dependency answered with garbage (e.g. malformed LLM JSON)

Cores raise these. Each adapter translates exactly once: gRPC status (`grpc_status`),
MCP tool error (`mcp_error_text`), CLI exit code (`exit_code`).
"""
from __future__ import annotations

import grpc


class NucleusError(Exception):
    """Base of every error the cores raise on purpose."""

    grpc_code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    kind: str = "internal"
    exit_code: int = 1

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message


class InvalidArgument(NucleusError):
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT
    kind = "invalid_argument"
    exit_code = 2

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}", field=field)


class NotFound(NucleusError):
    grpc_code = grpc.StatusCode.NOT_FOUND
    kind = "not_found"
    exit_code = 3


class AlreadyExists(NucleusError):
    grpc_code = grpc.StatusCode.ALREADY_EXISTS
    kind = "already_exists"
    exit_code = 3


class Unauthenticated(NucleusError):
    grpc_code = grpc.StatusCode.UNAUTHENTICATED
    kind = "unauthenticated"
    exit_code = 4


class PermissionDenied(NucleusError):
    grpc_code = grpc.StatusCode.PERMISSION_DENIED
    kind = "permission_denied"
    exit_code = 4


class ResourceExhausted(NucleusError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED
    kind = "rate_limited"
    exit_code = 5


class Unavailable(NucleusError):
    grpc_code = grpc.StatusCode.UNAVAILABLE
    kind = "unavailable"
    exit_code = 6


class DeadlineExceeded(NucleusError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED
    kind = "deadline_exceeded"
    exit_code = 6


class UpstreamFailed(NucleusError):
    grpc_code = grpc.StatusCode.INTERNAL
    kind = "upstream_failed"
    exit_code = 6


_BY_CODE: dict[grpc.StatusCode, type[NucleusError]] = {
    cls.grpc_code: cls
    for cls in (NotFound, AlreadyExists, Unauthenticated, PermissionDenied, ResourceExhausted,
                Unavailable, DeadlineExceeded)
}


def grpc_status(err: NucleusError) -> grpc.StatusCode:
    """The gRPC status an adapter aborts with for `err`."""
    return err.grpc_code


def mcp_error_text(err: NucleusError) -> str:
    """The text of the MCP tool error for `err` (kind first, so clients can match on it)."""
    return f"{err.kind}: {err.message}"


def from_grpc_error(err: grpc.RpcError, *, service: str) -> NucleusError:
    """Turn a failed call to one of our services back into the hierarchy (client side)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or str(code)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        field, _, problem = details.partition(": ")
        return InvalidArgument(field if problem else "request", problem or details)
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"{service} unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"{service} did not answer before the deadline")
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(details)
    return UpstreamFailed(f"{service} failed ({code.name}): {details}")
