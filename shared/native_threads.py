"""Name the OS thread a Python thread runs on, so `top -H`, `ps -L`, /proc and py-spy tell the
model's workers from the event loop.

Python names its threads (`threading.current_thread().name`) but not the OS threads under
them: every thread of a service reads "python" in `/proc/<pid>/task/<tid>/comm`. In one process
(`nucleus up --mode single`) that hides where the CPU goes: the event loop (tid = pid) runs the
three services' Python, the embedding model runs on its own workers. `name_native_thread` sets
the kernel's name of the calling thread (Linux `prctl(PR_SET_NAME)`, at most 15 bytes); on
another system, or if the call fails, it does nothing.

    ThreadPoolExecutor(..., initializer=name_native_thread, initargs=("embed",))
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_NAME = 15
MAX_NAME_BYTES = 15                 # the kernel's TASK_COMM_LEN is 16, with the terminating NUL

_prctl = None
if sys.platform.startswith("linux"):
    try:
        _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        _prctl = None


def name_native_thread(name: str) -> bool:
    """Give the calling OS thread `name` (cut to 15 bytes); whether the kernel took it."""
    if _prctl is None:
        return False
    raw = name.encode("ascii", "replace")[:MAX_NAME_BYTES]
    return _prctl(PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0) == 0


__all__ = ["MAX_NAME_BYTES", "name_native_thread"]
