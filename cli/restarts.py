"""How the supervisor treats a service that exits: restart with back-off inside a rate window, and
give up on that one service — never on the stack.

    RestartPolicy   at most `max_restarts` restarts per `window_s` (a crash older than the window
                    no longer counts, so the count decays); the n-th restart inside the window
                    waits `base_delay_s * 2**(n-1)`, at most `max_delay_s`; a start must answer
                    SERVING within `start_timeout_s`
    Supervision     one service's state, driven by the supervisor's poll with an injected clock:

        running ──crash──▶ waiting ──due──▶ starting ──SERVING──▶ running
           │                  ▲                 │
           │                  └────crash────────┤ (exited, or not SERVING in time)
           │                                    │
           └─clean exit─▶ waiting (due at once, not counted)
        a crash beyond the window's budget ──▶ failed (not restarted; the other services
        keep serving; `nucleus status` shows why; `nucleus up` — SIGHUP — tries again)

A clean exit is code 0 or SIGTERM/SIGINT: the service was asked to stop (by an operator or an
orchestrator) and shut down gracefully. It is restarted at once and not counted as a crash.
An exit before the service became healthy is always a crash (it failed to start).
"""
from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.settings import CliSettings

RUNNING, STARTING, WAITING, FAILED, STOPPED = "running", "starting", "waiting", "failed", "stopped"


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    max_restarts: int = 10
    window_s: float = 300.0
    base_delay_s: float = 0.5       # back-off before the first restart in the window, doubled for each next one
    max_delay_s: float = 30.0       # the longest back-off (not settings: the budget is max_restarts per window_s)
    start_timeout_s: float = 180.0

    @classmethod
    def from_settings(cls, settings: CliSettings) -> RestartPolicy:
        """NUCLEUS_SUPERVISOR_MAX_RESTARTS, _RESTART_WINDOW_S, _START_TIMEOUT_S (shared/settings.py)."""
        return cls(max_restarts=settings.supervisor_max_restarts, window_s=settings.supervisor_restart_window_s,
                   start_timeout_s=settings.supervisor_start_timeout_s)

    def describe(self) -> str:
        return f"at most {self.max_restarts} restarts per {self.window_s / 60:g} min"


def clean_exit(returncode: int) -> bool:
    """Exited because it was asked to stop: code 0, or SIGTERM / SIGINT."""
    return returncode in (0, -signal.SIGTERM, -signal.SIGINT)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class Supervision:
    """One service's restart state (module docstring). Times are the supervisor's clock."""
    name: str
    policy: RestartPolicy
    state: str = RUNNING
    restarts: int = 0                  # since the stack started
    last_exit: str = ""
    reason: str = ""                   # why it is waiting or failed
    next_start: float = 0.0            # when a waiting service starts
    deadline: float = 0.0              # when a starting service must be SERVING
    changed_unix: float = field(default_factory=time.time)
    crashes: deque[float] = field(default_factory=deque)

    def recent_crashes(self, now: float) -> int:
        """Crashes inside the window ending `now` (older ones are forgotten: the count decays)."""
        while self.crashes and self.crashes[0] <= now - self.policy.window_s:
            self.crashes.popleft()
        return len(self.crashes)

    def crashed(self, now: float, why: str) -> None:
        """A crash: wait with back-off, or give up once the window's budget is spent."""
        self.last_exit = why
        p = self.policy
        if self.recent_crashes(now) >= p.max_restarts:
            self._enter(FAILED, f"{why}; {len(self.crashes) + 1} crashes within {p.window_s / 60:g} min "
                                f"({p.describe()}): not restarted")
            return
        self.crashes.append(now)
        delay = min(p.base_delay_s * 2 ** (len(self.crashes) - 1), p.max_delay_s)
        self.next_start = now + delay
        self._enter(WAITING, f"{why}; restart {len(self.crashes)} of {p.max_restarts} in "
                             f"{p.window_s / 60:g} min, in {delay:g}s")

    def exited_cleanly(self, now: float, why: str) -> None:
        """Asked to stop and stopped: restart at once, not counted as a crash."""
        self.last_exit = why
        self.next_start = now
        self._enter(WAITING, f"{why} (asked to stop; not counted as a crash); restarting")

    def starting(self, now: float) -> None:
        self.restarts += 1
        self.deadline = now + self.policy.start_timeout_s
        self._enter(STARTING, self.reason)

    def ready(self) -> None:
        self._enter(RUNNING, "")

    def retry(self, now: float) -> None:
        """An operator asked for another try: the window starts afresh."""
        self.crashes.clear()
        self.next_start = now
        self._enter(WAITING, "restart requested by an operator")

    def stopped(self) -> None:
        self._enter(STOPPED, "")

    def snapshot(self, now: float, wall: Callable[[], float] = time.time) -> dict:
        """The state as stack.json records it (for `nucleus status`)."""
        out = {"state": self.state, "restarts": self.restarts, "recent_crashes": self.recent_crashes(now),
               "last_exit": self.last_exit, "reason": self.reason, "since_unix": round(self.changed_unix, 3)}
        if self.state == WAITING:
            out["next_start_unix"] = round(wall() + max(0.0, self.next_start - now), 3)
        return out

    def _enter(self, state: str, reason: str) -> None:
        self.state, self.reason = state, reason
        self.changed_unix = time.time()
