"""The supervisor restarts a service that exits — back-off, a rate window whose count decays,
clean exits not counted — and gives up on one service that keeps crashing while the others
keep serving; it never stops the stack on its own. Real child processes (a small stand-in
program announcing a ready file), killed with real signals; the supervisor's clock is set by
the test, so back-off and windows are checked without waiting for them."""
from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from cli.restarts import FAILED, RUNNING, STARTING, WAITING, RestartPolicy
from cli.supervisor import SERVICES, Supervisor
from shared.settings import CliSettings

# A service stand-in: announces its address (port 0 = "pick one": it reports 4242) and serves
# until SIGTERM, which it answers by exiting cleanly, as the real services do.
SERVICE = """
import json, os, signal, sys
ready = sys.argv[sys.argv.index("--ready-file") + 1]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
port = os.environ.get("{prefix}GRPC_PORT", "0")
with open(ready + ".tmp", "w") as f:
    json.dump({"grpc": "127.0.0.1:" + (port if port != "0" else "4242"), "mcp": "", "pid": os.getpid()}, f)
os.replace(ready + ".tmp", ready)
while True:
    signal.pause()
"""
PREFIX = {"llm_orchestration": "NUCLEUS_LLM_", "knowledge_store": "NUCLEUS_KS_", "rag_pipeline": "NUCLEUS_RAG_"}
CANNOT_START = [sys.executable, "-c", "import sys; sys.exit(3)"]
POLICY = RestartPolicy(max_restarts=3, window_s=60.0, base_delay_s=1.0, max_delay_s=4.0, start_timeout_s=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def healthy() -> dict[str, bool]:
    """Whether each service answers SERVING once it announced itself (all do, unless set False)."""
    return {name: True for name in SERVICES}


@pytest.fixture
def supervisor(tmp_path, clock, healthy):
    sup = Supervisor(tmp_path, ephemeral_ports=True, policy=POLICY, clock=clock,
                     commands={n: [sys.executable, "-c", SERVICE.replace("{prefix}", PREFIX[n])] for n in SERVICES},
                     probe=lambda name, address: healthy[name])
    sup.start(timeout_s=30)
    yield sup
    sup.stop()


def state_of(sup: Supervisor, name: str = "knowledge_store") -> str:
    return sup.supervision[name].state


def kill(sup: Supervisor, name: str = "knowledge_store", sig: int = signal.SIGKILL) -> int:
    proc = sup.children[name].proc
    proc.send_signal(sig)
    proc.wait(timeout=10)
    return proc.pid


def until_running(sup: Supervisor, name: str = "knowledge_store", timeout_s: float = 20.0) -> None:
    """Poll (the clock stands still) until the restarted process has announced itself; bounded."""
    deadline = time.monotonic() + timeout_s
    while state_of(sup, name) != RUNNING:
        assert time.monotonic() < deadline, f"{name} not running: {sup.supervision[name]}"
        sup.poll()
        time.sleep(0.01)


def stack_json(sup: Supervisor) -> dict:
    return json.loads(sup.state_file.read_text())


def others_serving(sup: Supervisor, pids: dict[str, int]) -> bool:
    return all(sup.children[n].proc.pid == pid and sup.children[n].proc.poll() is None and state_of(sup, n) == RUNNING
               for n, pid in pids.items())


def pids_of_others(sup: Supervisor) -> dict[str, int]:
    return {n: sup.children[n].proc.pid for n in SERVICES if n != "knowledge_store"}


def test_a_killed_service_is_restarted_on_its_ports_with_exponential_back_off(supervisor, clock):
    others = pids_of_others(supervisor)
    port = supervisor.children["knowledge_store"].address["grpc"].rsplit(":", 1)[1]
    for attempt, delay in enumerate((1.0, 2.0, 4.0), start=1):
        old = kill(supervisor)
        supervisor.poll()
        sup = supervisor.supervision["knowledge_store"]
        assert sup.state == WAITING and "killed by SIGKILL" in sup.reason
        assert sup.next_start == pytest.approx(clock.now + delay)
        clock.advance(delay - 0.01)
        supervisor.poll()
        assert state_of(supervisor) == WAITING and supervisor.children["knowledge_store"].proc.pid == old
        clock.advance(0.01)
        supervisor.poll()
        assert state_of(supervisor) == STARTING
        until_running(supervisor)
        assert supervisor.children["knowledge_store"].proc.pid != old
        assert supervisor.children["knowledge_store"].env["NUCLEUS_KS_GRPC_PORT"] == port
        assert stack_json(supervisor)["supervision"]["knowledge_store"]["restarts"] == attempt
    assert others_serving(supervisor, others)


def test_status_shows_the_last_exit_and_the_log_of_a_service_restarted_after_kill_9(supervisor, clock):
    """README: `nucleus status` shows each service's state, its last exit and where its log is —
    also once the service runs again after its restart."""
    from rich.console import Console

    from cli.status import service_table

    kill(supervisor)                                     # kill -9
    supervisor.poll()
    clock.advance(1.0)
    supervisor.poll()
    until_running(supervisor)
    table, _ = service_table(stack_json(supervisor), lambda name, address: True)
    console = Console(record=True, width=400)
    console.print(table)
    text = console.export_text()
    log = supervisor.run_dir / "knowledge_store.log"
    assert f"running (1 restart); last exit: killed by SIGKILL; log {log}" in text
    assert "llm_orchestration" in text and "last exit" not in text.split("llm_orchestration", 1)[1].split("\n")[0]


def test_a_service_crashing_beyond_the_window_is_marked_failed_and_the_others_keep_serving(supervisor, clock):
    others = pids_of_others(supervisor)
    for delay in (1.0, 2.0, 4.0):
        kill(supervisor)
        supervisor.poll()
        clock.advance(delay)
        supervisor.poll()
        until_running(supervisor)
    kill(supervisor)                                     # the 4th crash within a minute
    supervisor.poll()
    sup = supervisor.supervision["knowledge_store"]
    assert sup.state == FAILED
    assert "killed by SIGKILL" in sup.reason and "4 crashes within 1 min" in sup.reason
    recorded = stack_json(supervisor)
    assert recorded["supervision"]["knowledge_store"]["state"] == "failed"
    assert recorded["restart_policy"] == "at most 3 restarts per 1 min"
    for _ in range(3):                                   # hours later: still failed, still not restarted
        clock.advance(3_600)
        supervisor.poll()
    assert state_of(supervisor) == FAILED and supervisor.children["knowledge_store"].proc.poll() is not None
    assert others_serving(supervisor, others) and supervisor.state_file.exists()

    assert supervisor.retry_failed() == ["knowledge_store"]   # `nucleus up` (SIGHUP) asks for another try
    supervisor.poll()
    until_running(supervisor)
    assert others_serving(supervisor, others)


def test_the_crash_count_decays_as_old_crashes_leave_the_window(supervisor, clock):
    for delay in (1.0, 2.0, 4.0):
        kill(supervisor)
        supervisor.poll()
        clock.advance(delay)
        supervisor.poll()
        until_running(supervisor)
    clock.advance(POLICY.window_s)                       # all three crashes are now older than the window
    kill(supervisor)
    supervisor.poll()
    sup = supervisor.supervision["knowledge_store"]
    assert sup.state == WAITING and sup.next_start == pytest.approx(clock.now + POLICY.base_delay_s)
    assert stack_json(supervisor)["supervision"]["knowledge_store"]["recent_crashes"] == 1


def test_a_clean_exit_after_sigterm_is_restarted_at_once_and_not_counted_as_a_crash(supervisor, clock):
    for _ in range(POLICY.max_restarts + 2):
        kill(supervisor, sig=signal.SIGTERM)
        supervisor.poll()
        sup = supervisor.supervision["knowledge_store"]
        assert sup.state == WAITING and "not counted as a crash" in sup.reason
        supervisor.poll()                                # due at once: the clock did not move
        until_running(supervisor)
    assert supervisor.supervision["knowledge_store"].recent_crashes(clock.now) == 0


def test_each_failed_start_counts_as_a_crash_until_the_service_is_marked_failed(supervisor, clock):
    supervisor.children["knowledge_store"].argv = CANNOT_START
    kill(supervisor)
    supervisor.poll()
    for delay in (1.0, 2.0, 4.0):
        clock.advance(delay)
        supervisor.poll()                                # starts, and the process exits with code 3
        supervisor.children["knowledge_store"].proc.wait(timeout=10)
        supervisor.poll()
    sup = supervisor.supervision["knowledge_store"]
    assert sup.state == FAILED and sup.last_exit == "exited with code 3 while starting"
    assert state_of(supervisor, "rag_pipeline") == RUNNING


def test_a_restart_that_never_answers_serving_is_killed_at_the_start_timeout(supervisor, clock, healthy):
    healthy["knowledge_store"] = False
    kill(supervisor)
    supervisor.poll()
    clock.advance(1.0)
    supervisor.poll()
    proc = supervisor.children["knowledge_store"].proc
    assert state_of(supervisor) == STARTING
    clock.advance(POLICY.start_timeout_s)
    supervisor.poll()
    assert proc.poll() is not None                       # killed
    sup = supervisor.supervision["knowledge_store"]
    assert sup.state == WAITING and "not healthy within 30s" in sup.reason


def test_stopping_the_stack_restarts_nothing_and_removes_its_state(supervisor, clock):
    procs = [c.proc for c in supervisor.children.values()]
    supervisor.stop()
    clock.advance(3_600)
    supervisor.poll()
    assert all(p.poll() is not None for p in procs)
    assert [c.proc for c in supervisor.children.values()] == procs
    assert not supervisor.state_file.exists()


def test_the_restart_policy_reads_its_limits_from_the_environment(monkeypatch):
    monkeypatch.setenv("NUCLEUS_SUPERVISOR_MAX_RESTARTS", "4")
    monkeypatch.setenv("NUCLEUS_SUPERVISOR_RESTART_WINDOW_S", "120")
    policy = RestartPolicy.from_settings(CliSettings())
    assert (policy.max_restarts, policy.window_s) == (4, 120.0)
    assert policy.describe() == "at most 4 restarts per 2 min"
