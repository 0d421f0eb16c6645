"""Console sessions, held server-side: the cookie carries a random id, never a credential.

    SessionStore   login -> a new random id (no fixation), the verified Principal, a CSRF token;
                   a session ends at the credential's expiry or the absolute lifetime, whichever
                   is first, after `idle_s` without a request, or at logout (revoked here, so
                   the old cookie no longer works)
    LoginLimiter   login attempts per client address in a sliding window
"""
from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from shared.identity import Principal

MAX_SESSIONS = 10_000          # the oldest session is dropped beyond this
MAX_TRACKED_ADDRESSES = 10_000


@dataclass(slots=True)
class Session:
    session_id: str
    principal: Principal
    csrf: str
    expires_at: float              # absolute end: the credential's expiry or the lifetime cap
    last_seen: float
    created_at: float = field(default=0.0)

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf.encode(), str(token).encode())


class SessionStore:
    """In-memory sessions of one process (a restart logs everybody out)."""

    def __init__(self, *, lifetime_s: float = 8 * 3600.0, idle_s: float = 30 * 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.lifetime_s = lifetime_s
        self.idle_s = idle_s
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, principal: Principal, credential_expires_at: float | None = None) -> Session:
        """A new session with a new random id and CSRF token (any earlier id is not reused)."""
        now = self._clock()
        end = now + self.lifetime_s
        if credential_expires_at is not None:
            end = min(end, float(credential_expires_at))
        session = Session(session_id=secrets.token_urlsafe(32), principal=principal, csrf=secrets.token_urlsafe(32),
                          expires_at=end, last_seen=now, created_at=now)
        self._sessions[session.session_id] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of `session_id` (its idle clock restarted); None when unknown, expired or idle."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now >= session.expires_at or now - session.last_seen >= self.idle_s:
            self._sessions.pop(session_id, None)
            return None
        session.last_seen = now
        return session

    def revoke(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


class LoginLimiter:
    """At most `attempts` logins per `window_s` from one client address (successful or not)."""

    def __init__(self, attempts: int = 10, window_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic):
        self.attempts = attempts
        self.window_s = window_s
        self._clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def allow(self, address: str) -> bool:
        now = self._clock()
        times = self._seen.pop(address, None) or deque()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        allowed = len(times) < self.attempts
        if allowed:
            times.append(now)
        self._seen[address] = times
        while len(self._seen) > MAX_TRACKED_ADDRESSES:
            self._seen.popitem(last=False)
        return allowed


__all__ = ["Session", "SessionStore", "LoginLimiter"]
