"""Child processes the integration tests start: wait for their ready file, stop them."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cli.supervisor import Supervisor


def wait_ready(path: Path, proc: subprocess.Popen, what: str, timeout_s: float = 120.0) -> dict:
    """The JSON a child writes to `path` once it serves; an error if it exits or times out first."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready in {timeout_s}s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def stop_stack(supervisor: Supervisor, grace_s: float = 10.0) -> None:
    """A test stack's teardown: SIGTERM to every service process at once, then `supervisor.stop()`
    (its /metrics, stack.json, and a kill for any process still running after `grace_s`). Each
    service still shuts down gracefully, but the stack's stop takes its slowest process's time, not
    the sum of all three (`Supervisor.stop` stops them one after the other in dependency order, for
    calls in flight; at a test's teardown none are)."""
    procs = [c.proc for c in supervisor.children.values() if c.proc is not None and c.proc.poll() is None]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass                                  # supervisor.stop() below kills it
    supervisor.stop()


ROOT = Path(__file__).resolve().parents[2]


def run_cli(argv: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 300.0
            ) -> subprocess.CompletedProcess:
    """`nucleus ARGV` as a process of its own, its output captured. Tests run the CLI this way,
    not in the pytest process: the CLI runs an asyncio loop of its own, and gRPC's asyncio side
    serves every loop of a process from one completion queue — an event that arrives for a loop
    already closed stops the queue's draining, and the suite's own gRPC calls then never finish."""
    import os
    import sys

    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "400", **(env or {})}
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s, env=environment)


def start_cli(argv: list[str], *, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`nucleus ARGV` as a process of its own (as `run_cli`), its output (stdout and stderr together)
    readable while it runs; the console draws its progress as on a terminal (TTY_COMPATIBLE=1)."""
    import os
    import sys

    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "400", "TTY_COMPATIBLE": "1", "NO_COLOR": "1",
                   **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=environment)


def read_until(proc: subprocess.Popen, pattern: str, timeout_s: float = 60.0) -> tuple[str, re.Match[str] | None]:
    """`proc`'s output up to the first match of `pattern` (terminal control sequences left out), and the
    match (None: it ended first)."""
    out, deadline = b"", time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            return out.decode(errors="replace"), None
        out += chunk
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
        match = re.search(pattern, text)
        if match:
            return text, match
    raise TimeoutError(f"no {pattern!r} in {timeout_s}s: {out.decode(errors='replace')}")
