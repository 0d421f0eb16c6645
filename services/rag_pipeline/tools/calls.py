"""One tool call's book-keeping (when it started, who made it, the notes for its meta_data)
and the audit record it ends with.

Every MCP tool call on the RAGPipeline's server leaves exactly one `event: tool` audit line,
written in one place: `tool_audit_middleware`, the outermost middleware of the server, so
refusals, rate-limited calls, unknown tools, proxy tools and the sources tools are covered
whatever registered them. A tool that knows more (which sources it searched, which entries it
returned, why it refused) hands its record to the middleware with `audit_call`; any other call
gets the middleware's own record (caller, tool, allow/deny and the error kind). Arguments and
results are never recorded; reasons are redacted.
"""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from shared.audit import AuditEvent, AuditLog
from shared.identity import Principal
from shared.redaction import redact

MAX_TOOL_NAME = 128


@dataclass
class _Pending:
    """The record the tool being served handed over (None: the middleware writes its own)."""
    record: AuditEvent | None = None


_PENDING: ContextVar[_Pending | None] = ContextVar("nucleus_tool_audit", default=None)


@dataclass
class Call:
    """Book-keeping of one tool call, for meta_data and the audit record."""

    tool: str
    principal: Principal | None = None
    started: float = 0.0
    notes: list[str] | None = None

    def __post_init__(self) -> None:
        self.started = time.perf_counter()
        self.notes = []

    @property
    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000.0, 2)


def audit_call(audit: AuditLog, call: Call, decision: Literal["allow", "deny"], reason: str = "", *,
               resources: tuple[str, ...] | list[str] = (), entries: tuple[str, ...] | list[str] = ()) -> None:
    """Record the outcome of `call` (event "tool") with its principal and notes: handed to the
    audit middleware when the call came through it (it writes one line per call), else written."""
    event = AuditEvent.for_principal(call.principal, event="tool", decision=decision, tool=call.tool,
                                     reason=reason, resources=list(resources),
                                     entries=list(entries), notes=call.notes or ())
    pending = _PENDING.get()
    if pending is not None:
        pending.record = event
    else:
        audit.record(event)


def _error_reason(err: BaseException) -> str:
    kind = getattr(err, "kind", "") or getattr(getattr(err, "error", None), "code", "") or type(err).__name__
    message = getattr(err, "message", "") or str(err)
    return redact(f"{kind}: {message}"[:300])


def _result_error(result: Any) -> str | None:
    """The error text of a tool result that is an error (None: it is not)."""
    is_error = result.get("isError") if isinstance(result, Mapping) else getattr(result, "is_error", False)
    if not is_error:
        return None
    content = result.get("content", []) if isinstance(result, Mapping) else getattr(result, "content", [])
    texts = [c.get("text", "") if isinstance(c, Mapping) else getattr(c, "text", "") for c in content or []]
    return redact(" ".join(t for t in texts if t)[:300]) or "the tool reported an error"


def tool_audit_middleware(audit: AuditLog, principal_of: Callable[[Any], Principal | None]
                          ) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
    """MCPServer middleware writing one `event: tool` line per tools/call (module docstring).
    Install it before every other middleware of ours, so that their refusals are recorded too."""

    async def audited(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if getattr(ctx, "method", None) != "tools/call":
            return await call_next(ctx)
        params = getattr(ctx, "params", None) or {}
        name = params.get("name") if isinstance(params, Mapping) else None
        tool = name[:MAX_TOOL_NAME] if isinstance(name, str) else "(no tool name)"
        pending = _Pending()
        token = _PENDING.set(pending)
        decision: Literal["allow", "deny"] = "allow"
        reason = ""
        try:
            result = await call_next(ctx)
            error = _result_error(result)
            if error is not None:
                decision, reason = "deny", error
            return result
        except BaseException as err:
            decision, reason = "deny", _error_reason(err)
            raise
        finally:
            _PENDING.reset(token)
            if pending.record is not None:
                audit.record(pending.record)
            else:
                try:
                    who = principal_of(ctx)
                except Exception:          # no valid identity: the call is refused, and recorded as such
                    who = None
                audit.record(AuditEvent.for_principal(who, event="tool", decision=decision, tool=tool,
                                                      reason=reason))

    return audited
