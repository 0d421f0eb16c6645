"""Every translation of `shared.errors` into MCP, in one place.

Three shapes, one per contract a tool follows:

    tool error       `guarded` / `mcp_error_text`: the SDK's tool result with is_error=True and
                     the text "<kind>: <message>" (clients match on the kind). The default.
    result code      `error_code_for`: the `ErrorCode` a tool reports inside its result
                     (`results.error.code`) instead of failing, e.g. "unauthorized_source".
    JSON-RPC error   `jsonrpc_error`: a JSON-RPC error response (-32602 bad params, -32603
                     internal, -320xx authentication / authorization / rate limit);
                     `invalid_params_middleware` answers malformed `tools/call` params, and
                     bad arguments of chosen tools, with -32602 before the tool runs, naming
                     the problem (`validation_problem`); a rate limit carries
                     `data.retry_after` (seconds).

Only MCP, pydantic and `shared.errors` are imported here: no service, no transport of ours.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, Literal, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import BaseModel, ValidationError

from shared.errors import (
    DeadlineExceeded, FailedPrecondition, InvalidArgument, NucleusError, PermissionDenied, ResourceExhausted,
    StorageFull, Unauthenticated, Unavailable, UpstreamFailed, retry_after_seconds,
)

T = TypeVar("T")

ErrorCode = Literal["unauthorized_user", "unauthorized_source", "rate_limited", "invalid_source",
                    "backend_unavailable", "token_expired"]
"""The error codes a tool may report inside its result (`invalid_source` is decided by the
tool itself: a requested source that does not exist)."""

UNAUTHORIZED = -32001
FORBIDDEN = -32003
RATE_LIMITED = -32029


# ---------------------------------------------------------------------------- tool errors
def mcp_error_text(err: NucleusError) -> str:
    """The text of the MCP tool error for `err` (kind first, so clients can match on it)."""
    return f"{err.kind}: {err.message}"


async def guarded(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a tool body; our errors become MCP tool errors (is_error=True, kind-prefixed text)."""
    try:
        return await fn()
    except NucleusError as err:
        raise ToolError(mcp_error_text(err)) from None


# ---------------------------------------------------------------------------- result codes
def error_code_for(err: NucleusError) -> ErrorCode | None:
    """The result error code for `err`; None when the error is not one a result reports (the
    tool then fails with a tool error). An `Unauthenticated` error whose `reason` is "expired"
    (a bearer token past its expiry) is `token_expired`."""
    if isinstance(err, Unauthenticated) and getattr(err, "reason", None) == "expired":
        return "token_expired"
    if isinstance(err, Unauthenticated):
        return "unauthorized_user"
    if isinstance(err, PermissionDenied):
        return "unauthorized_source"
    if isinstance(err, (StorageFull, FailedPrecondition)):   # the store cannot serve it: not a rate limit
        return "backend_unavailable"
    if isinstance(err, ResourceExhausted):
        return "rate_limited"
    if isinstance(err, (Unavailable, DeadlineExceeded, UpstreamFailed)):
        return "backend_unavailable"
    return None


# ---------------------------------------------------------------------------- JSON-RPC errors
def jsonrpc_error(err: NucleusError) -> MCPError:
    """A JSON-RPC error for `err` (-32602 bad params, -32603 internal, -320xx ours)."""
    if isinstance(err, InvalidArgument):
        return MCPError(INVALID_PARAMS, f"Invalid params: {err.message}")
    if isinstance(err, Unauthenticated):
        return MCPError(UNAUTHORIZED, f"Unauthorized: {err.message}")
    if isinstance(err, PermissionDenied):
        return MCPError(FORBIDDEN, f"Forbidden: {err.message}")
    if isinstance(err, ResourceExhausted) and not isinstance(err, StorageFull):
        return MCPError(RATE_LIMITED, f"Rate limited: {err.message}", data=retry_after_data(err))
    return MCPError(INTERNAL_ERROR, f"RAG search failed: {err.message}")


def retry_after_data(err: ResourceExhausted) -> dict[str, int] | None:
    """`{"retry_after": seconds}` (whole seconds, as HTTP's Retry-After) when the error knows."""
    wait = err.retry_after_s
    return None if wait is None else {"retry_after": retry_after_seconds(wait)}


def validation_problem(err: ValidationError) -> str:
    """Each pydantic error as "<field path>: <message>", joined by "; "."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


Middleware = Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]


def call_params_problem(params: Any) -> str:
    """What is wrong with the shape of `tools/call` params ("" = nothing): `name` must be a
    string, `arguments` an object (or absent)."""
    if not isinstance(params, Mapping):
        return f"params: must be an object, got {type(params).__name__}"
    name = params.get("name")
    if not isinstance(name, str) or not name:
        return f"name: must be a non-empty string (the tool's name), got {type(name).__name__}"
    arguments = params.get("arguments")
    if arguments is not None and not isinstance(arguments, Mapping):
        return f"arguments: must be an object of named arguments, got {type(arguments).__name__}"
    return ""


def invalid_params_middleware(arguments: Mapping[str, type[BaseModel]]) -> Middleware:
    """MCPServer middleware: a `tools/call` whose params are malformed (`call_params_problem`:
    a non-string name, arguments that are not an object) or that names a tool in `arguments`
    whose arguments do not validate against its model is answered with JSON-RPC -32602 naming
    the problem, before the tool runs. Other tools keep the SDK's tool-error behaviour for bad
    argument values. Every MCP server of ours installs it (with `{}` when no tool needs -32602)."""

    async def invalid_params(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if getattr(ctx, "method", None) == "tools/call":
            params = ctx.params or {}
            problem = call_params_problem(params)
            if problem and getattr(ctx, "request_id", "") is None:     # a notification: no answer is owed
                logging.getLogger(__name__).debug("dropped a tools/call notification: %s", problem)
                return None
            if problem:
                raise MCPError(INVALID_PARAMS, f"Invalid params: {problem}")
            model = arguments.get(params["name"])
            if model is not None:
                try:
                    model.model_validate(params.get("arguments") or {})
                except ValidationError as err:
                    raise MCPError(INVALID_PARAMS, f"Invalid params: {validation_problem(err)}") from None
        return await call_next(ctx)

    return invalid_params
