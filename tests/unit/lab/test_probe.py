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
