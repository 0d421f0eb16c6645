"""The probe's throughput options: client counts and per-process CPU accounting."""
import argparse
import os
import time

import pytest

from lab.probe import _client_counts, _cpu_seconds, _cpu_snapshot


def test_client_counts_are_parsed_and_bad_ones_name_what_is_accepted():
    assert _client_counts("1,4,16") == [1, 4, 16]
    assert _client_counts(" 2 , 8 ") == [2, 8]
    for bad in ("", "0,4", "-1", "a,b", "1,,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="client counts >= 1"):
            _client_counts(bad)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="CPU accounting reads /proc")
def test_cpu_seconds_of_a_process_grow_with_its_work_and_a_missing_process_is_none():
    before = _cpu_seconds(os.getpid())
    assert before is not None
    end = time.process_time() + 0.2
    while time.process_time() < end:      # burn 0.2 s of CPU in this process
        pass
    assert _cpu_seconds(os.getpid()) >= before + 0.15
    assert _cpu_seconds(2**22 + 12345) is None       # above the kernel's pid limit
    snapshot = _cpu_snapshot({"me": os.getpid(), "gone": 2**22 + 12345})
    assert snapshot["gone"] is None and snapshot["me"] >= before and snapshot["client"] > 0


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_named_model_thread_is_counted_as_the_model_and_the_main_thread_as_the_loop():
    """`shared.native_threads` names the OS thread; `thread_times` groups threads by that name
    (the model's "embed…" workers) and by tid = pid (the event loop)."""
    import threading

    from lab.probe import thread_group, thread_shares, thread_times
    from shared.native_threads import name_native_thread

    named: list[str] = []
    burnt, release = threading.Event(), threading.Event()

    def worker() -> None:
        assert name_native_thread("embed-concurrent-0")        # cut to the kernel's 15 bytes
        named.append(open(f"/proc/self/task/{threading.get_native_id()}/comm").read().strip())
        _burn(0.15)
        burnt.set()
        release.wait(10)

    pid = os.getpid()
    before = thread_times([pid])
    started = time.perf_counter()
    thread = threading.Thread(target=worker)
    thread.start()
    _burn(0.15)                                                  # the main thread: "loop"
    assert burnt.wait(10)
    snapshot = thread_times([pid])                               # while the worker still lives
    release.set()
    thread.join()
    assert named == ["embed-concurren"]
    assert snapshot["model"]["cpu"] - before["model"]["cpu"] >= 0.1
    assert snapshot["loop"]["cpu"] - before["loop"]["cpu"] >= 0.12
    shares = thread_shares(before, snapshot, time.perf_counter() - started, done=10)
    assert 0 < shares["loop_cores"] <= 1.05 and shares["loop_ms"] >= 12
    assert thread_group(pid, pid, "python") == "loop"
    assert thread_group(pid, pid + 1, "embed") == "model"
    assert thread_group(pid, pid + 1, "python") == "other"
    assert thread_times([2**22 + 12345]) == {} and thread_shares({}, snapshot, 1.0, 1) == {}


def test_loop_states_tell_a_busy_main_thread_from_one_idle_in_epoll():
    """A child whose main thread spins, then one that waits in epoll (as an event loop with
    nothing ready does): the sampler calls the first "running", the second "idle"."""
    import subprocess
    import sys

    from lab.probe import LoopStates

    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    wait = "import select\nselect.epoll().poll(30)"
    shares = {}
    for name, code in (("spin", spin), ("wait", wait)):
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            time.sleep(0.3)                             # started, in its loop
            with LoopStates([child.pid], interval_s=0.002) as states:
                time.sleep(0.4)
            shares[name] = states.shares()
        finally:
            child.kill()
            child.wait()
    assert shares["spin"]["running"] >= 0.8, shares
    assert shares["wait"]["idle"] >= 0.9, shares
    assert LoopStates([2**22 + 12345]).shares() == {}       # nothing sampled: no shares
