"""The test processes wait for OpenMP work passively, as the service processes do; one MiniLM
model for the session's tests that only encode with it.

services/_openmp.py sets OMP_WAIT_POLICY=PASSIVE in every service process; the pytest process
(which loads torch, FAISS and ONNX Runtime in process for the unit tests) and the CLI processes
it starts would otherwise keep the busy-waiting defaults, and their idle OpenMP / ONNX Runtime
pool threads then spin on the cores the test's own numpy work and its service processes need
(tests/unit/benchmarks: 30 -> 19 s). Set here, before any test module imports torch; an
explicit OMP_WAIT_POLICY in the environment still wins. Tests of the policy itself set it per
test (tests/unit/llm_orchestration/test_onnx_runtime.py).
"""
import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def minilm_model():
    """all-MiniLM-L6-v2 as a sentence-transformers model (benchmarks.baseline `load_model`: offline, CPU),
    loaded once for the session. Tests only encode with it (read-only); tests of how the services load
    and serve the model start their own."""
    from benchmarks.baseline import load_model

    return load_model()
