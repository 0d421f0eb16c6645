"""Conversion in a worker process with an address-space limit (RLIMIT_AS) and a wall-time
limit per file, so no file — whatever a converter library does with it — can take the ingest's
memory or time.

    ConversionWorker.load(path, source_uri)
        ─▶ (pipe) worker: load_documents(path, limits) ─▶ Loaded | Rejected | MemoryError
        ◀─ the documents, or Rejected with the reason:
           "needs more than 1024 MB of memory"   MemoryError in the worker (it is restarted)
           "took longer than 60 s"               the worker is killed and restarted
           "stopped the converter (…)"            the worker died (a crash in a C library)

One worker serves a run file after file (starting Python and the converter libraries once,
~0.7 s); it starts on the first file and is restarted after any of the three above. The
worker is `python -m shared.documents.worker`, speaking length-prefixed pickles on its stdin
and stdout (its own prints go to stderr); it only ever runs this module.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from shared.documents.limits import MB, Limits, seconds
from shared.documents.loading import Loaded, load_documents
from shared.documents.rejected import OVER_LIMIT, Rejected
from shared.errors import Unavailable

_HEADER = struct.Struct("!Q")
START_TIMEOUT_S = 120.0          # to start Python and import the converters (not a file's time)
ROOT = Path(__file__).resolve().parents[2]


def _write(stream: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError()
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError()
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(fd: int, deadline: float | None) -> Any:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exact(fd, size, deadline))


class ConversionWorker:
    """Loads files in a worker process within `limits`; thread-safe (one file at a time)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits.from_env()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> "ConversionWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            env = dict(os.environ, **self.limits.env())
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
            # -P and cwd=ROOT: nothing of the folder being ingested is ever on the worker's import path
            proc = subprocess.Popen([sys.executable, "-P", "-m", "shared.documents.worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env=env, cwd=str(ROOT))
            self._proc = proc
            try:
                ready = _read(proc.stdout.fileno(), time.monotonic() + START_TIMEOUT_S)   # type: ignore[union-attr]
            except (TimeoutError, EOFError, OSError, pickle.UnpicklingError, struct.error):
                ready = None
            if ready != ("ready",):
                code = self._stop()
                raise Unavailable(f"the document conversion worker (python -m shared.documents.worker) "
                                  f"did not start ({_exit(code)}); its errors are above")
        return self._proc

    def _stop(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        return code

    def close(self) -> None:
        with self._lock:
            self._stop()

    def load(self, path: Path, source_uri: str = "") -> Loaded:
        """`load_documents(path, source_uri=…)` in the worker; raises `Rejected` with the reason."""
        with self._lock:
            proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            deadline = time.monotonic() + self.limits.timeout_s
            try:
                _write(proc.stdin, (str(path), source_uri, os.getcwd()))   # a relative path stays as given
                answer = _read(proc.stdout.fileno(), deadline)
            except TimeoutError:
                self._stop()
                raise Rejected(str(path), OVER_LIMIT, f"took longer than {seconds(self.limits.timeout_s)}") from None
            except (EOFError, BrokenPipeError, OSError, pickle.UnpicklingError, struct.error):
                code = self._stop()
                raise Rejected(str(path), OVER_LIMIT, f"stopped the converter ({_exit(code)}); "
                                                      f"it may need more than {self.limits.memory_mb} MB") from None
        kind = answer[0]
        if kind == "ok":
            return answer[1]
        if kind == "rejected":
            _, field, reason, problem = answer
            raise Rejected(field, reason, problem)
        self.close()                                          # "memory": a fresh heap for the next file
        raise Rejected(str(path), OVER_LIMIT, f"needs more than {self.limits.memory_mb} MB of memory")


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def _serve() -> None:
    """The worker: answer (path, source_uri, cwd) requests from stdin until it closes."""
    import logging
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's: it closes our stdin
    logging.basicConfig(level=logging.ERROR, format="conversion worker: %(name)s: %(message)s")
    limits = Limits.from_env()
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                                   # a library's print must not corrupt the protocol
    sys.stdout = sys.stderr
    # Import the converters before the limit, so the limit measures the file, not the libraries.
    import charset_normalizer, docx, openpyxl, pptx, pypdf  # noqa: E401,F401
    limit = limits.memory_mb * MB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _write(answers, ("ready",))
    while True:
        try:
            header = requests.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            path, source_uri, cwd = pickle.loads(requests.read(_HEADER.unpack(header)[0]))
        except (EOFError, OSError):
            return
        try:
            os.chdir(cwd)
            answer: Any = ("ok", load_documents(Path(path), source_uri=source_uri, limits=limits))
        except Rejected as err:
            answer = ("rejected", err.field, err.reason, err.message.removeprefix(f"{err.field}: "))
        except MemoryError:
            answer = ("memory",)
        except Exception as err:  # a converter bug must not end the run: this file fails, with what it raised
            answer = ("rejected", path, "conversion failed", f"could not be converted: {type(err).__name__}: {err}")
        try:
            _write(answers, answer)
        except MemoryError:
            _write(answers, ("memory",))


if __name__ == "__main__":
    _serve()
