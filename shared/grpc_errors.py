"""The translation of `shared.errors` to and from gRPC status: each class's status, the
server-side `translate_errors` wrapper, and `from_grpc_error` for clients.

    InvalidArgument     INVALID_ARGUMENT        Unavailable        UNAVAILABLE
    NotFound            NOT_FOUND               DeadlineExceeded   DEADLINE_EXCEEDED
    AlreadyExists       ALREADY_EXISTS          UpstreamFailed     INTERNAL
    Unauthenticated     UNAUTHENTICATED         FailedPrecondition FAILED_PRECONDITION
    PermissionDenied    PERMISSION_DENIED       NucleusError       INTERNAL (anything else)
    ResourceExhausted   RESOURCE_EXHAUSTED      Unimplemented      UNIMPLEMENTED

A subclass answers with its nearest listed base's status. The error's `kind` also travels in
the trailing metadata (`nucleus-error-kind`), so a client can tell a subclass that shares its
base's status apart (StorageFull from a rate limit, both RESOURCE_EXHAUSTED). A rate limit
that knows when a retry can succeed adds `retry-after` (whole seconds); `abort_for` is the one
way a server aborts with an error, for servicers (`translate_errors`) and interceptors alike.
A call cut because its connection went away (GOAWAY, "Too many pings", a socket closed or
reset) reads "the connection to the <service> was closed by the server: <gRPC's detail>".
"""
from __future__ import annotations

import functools
import inspect
import logging
import re
from typing import Any, Callable

import grpc

from shared.errors import (
    AlreadyExists, DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, NucleusError, PermissionDenied,
    ResourceExhausted, StorageFull, Unauthenticated, Unavailable, Unimplemented, UpstreamFailed, retry_after_seconds,
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
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    UpstreamFailed: grpc.StatusCode.INTERNAL,
    Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
}

_BY_CODE: dict[grpc.StatusCode, type[NucleusError]] = {
    _STATUS[cls]: cls
    for cls in (NotFound, AlreadyExists, Unauthenticated, PermissionDenied, ResourceExhausted,
                FailedPrecondition, Unavailable, DeadlineExceeded, Unimplemented)
}

KIND_METADATA = "nucleus-error-kind"
# Subclasses a client recognises by the kind in the trailing metadata.
_BY_KIND: dict[str, type[NucleusError]] = {cls.kind: cls for cls in (StorageFull,)}


def grpc_status(err: NucleusError) -> grpc.StatusCode:
    """The gRPC status an adapter aborts with for `err`."""
    for cls in type(err).__mro__:
        code = _STATUS.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


RETRY_AFTER_METADATA = "retry-after"
#: gRPC's server pushback (gRFC A6): a negative value means "do not retry this call".
RETRY_PUSHBACK_METADATA = "grpc-retry-pushback-ms"


def error_metadata(err: NucleusError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata an abort for `err` carries: its kind; for a rate limit that
    knows when a retry can succeed, `retry-after` in whole seconds (as HTTP's Retry-After); for
    an Unavailable whose dependency was already retried (`retries_spent`), gRPC's server
    pushback `grpc-retry-pushback-ms: -1`, which tells the caller's channel not to retry
    (shared/grpc_client.py retries UNAVAILABLE; without it the attempts would multiply)."""
    metadata = [(KIND_METADATA, err.kind)]
    retry_after = getattr(err, "retry_after_s", None)
    if retry_after is not None:
        metadata.append((RETRY_AFTER_METADATA, str(retry_after_seconds(retry_after))))
    if getattr(err, "retries_spent", False):
        metadata.append((RETRY_PUSHBACK_METADATA, "-1"))
    return tuple(metadata)


async def abort_for(context: grpc.aio.ServicerContext, err: NucleusError) -> None:
    """Abort the call being served with `err`'s status, message and trailing metadata."""
    await context.abort(grpc_status(err), str(err), trailing_metadata=error_metadata(err))


def translate_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an async servicer method, or one streaming its reply (an async generator):
    NucleusError -> its status; anything else -> INTERNAL with a generic message (the traceback
    is logged, never sent to the caller)."""

    async def fail(err: Exception, context: grpc.aio.ServicerContext) -> None:
        if isinstance(err, NucleusError):
            await abort_for(context, err)
        if isinstance(err, grpc.aio.AbortError):
            raise err
        log.error("unhandled error in %s", method.__name__, exc_info=err)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}")

    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def streamed(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                async for reply in method(self, request, context):
                    yield reply
            except Exception as err:  # noqa: BLE001 - the boundary
                await fail(err, context)
        return streamed

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except Exception as err:  # noqa: BLE001 - the boundary
            await fail(err, context)

    return wrapper


# What gRPC reports when an established connection went away under a call: the server's
# GOAWAY (its keepalive policy's "too_many_pings", a shutdown), a socket closed or reset.
_CLOSED_CONNECTION = re.compile(r"goaway|too.many.pings|socket closed|connection reset|broken pipe|"
                                r"stream removed|connection closed|endpoint closing", re.IGNORECASE)


def from_grpc_error(err: grpc.RpcError, *, service: str) -> NucleusError:
    """Turn a failed call to one of our services back into the hierarchy (client side)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or str(code)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        field, _, problem = details.partition(": ")
        return InvalidArgument(field if problem else "request", problem or details)
    if code == grpc.StatusCode.UNAVAILABLE and _CLOSED_CONNECTION.search(details):
        return Unavailable(f"the connection to the {service} was closed by the server: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(f"{service} unavailable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(f"{service} did not answer before the deadline")
    cls = _BY_KIND.get(_kind(err)) or _BY_CODE.get(code)
    if cls is not None:
        return cls(details)
    return UpstreamFailed(f"{service} failed ({code.name}): {details}")


def _kind(err: grpc.RpcError) -> str:
    """The `nucleus-error-kind` trailing metadata of a failed call ("" when absent)."""
    try:
        trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    except Exception:  # noqa: BLE001 - a call that failed before any metadata arrived
        return ""
    for key, value in trailing or ():
        if key == KIND_METADATA:
            return value if isinstance(value, str) else value.decode()
    return ""


__all__ = ["grpc_status", "translate_errors", "from_grpc_error", "abort_for", "error_metadata",
           "RETRY_AFTER_METADATA", "RETRY_PUSHBACK_METADATA"]
