"""One tool call's book-keeping (when it started, who made it, the notes for its meta_data)
and the audit record it ends with."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from shared.audit import AuditEvent, AuditLog
from shared.identity import Principal


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
    """Record the outcome of `call` (event "tool") with its principal and notes."""
    audit.record(AuditEvent.for_principal(call.principal, event="tool", decision=decision, tool=call.tool,
                                          reason=reason, resources=list(resources),
                                          entries=list(entries), notes=call.notes or ()))
