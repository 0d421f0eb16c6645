"""Child processes the integration tests start: wait for their ready file, stop them."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path


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
