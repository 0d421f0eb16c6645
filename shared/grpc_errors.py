"""The translation of `shared.errors` to and from gRPC status: each class's status, the
server-side `translate_errors` wrapper, and `from_grpc_error` for clients.

    InvalidArgument     INVALID_ARGUMENT        Unavailable        UNAVAILABLE
    NotFound            NOT_FOUND               DeadlineExceeded   DEADLINE_EXCEEDED
    AlreadyExists       ALREADY_EXISTS          UpstreamFailed     INTERNAL
    Unauthenticated     UNAUTHENTICATED         NucleusError       INTERNAL (anything else)
    PermissionDenied    PERMISSION_DENIED
    ResourceExhausted   RESOURCE_EXHAUSTED

A subclass answers with its nearest listed base's status.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import grpc

from shared.errors import (
    AlreadyExists,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    NucleusError,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    UpstreamFailed,
)

log = logging.getLogger(__name__)

_STATUS: dict[type[NucleusError], grpc.StatusCode] = {
    NucleusError: grpc.StatusCode.INTERNAL,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    UpstreamFailed: grpc.StatusCode.INTERNAL,
}

_BY_CODE: dict[grpc.StatusCode, type[NucleusError]] = {
    _STATUS[cls]: cls
    for cls in (NotFound, AlreadyExists, Unauthenticated, PermissionDenied, ResourceExhausted,
                Unavailable, DeadlineExceeded)
}


def grpc_status(err: NucleusError) -> grpc.StatusCode:
    """The gRPC status an adapter aborts with for `err`."""
    for cls in type(err).__mro__:
        code = _STATUS.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


def translate_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an async servicer method: NucleusError -> its status; anything else -> INTERNAL
    with a generic message (the traceback is logged, never sent to the caller)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except NucleusError as err:
            await context.abort(grpc_status(err), str(err))
        except grpc.aio.AbortError:
            raise
        except Exception:  # noqa: BLE001 - the boundary: log, answer INTERNAL
            log.exception("unhandled error in %s", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}")

    return wrapper


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


__all__ = ["grpc_status", "translate_errors", "from_grpc_error"]
