"""The audit trail: one JSON object per line, appended to `settings.audit_log`.

Who (tenant, user, credential id — never the credential), what (tool or route), which
resources and entries, the decision (allow / deny) and why:

    {"ts": "2026-11-02T10:15:04.123Z", "event": "tool", "tool": "rag_get_raw_results",
     "tenant": "acme", "user": "alice", "key_id": "k-alice", "auth_method": "api_key",
     "decision": "deny", "reason": "unauthorized_source: legal",
     "resources": ["legal"], "entries": [], "notes": []}

Records are built only from the fields below, and every free-text field goes through the
log redactor, so tokens, keys and link signatures cannot end up here even by mistake.
Writes are small appends under a lock (one process writes one file); a failing write is
logged and never fails the request it describes.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

from shared.identity import Principal
from shared.log import redact

log = logging.getLogger(__name__)

Decision = Literal["allow", "deny"]
MAX_LISTED = 200            # ids per list in one record (the count is kept when cut)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    event: str                                  # "tool" | "document" | "auth"
    decision: Decision
    tool: str = ""                              # tool or route name
    reason: str = ""
    tenant: str = ""
    user: str = ""
    key_id: str = ""
    auth_method: str = ""
    acting_for: bool = False                    # a trusted platform asserted the user
    resources: tuple[str, ...] = ()             # source ids asked for / searched
    entries: tuple[str, ...] = ()               # entry ids returned or opened
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def for_principal(cls, principal: Principal | None, *, event: str, decision: Decision, tool: str = "",
                      reason: str = "", resources: Sequence[str] = (), entries: Sequence[str] = (),
                      notes: Sequence[str] = ()) -> "AuditEvent":
        p = principal
        return cls(event=event, decision=decision, tool=tool, reason=reason,
                   tenant=p.tenant_id if p else "", user=p.user_id if p else "", key_id=p.key_id if p else "",
                   auth_method=p.auth_method if p else "", acting_for=bool(p and p.extra.get("acting_for")),
                   resources=tuple(resources), entries=tuple(entries), notes=tuple(notes))


def _clip(values: Sequence[str]) -> list[str]:
    out = [redact(str(v)) for v in values[:MAX_LISTED]]
    if len(values) > MAX_LISTED:
        out.append(f"... {len(values) - MAX_LISTED} more")
    return out


def to_record(event: AuditEvent, now: dt.datetime | None = None) -> dict:
    ts = (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "ts": ts, "event": event.event, "tool": event.tool, "tenant": event.tenant, "user": redact(event.user),
        "key_id": event.key_id, "auth_method": event.auth_method, "acting_for": event.acting_for,
        "decision": event.decision, "reason": redact(event.reason), "resources": _clip(event.resources),
        "entries": _clip(event.entries), "notes": _clip(event.notes),
    }


class AuditLog:
    """Append-only JSON-lines audit file (created 0600 with its folder if missing)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.close(fd)

    def record(self, event: AuditEvent) -> None:
        if self.path is None:
            return
        line = json.dumps(to_record(event), ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            with self._lock, open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
        except OSError as err:
            log.error("audit log %s not written: %s", self.path, err)


def read_records(path: Path) -> list[dict]:
    """Every record of an audit file (tests and operators)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
